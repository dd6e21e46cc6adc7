//! Snapshots of a sandbox ([`Sandbox::snapshot`]) and sandboxes started
//! from them ([`SandboxBuilder::snapshot`]); the store is
//! [`crate::snapshot`].
//!
//! Taking one writes the whole VM to the store (the guest stopped only for
//! that copy, as for a fork; one paused stays paused, one on disk is copied
//! from its saved file without starting it), pins its root image, names it
//! by the hash of what was saved, and then turns it into a template once:
//! a QEMU with its RAM in a shared memory file loads the saved stream and
//! writes its device state (`vmm::snapshot::whole_to_template`), never
//! running the guest. A start from it is then a clone like any template's:
//! QEMU maps that memory file copy on write and loads the device state,
//! and the guest gets its own id, hostname, entropy and clock before
//! anything runs. It never boots cold: that would be a sandbox without the
//! snapshot's programs and files.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};
use crate::saved::{self, SavedVm};
use crate::snapshot::{Snapshot, SnapshotMeta, SnapshotStore, SNAPSHOT_META_FORMAT};
use crate::state_dir;
use crate::template::{FileId, Template, TemplateInputs, TemplateStore, TEMPLATE_FORMAT};
use crate::vmm::{self, Backend, GuestMemory, QemuVm, VmPaths};
use crate::Accel;

use super::builder::SandboxBuilder;
use super::connect::Deadline;
use super::launched::Launched;
use super::started::Origin;
use super::Sandbox;

/// How long a start waits for another start (or the take) that is turning
/// the same snapshot into its clones' template.
const CLONES_LOCK_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a clone's agent may take to answer.
const CLONE_READY_TIMEOUT: Duration = Duration::from_secs(15);

/// A snapshot just taken, and what taking it cost.
#[derive(Debug, Clone)]
pub struct TakenSnapshot {
    pub snapshot: Snapshot,
    /// How long the sandbox was stopped while its memory was copied (zero
    /// when it was paused or on disk already).
    pub paused: Duration,
    /// From the call until sandboxes could start from it.
    pub took: Duration,
}

impl Sandbox {
    /// Saves this sandbox's memory, programs and files into `store` as a
    /// snapshot that new sandboxes start from
    /// ([`SandboxBuilder::snapshot`]); this sandbox then goes on as it was
    /// (running, paused or on disk). A running guest is stopped only while
    /// its memory is written ([`TakenSnapshot::paused`]); a call open on it
    /// at that moment may fail with
    /// [`Error::ForkedDuringCall`](crate::Error::ForkedDuringCall), as for
    /// a fork.
    ///
    /// A sandbox with a workspace cannot be snapshotted (the workspace is a
    /// disk outside its memory); neither can one on the vsock channel.
    pub async fn snapshot(&self, store: &SnapshotStore) -> Result<TakenSnapshot> {
        let begin = Instant::now();
        if self.builder.workspace.is_some() {
            return Err(Error::CannotSave {
                reason: "a sandbox with a workspace cannot be snapshotted: the workspace is a \
                         disk outside its memory"
                    .into(),
            });
        }
        let mut vm = self.vm.saved_vm()?;
        let taking = store.begin()?;
        let (header, paused) = self.vm.save_copy(&taking.machine_path()).await?;
        taking.pin_root(&mut vm)?;
        let hashing = tokio::task::spawn_blocking(move || {
            let id = taking.content_id();
            (taking, id)
        });
        let (taking, id) = hashing
            .await
            .map_err(|e| Error::snapshot("hashing the snapshot", e))?;
        let (id, stream_bytes) = id?;
        let parent = match &self.origin {
            Origin::Snapshot { id } => Some(id.clone()),
            _ => None,
        };
        let meta = SnapshotMeta {
            format: SNAPSHOT_META_FORMAT,
            id,
            vm,
            qemu_version: header.qemu_version,
            agent_version: self.agent_version.clone(),
            protocol_revision: self.features.revision(),
            source: self.id.clone(),
            parent,
            user: self.default_user.clone(),
            cwd: self.default_cwd.clone(),
            env: self.builder.env.clone(),
            created_unix_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            paused_ms: u64::try_from(paused.as_millis()).unwrap_or(u64::MAX),
            stream_bytes,
        };
        let snapshot = taking.commit(meta)?;
        // Its clones' template is made now, so the first start is as fast
        // as every later one.
        self.builder.clones_template(&snapshot).await?;
        tracing::info!(
            sandbox = self.id,
            snapshot = snapshot.id(),
            ?paused,
            took = ?begin.elapsed(),
            "snapshot taken"
        );
        Ok(TakenSnapshot {
            snapshot,
            paused,
            took: begin.elapsed(),
        })
    }
}

impl SandboxBuilder {
    /// Starts from `snapshot` (see [`Sandbox::snapshot`]): its memory,
    /// programs and files, its root image, memory size and vCPUs, and the
    /// default user, directory and environment of the sandbox it was taken
    /// from (under this builder's own environment). The guest gets its own
    /// id, hostname, entropy and clock, and this builder's policies,
    /// network and trusted roots. Change neither the image nor the size
    /// afterwards: a start that does not fit the snapshot is an error.
    pub fn snapshot(mut self, snapshot: &Snapshot) -> Self {
        let meta = snapshot.meta();
        self.memory_mib = meta.vm.memory_mib;
        self.vcpus = meta.vm.vcpus;
        self.image = meta
            .vm
            .disks
            .iter()
            .find(|disk| disk.read_only)
            .map(|disk| disk.path.clone());
        let own: Vec<(String, String)> = std::mem::take(&mut self.env);
        self.env = meta.env.clone();
        for (key, value) in own {
            self.env.retain(|(k, _)| *k != key);
            self.env.push((key, value));
        }
        if meta.user.is_some() {
            self.default_user.clone_from(&meta.user);
        }
        if meta.cwd.is_some() {
            self.default_cwd.clone_from(&meta.cwd);
        }
        self.from_snapshot = Some(snapshot.clone());
        self
    }

    /// Starts a clone of `snapshot`, making its clones' template first if
    /// this host's QEMU has none yet.
    pub(super) async fn launch_snapshot(
        &self,
        snapshot: &Snapshot,
        accel: Accel,
    ) -> Result<Launched> {
        let recorded: Accel = snapshot
            .meta()
            .vm
            .accel
            .parse()
            .map_err(super::error::ConfigError::from)?;
        if recorded != accel || self.memory_mib != snapshot.meta().vm.memory_mib {
            return Err(Error::CannotSave {
                reason: format!(
                    "snapshot {} was taken with {} MiB under {}; start it with the same \
                     memory and accelerator",
                    snapshot.id(),
                    snapshot.meta().vm.memory_mib,
                    snapshot.meta().vm.accel
                ),
            });
        }
        let template = self.clones_template(snapshot).await?;
        let dir = state_dir::create(&self.state_dir_base)?;
        let paths = VmPaths::in_dir(dir.path());
        let mut config = snapshot.meta().vm.qemu_config(&paths)?;
        config.memory = GuestMemory::File {
            path: template.memory_path(),
            shared: false,
        };
        let state = template
            .open_state()
            .map_err(|e| Error::snapshot("opening the snapshot's device state", e))?;
        let qemu = QemuVm::start(&config, paths.clone(), self.vmm_user, self.agent_port).await?;
        let vmm_started = Instant::now();
        if let Err(error) = vmm::snapshot::restore(&paths.qmp_socket, &state).await {
            tracing::debug!(console = %qemu.diagnostics(2048), "the snapshot's clone did not restore");
            return Err(Error::snapshot("starting a clone of the snapshot", error));
        }
        let deadline = Deadline {
            at: Instant::now() + CLONE_READY_TIMEOUT,
            timeout: CLONE_READY_TIMEOUT,
        };
        Launched::connect(dir, Backend::Qemu(Box::new(qemu)), vmm_started, deadline).await
    }

    /// The template `snapshot`'s clones map under this host's QEMU: found,
    /// or made from the saved stream under its key's lock.
    #[tracing::instrument(name = "snapshot_template", skip_all)]
    pub(super) async fn clones_template(&self, snapshot: &Snapshot) -> Result<Template> {
        let failed = |e: crate::template::TemplateError| {
            Error::snapshot("the snapshot's clones' template", e)
        };
        let qemu_binary = FileId::of(&vmm::locate_qemu()?)
            .map_err(|e| Error::snapshot("reading the QEMU binary", e))?;
        let key = snapshot.clone_key(&qemu_binary);
        let store = snapshot.clones();
        if let Some(template) = usable(&store, &key) {
            return Ok(template);
        }
        let lock = store
            .lock(&key, CLONES_LOCK_TIMEOUT)
            .await
            .map_err(failed)?;
        if let Some(template) = usable(&store, &key) {
            return Ok(template);
        }
        let begin = Instant::now();
        let meta = snapshot.meta();
        let building = store
            .begin(&key, u64::from(meta.vm.memory_mib) << 20, &lock)
            .map_err(failed)?;
        let dir = state_dir::create(&self.state_dir_base)?;
        let paths = VmPaths::in_dir(dir.path());
        let mut config = meta.vm.qemu_config(&paths)?;
        config.memory = GuestMemory::File {
            path: building.memory_path(),
            shared: true,
        };
        let (stream, header) = saved::open_snapshot(&snapshot.machine_path())?;
        let state = building.create_state().map_err(failed)?;
        let mut qemu =
            QemuVm::start(&config, paths.clone(), self.vmm_user, self.agent_port).await?;
        let loaded = vmm::snapshot::whole_to_template(
            &paths.qmp_socket,
            &stream,
            &header.qemu_version,
            &state,
        )
        .await;
        if loaded.is_err() {
            tracing::debug!(console = %qemu.diagnostics(2048), "the snapshot did not load");
        }
        qemu.kill();
        loaded
            .map_err(|e| Error::snapshot("loading the snapshot to make its clones' template", e))?;
        let template = building
            .commit(
                clone_inputs(&meta.vm, qemu_binary),
                meta.agent_version.clone(),
            )
            .map_err(failed)?;
        tracing::info!(snapshot = snapshot.id(), took = ?begin.elapsed(), "snapshot ready to clone");
        Ok(template)
    }
}

/// The clones' template `key` in `store` if it is there and whole; a
/// corrupt one is removed (and made again).
fn usable(store: &TemplateStore, key: &str) -> Option<Template> {
    match store.find(key) {
        Ok(found) => found,
        Err(error) => {
            tracing::warn!(key, error = %crate::error_chain(&error), "a snapshot's clones' template is corrupt; making it again");
            if let Err(error) = store.remove(key) {
                tracing::warn!(%error, "cannot remove the corrupt template");
            }
            None
        }
    }
}

/// What a snapshot's clones' template records as its inputs: the saved
/// machine's files as they are now, and the QEMU binary that loaded it.
fn clone_inputs(vm: &SavedVm, qemu: FileId) -> TemplateInputs {
    let file = |path: &std::path::Path| {
        FileId::of(path).unwrap_or_else(|_| FileId {
            path: path.to_owned(),
            size: 0,
            mtime_ns: 0,
            inode: 0,
        })
    };
    TemplateInputs {
        format: TEMPLATE_FORMAT,
        airlock_version: env!("CARGO_PKG_VERSION").to_owned(),
        qemu,
        kernel: file(&vm.kernel),
        initramfs: file(&vm.initramfs),
        image: vm
            .disks
            .iter()
            .find(|disk| disk.read_only)
            .map(|disk| file(&disk.path)),
        memory_mib: vm.memory_mib,
        vcpus: vm.vcpus,
        accel: vm.accel.clone(),
        cpu: vm.cpu.clone().unwrap_or_default(),
        kernel_cmdline: vm.kernel_cmdline.clone(),
        serial_ports: vm
            .serial_ports
            .iter()
            .map(|(name, _)| name.clone())
            .collect(),
    }
}
