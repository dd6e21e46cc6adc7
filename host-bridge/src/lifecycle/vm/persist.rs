//! Saving a sandbox's whole VM to disk and starting it again.
//!
//! - [`VmShared::pause_to_disk`]: stop the guest, write devices, vCPUs and
//!   RAM to a new snapshot generation (see `saved`), then end the QEMU
//!   process: the sandbox is [`SandboxState::OnDisk`] and holds no memory.
//! - a resume (also the one a call makes) starts a new QEMU in the same
//!   state directory, loads the newest good generation, checks that the
//!   agent answers, and pushes the host's clock to the guest; open streams
//!   re-attach from their offsets (`exec::execution`).
//! - [`VmShared::save_copy`]: the same snapshot for a fork, after which the
//!   VM runs on.
//!
//! The VM process is ended under the VMM lock and with the state already
//! `OnDisk`, so the watchdog never reads that exit as the VM's own.
//!
//! Before either snapshot the host quiesces its connection: it ends the
//! channel's connection between two HTTP/2 frames (`transport::Quiesce`)
//! and opens one that carries only the opening, whose answer shows that
//! the agent has read every byte before it. The snapshot then holds no
//! frame the guest has half read, which a restore's next connection would
//! otherwise complete with its own bytes. Calls open at that moment fail
//! (`SavedDuringCall`, or `ForkedDuringCall`); output streams
//! re-attach. A paused (frozen) sandbox runs for the few milliseconds this
//! takes.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use airlock_proto::v1::health_client::HealthClient;
use airlock_proto::v1::CheckRequest;

use super::{lock, CutFor, SandboxState, VmShared};
use crate::error::{Error, Result};
use crate::lifecycle::SnapshotProblem;
use crate::saved::{
    self, unix_ms, GoodSnapshot, Restored, SavedRecord, SavedStore, SavedUsage, SavedVm,
    SnapshotHeader, Writing, SNAPSHOT_FORMAT,
};
use crate::transport::{AgentStream, CapMessages, Ended};
use crate::vmm::{self, QemuVm, VmPaths, VmmUser};

/// How long a restored agent may take to answer.
const RESTORED_ANSWER_TIMEOUT: Duration = Duration::from_secs(15);
/// How long the host waits for the frame it is writing to finish before a
/// snapshot ends its connection (the guest must read it).
const FRAME_END_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the agent may take to answer the opening before a snapshot.
const QUIESCED_OPENING_TIMEOUT: Duration = Duration::from_secs(5);
/// After a connection that ended inside a frame, how long the guest is
/// given to see the hangup before the next opening's flush.
const HANGUP_SETTLE: Duration = Duration::from_millis(200);

/// What a sandbox needs to be saved to disk and started again.
#[derive(Debug)]
pub(crate) struct Persistence {
    pub store: SavedStore,
    /// The saved record as it is (or will be) on disk.
    pub record: Mutex<SavedRecord>,
    /// The state directory the VM runs in, every time.
    pub paths: VmPaths,
    pub vmm_user: VmmUser,
    pub agent_port: u32,
}

impl Persistence {
    /// How the VM running in the state directory `dir` is saved into
    /// `store` under `record`, and started again.
    pub fn new(
        store: SavedStore,
        record: SavedRecord,
        dir: &Path,
        vmm_user: VmmUser,
        agent_port: u32,
    ) -> Self {
        Persistence {
            store,
            record: Mutex::new(record),
            paths: VmPaths::in_dir(dir),
            vmm_user,
            agent_port,
        }
    }
}

impl VmShared {
    fn persistence(&self) -> Result<&Persistence> {
        self.persistence.as_ref().ok_or_else(|| Error::CannotSave {
            reason: "only a QEMU sandbox on the serial channel can be saved \
                     (QEMU cannot snapshot the vsock device)"
                .into(),
        })
    }

    /// The machine this sandbox runs, for a fork's children.
    pub fn saved_vm(&self) -> Result<SavedVm> {
        Ok(lock(&self.persistence()?.record).vm.clone())
    }

    /// Saves the VM to disk and ends its process. Saving a sandbox that is
    /// on disk does nothing.
    pub async fn pause_to_disk(&self) -> Result<()> {
        let _transition = self.transition.lock().await;
        self.pause_to_disk_locked().await
    }

    /// Saves to disk only if still no call is in flight after `after`.
    pub async fn pause_to_disk_if_idle(&self, after: Duration) -> Result<bool> {
        let _transition = self.transition.lock().await;
        if self.state() != SandboxState::Running || self.idle_for() < after {
            return Ok(false);
        }
        self.pause_to_disk_locked().await.map(|()| true)
    }

    async fn pause_to_disk_locked(&self) -> Result<()> {
        let frozen = match self.state() {
            SandboxState::Running => false,
            SandboxState::Paused => true,
            SandboxState::OnDisk => return Ok(()),
            SandboxState::Ended(reason) => return Err(Error::SandboxEnded { reason }),
        };
        let persistence = self.persistence()?;
        let begin = Instant::now();
        let mut record = lock(&persistence.record).clone();
        record.usage = self.saved_usage();
        persistence.store.ensure()?;
        let (generation, writing) = persistence.store.begin(&record)?;
        let _opening_only = self.quiesce(frozen, CutFor::Save).await?;
        let header = self
            .write_snapshot(persistence, &writing, &record.id, frozen)
            .await?;
        let header = match persistence
            .store
            .commit(&mut record, generation, writing, header)
        {
            Ok(header) => header,
            Err(error) => {
                // The VM is stopped but whole: it runs on as before.
                self.run_again(persistence, frozen).await;
                return Err(error.into());
            }
        };
        *lock(&persistence.record) = record;
        self.sample_guest_cpu();
        {
            let mut vmm = lock(&self.vmm);
            {
                let mut clock = lock(&self.clock);
                if clock.paused_since.is_none() {
                    clock.paused_since = Some(Instant::now());
                    clock.pauses += 1;
                }
                clock.on_disk_since = Some(Instant::now());
                clock.saves += 1;
                clock.guest_cpu_base = clock.last_guest_cpu;
            }
            self.state.send_replace(SandboxState::OnDisk);
            vmm.kill();
        }
        self.note();
        tracing::info!(
            generation,
            stream_mib = header.stream_bytes >> 20,
            took = ?begin.elapsed(),
            "sandbox saved to disk"
        );
        Ok(())
    }

    /// Quiesces the agent's connection before a snapshot (see the module
    /// docs) and returns the opening-only connection, to be kept open
    /// until the VM is stopped. A frozen VM is thawed for it (and frozen
    /// again by `run_again` if the save fails). Failing to quiesce is
    /// logged, not fatal: a restore's flush still ends a stale connection.
    async fn quiesce(&self, frozen: bool, purpose: CutFor) -> Result<Option<AgentStream>> {
        if frozen {
            lock(&self.vmm).freeze(false)?;
        }
        self.count_cut(purpose);
        let ended = self.quiesce.end_between_frames(FRAME_END_TIMEOUT).await;
        tracing::debug!(?purpose, ?ended, "agent connection ended for a snapshot");
        if ended == Ended::InsideFrame {
            tracing::warn!(
                "the agent connection ended inside a frame before a snapshot; \
                 giving the guest time to see the hangup"
            );
            tokio::time::sleep(HANGUP_SETTLE).await;
        }
        match self
            .transport
            .connect_within(QUIESCED_OPENING_TIMEOUT)
            .await
        {
            Ok(stream) => Ok(Some(stream)),
            Err(error) => {
                tracing::warn!(
                    error = %crate::error_chain(&error),
                    "the agent did not answer an opening before a snapshot"
                );
                Ok(None)
            }
        }
    }

    /// Writes the VM into `writing` and returns the header to commit with
    /// it. The VM is left stopped on success; on failure it runs again as
    /// it did (`frozen`: thawed but stopped, then frozen again).
    async fn write_snapshot(
        &self,
        persistence: &Persistence,
        writing: &Writing,
        sandbox_id: &str,
        frozen: bool,
    ) -> Result<SnapshotHeader> {
        let qmp = &persistence.paths.qmp_socket;
        // QMP needs QEMU's process running; `stop` keeps the guest still.
        if frozen {
            lock(&self.vmm).freeze(false)?;
        }
        match vmm::snapshot::save_whole(qmp, writing.file()).await {
            Ok(qemu_version) => Ok(SnapshotHeader {
                format: SNAPSHOT_FORMAT,
                qemu_version,
                stream_bytes: 0,
                memory_mib: lock(&persistence.record).vm.memory_mib,
                sandbox_id: sandbox_id.to_owned(),
                created_unix_secs: unix_ms() / 1000,
            }),
            Err(error) => {
                self.run_again(persistence, frozen).await;
                Err(Error::snapshot("saving the VM", error))
            }
        }
    }

    /// Runs a VM stopped by a save that failed, as it ran before (frozen
    /// again if it was). A failure here is logged: the watchdog's probe
    /// ends a VM that no longer answers.
    async fn run_again(&self, persistence: &Persistence, frozen: bool) {
        if let Err(error) = vmm::snapshot::cont(&persistence.paths.qmp_socket).await {
            tracing::warn!(error = %crate::error_chain(&error), "cannot run the VM again after a failed save");
        }
        if frozen {
            if let Err(error) = lock(&self.vmm).freeze(true) {
                tracing::warn!(%error, "cannot freeze the VM again after a failed save");
            }
        }
    }

    /// Writes a snapshot of the VM to `target` (a fork's or a named
    /// snapshot's source); the VM then goes on as it was: running, paused,
    /// or on disk (whose newest good generation is copied, without starting
    /// it). Returns the snapshot's header and how long a running guest was
    /// stopped for it (zero for one paused or on disk).
    pub async fn save_copy(&self, target: &Path) -> Result<(SnapshotHeader, Duration)> {
        let _transition = self.transition.lock().await;
        let frozen = match self.state() {
            SandboxState::Running => false,
            SandboxState::Paused => true,
            SandboxState::OnDisk => {
                let persistence = self.persistence()?;
                let record = lock(&persistence.record).clone();
                let header =
                    persistence
                        .store
                        .copy_newest(&record, &vmm::qemu_version()?, target)?;
                return Ok((header, Duration::ZERO));
            }
            SandboxState::Ended(reason) => return Err(Error::SandboxEnded { reason }),
        };
        let persistence = self.persistence()?;
        let writing = Writing::create(target)?;
        let id = lock(&persistence.record).id.clone();
        let opening_only = self.quiesce(frozen, CutFor::Fork).await?;
        let stopped = Instant::now();
        let header = self
            .write_snapshot(persistence, &writing, &id, frozen)
            .await?;
        let resumed = vmm::snapshot::cont(&persistence.paths.qmp_socket).await;
        if frozen {
            lock(&self.vmm).freeze(true)?;
        }
        // The agent goes back to waiting for an opening; the next call
        // opens a connection.
        drop(opening_only);
        resumed.map_err(|error| Error::snapshot("running the VM again after saving it", error))?;
        let stopped = if frozen {
            Duration::ZERO
        } else {
            stopped.elapsed()
        };
        // The guest's clock stood still while it was stopped.
        if !frozen && self.push_clock {
            self.push_clock().await;
        }
        Ok((writing.commit(header)?, stopped))
    }

    /// Starts the VM again from its newest good snapshot (the sandbox is on
    /// disk and the transition lock is held).
    pub(super) async fn restore_locked(&self) -> Result<()> {
        let persistence = self.persistence()?;
        let record = lock(&persistence.record).clone();
        let begin = Instant::now();
        let snapshot = persistence
            .store
            .open_newest(&record, &vmm::qemu_version()?)?;
        let refused: Vec<u64> = snapshot.skipped.iter().map(|(g, _)| *g).collect();
        let (vm, restored) = relaunch(
            &record.vm,
            snapshot,
            &persistence.paths,
            persistence.vmm_user,
            persistence.agent_port,
        )
        .await?;
        {
            let mut vmm = lock(&self.vmm);
            self.pid.store(vm.qemu_pid(), Ordering::Relaxed);
            *vmm = crate::vmm::Backend::Qemu(Box::new(vm));
        }
        // The first call opens the new connection (which takes long under
        // TCG); the clock push follows on it, so its time is not stale.
        let mut health = HealthClient::new(self.raw_channel.clone()).capped();
        let answered = match tokio::time::timeout(
            RESTORED_ANSWER_TIMEOUT,
            health.check(CheckRequest {}),
        )
        .await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(status)) => Err(SnapshotProblem::AgentRefused(status)),
            Err(_) => Err(SnapshotProblem::NoAnswer(RESTORED_ANSWER_TIMEOUT)),
        };
        if let Err(problem) = answered {
            tracing::warn!(console = %lock(&self.vmm).diagnostics(2048), "the restored agent does not answer");
            lock(&self.vmm).kill();
            return Err(Error::snapshot("restoring the VM", problem));
        }
        {
            let mut clock = lock(&self.clock);
            if let Some(since) = clock.paused_since.take() {
                clock.paused_total += since.elapsed();
            }
            if let Some(since) = clock.on_disk_since.take() {
                clock.on_disk_total += since.elapsed();
            }
        }
        *lock(&self.quiet_since) = Instant::now();
        if !refused.is_empty() {
            self.drop_generations(persistence, &refused);
        }
        if self.push_clock {
            self.push_clock().await;
        }
        self.state.send_replace(SandboxState::Running);
        self.note();
        tracing::info!(
            pid = self.pid(),
            generation = restored.generation,
            took = ?begin.elapsed(),
            "sandbox restored from disk"
        );
        *lock(&self.last_restore) = Some(restored);
        Ok(())
    }

    /// Records a restore made before this handle existed.
    pub fn set_last_restore(&self, restored: Restored) {
        *lock(&self.last_restore) = Some(restored);
    }

    /// Forgets snapshot generations that failed their checks, so the next
    /// save keeps a good one as its predecessor.
    fn drop_generations(&self, persistence: &Persistence, refused: &[u64]) {
        let mut record = lock(&persistence.record).clone();
        record.generations.retain(|g| !refused.contains(g));
        if let Err(error) = persistence.store.write_record(&record) {
            tracing::warn!(error = %crate::error_chain(&error), "cannot update the saved record");
            return;
        }
        for &generation in refused {
            persistence.store.remove_generation(&record.id, generation);
        }
        *lock(&persistence.record) = record;
    }

    /// What the last restore from disk used, if there was one.
    pub fn last_restore(&self) -> Option<Restored> {
        lock(&self.last_restore).clone()
    }

    /// Marks the saved files as outliving the sandbox's end if it is on
    /// disk now (a dropped handle leaves a saved sandbox to be restored).
    pub fn keep_if_on_disk(&self) {
        if self.state() == SandboxState::OnDisk {
            self.keep_saved.store(true, Ordering::SeqCst);
        }
    }

    /// Removes the sandbox's saved files (at its end).
    pub(super) fn forget_saved(&self) {
        let Some(persistence) = &self.persistence else {
            return;
        };
        let id = lock(&persistence.record).id.clone();
        match persistence.store.remove(&id) {
            Ok(()) => tracing::debug!(id, "saved files removed"),
            Err(saved::SavedError::NotSaved { .. }) => {}
            Err(error) => {
                tracing::warn!(id, error = %crate::error_chain(&error), "cannot remove the saved files")
            }
        }
    }

    /// The usage figures a save records.
    fn saved_usage(&self) -> SavedUsage {
        let usage = self.usage();
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        SavedUsage {
            wall_ms: ms(usage.wall),
            running_ms: ms(usage.running),
            guest_cpu_ms: ms(usage.guest_cpu),
            on_disk_ms: ms(lock(&self.clock).on_disk_total),
            saved_at_unix_ms: unix_ms(),
        }
    }

    /// Starts the clock of a sandbox restored in a new process: wall time
    /// goes on from the record, and the time on disk counts as paused.
    pub fn carry_usage(&self, usage: &SavedUsage) {
        let on_disk = Duration::from_millis(unix_ms().saturating_sub(usage.saved_at_unix_ms));
        let wall = Duration::from_millis(usage.wall_ms) + on_disk;
        let running = Duration::from_millis(usage.running_ms);
        let mut clock = lock(&self.clock);
        if let Some(started) = Instant::now().checked_sub(wall) {
            clock.started = started;
        }
        if let Some(started) = SystemTime::now().checked_sub(wall) {
            clock.started_wall = started;
        }
        clock.paused_total = wall.saturating_sub(running);
        clock.guest_cpu_base = Duration::from_millis(usage.guest_cpu_ms);
        clock.on_disk_total = Duration::from_millis(usage.on_disk_ms) + on_disk;
        clock.last_guest_cpu = clock.guest_cpu_base;
    }
}

/// Starts QEMU for `vm` in `paths`, waiting for its state, and loads
/// `snapshot` into it; the guest runs when this returns.
pub(crate) async fn relaunch(
    vm: &SavedVm,
    snapshot: GoodSnapshot,
    paths: &VmPaths,
    user: VmmUser,
    agent_port: u32,
) -> Result<(QemuVm, Restored)> {
    let begin = Instant::now();
    // QEMU binds its sockets afresh; stale ones would only be dialled.
    for stale in [&paths.agent_socket, &paths.qmp_socket] {
        if let Err(error) = std::fs::remove_file(stale) {
            if error.kind() != std::io::ErrorKind::NotFound {
                tracing::debug!(path = %stale.display(), %error, "cannot remove a stale socket");
            }
        }
    }
    let config = vm.qemu_config(paths)?;
    let qemu = QemuVm::start(&config, paths.clone(), user, agent_port).await?;
    if let Err(error) = vmm::snapshot::restore_whole(
        &paths.qmp_socket,
        &snapshot.file,
        &snapshot.header.qemu_version,
    )
    .await
    {
        tracing::debug!(console = %qemu.diagnostics(2048), "the VM did not restore");
        return Err(Error::snapshot("restoring the VM", error));
    }
    Ok((
        qemu,
        Restored {
            generation: snapshot.generation,
            refused: snapshot
                .skipped
                .iter()
                .map(|(generation, error)| {
                    format!("generation {generation}: {}", crate::error_chain(error))
                })
                .collect(),
            took: begin.elapsed(),
        },
    ))
}
