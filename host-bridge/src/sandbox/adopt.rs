//! Sandboxes that outlive their owner (see [`crate::adopt`]): the record an
//! adoptable sandbox starts with, [`SandboxBuilder::adopt`], which rebuilds
//! a [`Sandbox`] around a VM that still runs (as `restore` rebuilds one
//! around a new VM from a snapshot), and [`Sandbox::detach`].
//!
//! An adoption claims the sandbox (`adopt::Claim`: a lock, the owner gone
//! or detached, the VMM process the recorded one, the lifetime not passed),
//! takes over the VMM process (not our child: `vmm::VmmProcess`), makes
//! this process the owner, reaches the agent on a new connection (a frozen
//! VM is thawed for that and frozen again), turns the network on again
//! with the recorded gateway, and hands the VM to a watchdog with what is
//! left of its lifetime. Until the sandbox is whole a failure leaves the
//! VM running (and frozen, if it was) and gives it back for another
//! attempt.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use airlock_proto::v1::CheckResponse;
use tokio::sync::OwnedSemaphorePermit;

use super::builder::{GuestChannel, SandboxBuilder};
use super::connect::Deadline;
use super::launched::Launched;
use super::network::{recorded_options, SandboxNetwork};
use super::parts::SandboxParts;
use super::started::{BootTimings, Origin};
use super::Sandbox;
use crate::adopt::{
    AdoptError, AdoptRecord, Claim, Keeper, RecordedBackend, RecordedClock, RecordedDefaults,
    RecordedIdle, RecordedNetwork, RecordedPolicy, RECORD_VERSION,
};
use crate::error::{Error, Result};
use crate::features::AgentFeatures;
use crate::lifecycle::vm::{Left, Persistence, VmShared};
use crate::saved::{SavedError, SavedRecord, SavedStore, SavedVm};
use crate::state_dir::owner::ProcessId;
use crate::state_dir::{self, StateDir};
use crate::vmm::{Backend, BackendKind, Disk, ProcessVm, QemuVm, VmPaths, VmmError, VmmProcess};
use crate::workspace::Workspace;
use crate::Accel;

/// What an adoption record is made of, besides the builder's policies.
pub(super) struct Recorded<'a> {
    pub id: &'a str,
    /// The machine QEMU runs (`None` on the process backend).
    pub machine: Option<SavedVm>,
    pub accel: Accel,
    pub workspace: Option<PathBuf>,
    /// The VMM process, while it runs.
    pub vmm: Option<ProcessId>,
    pub clock: RecordedClock,
    pub network: Option<RecordedNetwork>,
}

impl SandboxBuilder {
    /// The adoption record of a sandbox started (or adopted) with this
    /// builder.
    pub(super) fn adoption_record(&self, parts: Recorded<'_>) -> Result<AdoptRecord> {
        let backend = match (&self.backend, parts.machine) {
            (BackendKind::Qemu, Some(machine)) => RecordedBackend::Qemu { machine },
            (BackendKind::Qemu, None) => {
                return Err(Error::Config(
                    "only a QEMU sandbox on the serial channel can be adoptable".into(),
                ))
            }
            (BackendKind::Process { agent }, _) => RecordedBackend::Process {
                agent: agent.clone(),
            },
        };
        Ok(AdoptRecord {
            version: RECORD_VERSION,
            id: parts.id.to_owned(),
            backend,
            accel: parts.accel.qemu_name().to_owned(),
            agent_port: self.agent_port,
            workspace: parts.workspace,
            vmm: parts.vmm.ok_or(Error::Vmm(VmmError::Exited))?,
            clock: parts.clock,
            policy: RecordedPolicy {
                max_lifetime_ms: self.max_lifetime.map(crate::adopt::ms),
                idle: self.idle.map(|(after, policy)| RecordedIdle {
                    after_ms: crate::adopt::ms(after),
                    policy: policy.into(),
                }),
                paused_calls: self.paused_calls.into(),
                unresponsive_after_ms: self.unresponsive_after.map(crate::adopt::ms),
                console_log_budget: self.console_log_budget,
            },
            defaults: RecordedDefaults {
                limits: self.default_limits.into(),
                user: self.default_user.clone(),
                cwd: self.default_cwd.clone(),
                env: self.env.clone(),
            },
            network: parts.network,
        })
    }

    /// This builder with everything the record says about the sandbox: its
    /// machine, workspace, policies, defaults and network (the builder's
    /// own network options give only the resolver).
    fn adopted(mut self, record: &AdoptRecord) -> Result<Self> {
        match &record.backend {
            RecordedBackend::Qemu { machine } => {
                self.backend = BackendKind::Qemu;
                self.kernel = machine.kernel.clone();
                self.initramfs = machine.initramfs.clone();
                self.memory_mib = machine.memory_mib;
                self.vcpus = machine.vcpus;
                self.image = machine
                    .disks
                    .iter()
                    .find(|disk| disk.id == Disk::ROOT)
                    .map(|disk| disk.path.clone());
            }
            RecordedBackend::Process { agent } => {
                self.backend = BackendKind::Process {
                    agent: agent.clone(),
                };
            }
        }
        self.channel = GuestChannel::Serial;
        self.agent_port = record.agent_port;
        self.workspace = record.workspace.clone();
        let policy = &record.policy;
        self.max_lifetime = policy.max_lifetime_ms.map(Duration::from_millis);
        self.idle = policy
            .idle
            .map(|idle| (Duration::from_millis(idle.after_ms), idle.policy.into()));
        self.paused_calls = policy.paused_calls.into();
        self.unresponsive_after = policy.unresponsive_after_ms.map(Duration::from_millis);
        self.console_log_budget = policy.console_log_budget;
        self.default_limits = record.defaults.limits.into();
        self.default_user = record.defaults.user.clone();
        self.default_cwd = record.defaults.cwd.clone();
        self.env = record.defaults.env.clone();
        self.network = record
            .network
            .as_ref()
            .map(|network| recorded_options(network, self.network.as_ref()))
            .transpose()?;
        self.adoptable = true;
        self.pooled = false;
        self.from_template = false;
        Ok(self)
    }

    /// Takes over the sandbox `id` (its state directory under
    /// [`state_dir_base`](SandboxBuilder::state_dir_base)) whose owner died
    /// or [detached](Sandbox::detach) it, while its VM still runs: the
    /// same VM, its programs running on and its files where they were
    /// (see [`crate::adopt`]). Its machine, policies (lifetime ceiling,
    /// idle, paused calls), defaults (limits, user, environment) and
    /// network (rules, secrets, CA) are the recorded ones; this builder
    /// gives where things are (state directory base, saved directory), who
    /// runs a VM restored from disk later, and the resolver of its network
    /// (default the system's). Its lifetime ceiling still counts from its
    /// start, and its usage goes on from the record. A VM that was frozen
    /// comes back [`Paused`](crate::SandboxState::Paused).
    ///
    /// Refused (with [`AdoptError`]) when the sandbox was not started
    /// [adoptable](SandboxBuilder::adoptable), its owner still holds it,
    /// another adoption is under way, its VM is gone or its lifetime
    /// passed. A failure after that leaves the VM running, for another
    /// attempt.
    pub async fn adopt(self, id: &str) -> Result<Sandbox> {
        self.adopt_in_slot(id, None).await
    }

    /// [`adopt`](SandboxBuilder::adopt), holding a manager's slot.
    #[tracing::instrument(name = "sandbox_adopt", skip(self, slot))]
    pub(crate) async fn adopt_in_slot(
        self,
        id: &str,
        slot: Option<OwnedSemaphorePermit>,
    ) -> Result<Sandbox> {
        let begin = Instant::now();
        let claim = Claim::take(&self.state_dir_base, id)?;
        let record = claim.record().clone();
        let builder = self.adopted(&record)?;
        let accel: Accel = record
            .accel
            .parse()
            .map_err(|e: crate::ParseAccelError| Error::Config(e.to_string()))?;
        let workspace = match &record.workspace {
            Some(path) if !path.exists() => {
                return Err(Error::Config(format!(
                    "sandbox {id}: its workspace {} is gone",
                    path.display()
                )))
            }
            // It exists, so no group is given.
            Some(path) => Some(Workspace::open(path, builder.workspace_bytes, None)?),
            None => None,
        };
        let vm_gone = |error: VmmError| match error {
            VmmError::Exited => Error::Adopt(AdoptError::VmGone { id: id.to_owned() }),
            other => Error::Vmm(other),
        };
        let mut vmm = match &record.backend {
            RecordedBackend::Qemu { .. } => Backend::Qemu(Box::new(
                QemuVm::adopt(VmPaths::in_dir(claim.dir()), record.vmm, record.agent_port)
                    .map_err(vm_gone)?,
            )),
            RecordedBackend::Process { .. } => {
                Backend::Process(ProcessVm::adopt(claim.dir(), record.vmm).map_err(vm_gone)?)
            }
        };
        // Until the sandbox is whole, whatever fails leaves the VM running.
        vmm.leave(true);
        let frozen = vmm.is_frozen();
        claim.own(record.vmm)?;
        let adopted = builder
            .adopt_claimed(Claimed {
                claim: &claim,
                record,
                vmm,
                frozen,
                accel,
                workspace,
                slot,
                begin,
            })
            .await;
        if let Err(error) = &adopted {
            tracing::warn!(
                id,
                error = %crate::error_chain(error),
                "adoption failed; the sandbox is left running for another attempt"
            );
            claim.give_back();
        }
        adopted
    }

    /// The adoption once the sandbox is claimed and owned.
    async fn adopt_claimed(self, parts: Claimed<'_>) -> Result<Sandbox> {
        let Claimed {
            claim,
            record,
            mut vmm,
            frozen,
            accel,
            workspace,
            slot,
            begin,
        } = parts;
        let id = record.id.clone();
        // A frozen VM cannot answer: thawed to reach its agent, frozen
        // again afterwards (also if this fails).
        let refreeze = if frozen {
            let guard = Refreeze(Some(VmmProcess::adopt(record.vmm)?));
            vmm.freeze(false)?;
            Some(guard)
        } else {
            None
        };
        let dir = StateDir::existing(claim.dir().to_owned());
        dir.keep(true);
        let deadline = Deadline {
            at: Instant::now() + self.boot_timeout,
            timeout: self.boot_timeout,
        };
        let launched = Launched::connect(dir, vmm, Instant::now(), deadline).await?;
        let Launched {
            dir,
            vmm,
            channel,
            health,
            answered,
            quiesce,
            ..
        } = launched;
        let features = AgentFeatures::new(health.protocol_revision);
        let network = match (&record.network, &self.network) {
            (Some(recorded), Some(options)) => Some(
                SandboxNetwork::restore(&channel, features, recorded, options.clone(), dir.path())
                    .await?,
            ),
            _ => None,
        };
        let persistence = match &record.backend {
            RecordedBackend::Qemu { machine } => {
                Some(self.persistence(&id, machine, &record, &health, &dir))
            }
            RecordedBackend::Process { .. } => None,
        };
        let vm = VmShared::new(
            vmm,
            begin,
            channel.clone(),
            quiesce,
            features,
            slot,
            persistence,
        );
        vm.adopt_clock(&record.clock, frozen);
        vm.limit_lifetime(self.max_lifetime);
        let mut kept = record;
        kept.clock = vm.recorded_clock();
        if let Some(network) = &network {
            kept.network = Some(network.record());
        }
        let keeper = Keeper::new(dir.path().to_owned(), kept);
        keeper.activate().map_err(|source| AdoptError::Record {
            id: id.clone(),
            source,
        })?;
        vm.set_adoption(keeper);
        if let Some(mut refreeze) = refreeze {
            vm.refreeze()?;
            refreeze.disarm();
        }
        // Whole now: the VM is this sandbox's to end (the watchdog may
        // end it at its first tick), the directory too.
        vm.own_vmm(true);
        dir.keep(false);
        let timings = BootTimings::measure(begin, None, answered, &health, false);
        tracing::info!(
            id,
            paused = frozen,
            ?timings,
            agent_version = %health.agent_version,
            "sandbox adopted"
        );
        Ok(Sandbox::from_parts(
            self,
            SandboxParts {
                vm,
                channel,
                workspace,
                id,
                timings,
                origin: Origin::Adopted,
                accel,
                agent_version: health.agent_version,
                features,
                network,
                dir,
            },
        ))
    }

    /// How an adopted QEMU sandbox is saved to disk and restored: its
    /// saved record if it was saved before (in this builder's saved
    /// directory), else a new one for `machine`.
    fn persistence(
        &self,
        id: &str,
        machine: &SavedVm,
        record: &AdoptRecord,
        health: &CheckResponse,
        dir: &StateDir,
    ) -> Persistence {
        let store = SavedStore::new(&self.saved_dir);
        let saved = match store.record(id) {
            Ok(saved) => Some(saved),
            Err(SavedError::NotSaved { .. }) => None,
            Err(error) => {
                tracing::warn!(id, error = %crate::error_chain(&error), "its saved record is unreadable; starting a new one");
                None
            }
        };
        let saved = saved.unwrap_or_else(|| {
            SavedRecord::new(id, machine.clone(), health, record.workspace.clone())
        });
        Persistence::new(store, saved, dir.path(), self.vmm_user, record.agent_port)
    }
}

/// A claimed sandbox on its way to a [`Sandbox`].
struct Claimed<'a> {
    claim: &'a Claim,
    record: AdoptRecord,
    vmm: Backend,
    frozen: bool,
    accel: Accel,
    workspace: Option<Workspace>,
    slot: Option<OwnedSemaphorePermit>,
    begin: Instant,
}

/// Freezes the adopted VM again when dropped armed: a paused sandbox
/// whose adoption failed stays paused.
struct Refreeze(Option<VmmProcess>);

impl Refreeze {
    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for Refreeze {
    fn drop(&mut self) {
        if let Some(vmm) = &self.0 {
            if let Err(error) = vmm.signal(nix::sys::signal::Signal::SIGSTOP) {
                tracing::warn!(%error, "cannot freeze the VM again after a failed adoption");
            }
        }
    }
}

impl Sandbox {
    /// Lets the sandbox go without stopping it, for another process (or
    /// this one) to [adopt](SandboxBuilder::adopt): its VM runs on (a
    /// paused one stays frozen), its programs with it; the watchdog stops,
    /// the agent connection and the network's carriers end, the state
    /// directory and its adoption record stay, and the workspace lock is
    /// released. Returns its id. Until a new owner adopts it, nobody
    /// enforces its lifetime; `gc` ends it once that has passed.
    ///
    /// A sandbox saved to disk stays there, as when its handle is dropped
    /// (it is [restored](SandboxBuilder::restore), not adopted).
    ///
    /// Needs an adoptable sandbox ([`SandboxBuilder::adoptable`]): any other
    /// is refused with [`AdoptError::NotAdoptable`] and, the handle being
    /// consumed, ends as a dropped one does (killed).
    pub async fn detach(self) -> Result<String> {
        self.detach_in_place().await?;
        Ok(self.id.clone())
    }

    /// [`detach`](Sandbox::detach) through a shared handle (a manager's):
    /// every handle sees the sandbox ended
    /// ([`EndReason::Detached`](crate::EndReason::Detached)) and the
    /// workspace lock goes at once.
    pub(crate) async fn detach_in_place(&self) -> Result<()> {
        if !self.is_adoptable() {
            return Err(AdoptError::NotAdoptable {
                id: self.id.clone(),
            }
            .into());
        }
        if let Some(network) = &self.network {
            network.stop();
        }
        if self.vm.detach().await? == Left::OnDisk {
            return Ok(());
        }
        self.state_dir.keep(true);
        state_dir::detach_owner(self.state_dir.path()).map_err(|source| {
            Error::Adopt(AdoptError::Io {
                action: "mark detached",
                path: self.state_dir.path().join(state_dir::owner::OWNER_FILE),
                source,
            })
        })?;
        Ok(())
    }
}
