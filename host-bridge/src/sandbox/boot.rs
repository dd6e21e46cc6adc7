//! Starting a configured sandbox: lock the workspace, create the state
//! directory, start the VMM (a cold boot, or a clone of a template: see
//! `clone`), reach the agent (see `connect`), make the guest its own
//! machine (`System.Personalize`), install the CA certificates it trusts
//! (`trust`), turn its network on, and hand the running VM to
//! `lifecycle`'s watchdog.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use airlock_proto::v1::system_client::SystemClient;
use airlock_proto::v1::{PersonalizeRequest, PersonalizeResponse};
use airlock_proto::Feature;
use tokio::sync::OwnedSemaphorePermit;
use tonic::transport::Channel;
use tracing::Instrument;

use super::builder::{GuestChannel, SandboxBuilder};
use super::clone::CloneError;
use super::connect::Deadline;
use super::error::{ConfigError, NamedTemplateError};
use super::launched::Launched;
use super::network::SandboxNetwork;
use super::parts::SandboxParts;
use super::started::{BootTimings, Origin};
use super::Sandbox;
use crate::error::{Error, Result};
use crate::features::AgentFeatures;
use crate::lifecycle::vm::{relaunch, Persistence, VmShared};
use crate::saved::{GoodSnapshot, Restored, SavedRecord, SavedStore, SavedVm};
use crate::state_dir::{self, StateDir};
use crate::transport::CapMessages;
use crate::vmm::{
    AgentPort, Backend, BackendKind, Disk, GuestMemory, ProcessVm, QemuConfig, QemuVm, VmPaths,
};
use crate::workspace::Workspace;
use crate::Accel;

/// How many random bytes a guest gets from the host at start.
const ENTROPY_BYTES: usize = 64;
/// How long `Personalize` may take.
const PERSONALIZE_TIMEOUT: Duration = Duration::from_secs(5);

/// What a saved sandbox's record starts from.
pub(super) enum Machine {
    /// A VM started now: its record is made from this machine.
    New(SavedVm),
    /// A sandbox restored from its record.
    Saved(Box<SavedRecord>),
}

/// The parts [`SandboxBuilder::assemble`] makes a [`Sandbox`] of.
pub(super) struct Assembly {
    pub launched: Launched,
    pub origin: Origin,
    pub accel: Accel,
    pub workspace: Option<Workspace>,
    pub slot: Option<OwnedSemaphorePermit>,
    /// When the start began.
    pub begin: Instant,
    /// `None` where the VM cannot be saved.
    pub machine: Option<Machine>,
}

impl SandboxBuilder {
    /// Boots the VM and waits until the agent answers.
    pub async fn start(self) -> Result<Sandbox> {
        self.start_in_slot(None).await
    }

    /// [`start`](SandboxBuilder::start), holding a manager's slot until the
    /// VM ends.
    #[tracing::instrument(name = "sandbox_start", skip_all)]
    pub(crate) async fn start_in_slot(
        mut self,
        slot: Option<OwnedSemaphorePermit>,
    ) -> Result<Sandbox> {
        let begin = Instant::now();
        self.validate()?;
        // Read and checked before anything boots: a bad file is an error
        // naming it, and no VM has started.
        self.trust.resolve()?;
        let accel = self.accel.resolve().map_err(ConfigError::from)?;
        // The lock is taken before anything starts, and lives in the Sandbox.
        let workspace = match &self.workspace {
            Some(path) => Some(tracing::info_span!("open_workspace").in_scope(|| {
                Workspace::open(path, self.workspace_bytes, self.workspace_group(accel))
            })?),
            None => None,
        };
        let mut disks = self.disks();
        if let (Some(ws), Some(disk)) = (&workspace, disks.last_mut()) {
            tracing::info!(path = %ws.path().display(), created = ws.created(), "workspace attached");
            disk.path = ws.path().to_owned();
        }
        if self.collect_orphans {
            crate::gc::collect_before_start(self.state_dir_base.clone())
                .instrument(tracing::info_span!("collect_orphans"))
                .await;
        }
        let deadline = Deadline {
            at: begin + self.boot_timeout,
            timeout: self.boot_timeout,
        };
        if let Some(snapshot) = self.from_snapshot.clone() {
            if let Some(reason) = self.template_refusal() {
                return Err(Error::CannotSave {
                    reason: format!("cannot start from snapshot {}: {reason}", snapshot.id()),
                });
            }
            let launched = self.launch_snapshot(&snapshot, accel).await?;
            let origin = Origin::Snapshot {
                id: snapshot.id().to_owned(),
            };
            let machine = Some(Machine::New(snapshot.meta().vm.clone()));
            return self
                .assemble(Assembly {
                    launched,
                    origin,
                    accel,
                    workspace,
                    slot,
                    begin,
                    machine,
                })
                .await;
        }
        let (launched, origin) = match self.template_refusal() {
            Some(reason) if self.named_template.is_some() => {
                return Err(Error::NamedTemplate {
                    name: self.named_template.clone().unwrap_or_default(),
                    problem: NamedTemplateError::Refused { why: reason },
                })
            }
            Some(reason) => {
                if self.from_template {
                    tracing::info!(reason, "this configuration boots cold");
                }
                (
                    self.launch_cold(accel, disks.clone(), deadline).await?,
                    Origin::Cold,
                )
            }
            None => match self.launch_clone(accel, &disks, deadline).await {
                Ok((launched, key, built)) => (launched, Origin::Clone { key, built }),
                Err(error) if self.named_template.is_some() => {
                    let problem = match error {
                        CloneError::NamedMissing => NamedTemplateError::Unusable(Box::new(error)),
                        error => NamedTemplateError::Start(Box::new(error)),
                    };
                    return Err(Error::NamedTemplate {
                        name: self.named_template.clone().unwrap_or_default(),
                        problem,
                    });
                }
                Err(error) => {
                    let reason = crate::error_chain(&error);
                    tracing::warn!(%reason, "cannot start from a template; booting cold");
                    let launched = self.launch_cold(accel, disks.clone(), deadline).await?;
                    (launched, Origin::ColdFallback { reason })
                }
            },
        };
        let machine = self.saved_vm(accel, &launched, disks).map(Machine::New);
        self.assemble(Assembly {
            launched,
            origin,
            accel,
            workspace,
            slot,
            begin,
            machine,
        })
        .await
    }

    /// Starts a new QEMU for `machine` in `dir`, loads `snapshot` into it
    /// and waits for its agent (within the boot timeout): the common part
    /// of a restore and of a fork's child.
    pub(super) async fn relaunch_in(
        &self,
        dir: StateDir,
        machine: &SavedVm,
        snapshot: GoodSnapshot,
    ) -> Result<(Launched, Restored)> {
        let paths = VmPaths::in_dir(dir.path());
        let (qemu, restored) =
            relaunch(machine, snapshot, &paths, self.vmm_user, self.agent_port).await?;
        let deadline = Deadline {
            at: Instant::now() + self.boot_timeout,
            timeout: self.boot_timeout,
        };
        let vmm = Backend::Qemu(Box::new(qemu));
        let launched = Launched::connect(dir, vmm, Instant::now(), deadline).await?;
        Ok((launched, restored))
    }

    /// The machine a launched VM runs, as a saved sandbox records it:
    /// `None` where it cannot be saved (vsock, the process backend).
    fn saved_vm(&self, accel: Accel, launched: &Launched, disks: Vec<Disk>) -> Option<SavedVm> {
        let saveable =
            matches!(launched.vmm, Backend::Qemu(_)) && self.channel == GuestChannel::Serial;
        saveable.then(|| {
            let paths = VmPaths::in_dir(launched.dir.path());
            SavedVm::of(&self.qemu_config(accel, &paths, disks, GuestMemory::Private, false))
        })
    }

    /// Makes a [`Sandbox`] of a VM whose agent answered: gives the guest
    /// its identity, entropy and clock, and hands the VM to the watchdog.
    pub(super) async fn assemble(mut self, parts: Assembly) -> Result<Sandbox> {
        let Assembly {
            launched,
            origin,
            accel,
            workspace,
            slot,
            begin,
            machine,
        } = parts;
        let Launched {
            vmm_started,
            dir,
            vmm,
            channel,
            health,
            answered,
            quiesce,
        } = launched;
        let id = dir
            .path()
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        let features = AgentFeatures::new(health.protocol_revision);
        if matches!(vmm, Backend::Qemu(_)) && features.has(Feature::Personalize) {
            personalize(&channel, &id).await?;
        }
        let vmm_identity = vmm.identity();
        let roots = self.trust.resolve()?;
        let roots = match (&vmm, roots) {
            (Backend::Qemu(_), Some(roots)) => {
                super::trust::install(&channel, features, &roots).await?;
                Some(roots)
            }
            // An agent on the host: the host's own store is not the
            // sandbox's to change.
            (Backend::Process(_), Some(_)) if !self.trust.env_decides() => {
                return Err(ConfigError::ProcessBackendCa.into())
            }
            _ => None,
        };
        let network = match &self.network {
            Some(options) => {
                let audit_dir = self.adoptable.then(|| dir.path());
                Some(
                    SandboxNetwork::enable(
                        &channel,
                        features,
                        options,
                        roots.as_deref(),
                        audit_dir,
                    )
                    .await?,
                )
            }
            None => None,
        };
        let booted_here = matches!(origin, Origin::Cold | Origin::ColdFallback { .. });
        let timings =
            BootTimings::measure(begin, Some(vmm_started), answered, &health, booted_here);
        tracing::info!(?timings, ?origin, agent_version = %health.agent_version, "sandbox ready");
        let recorded_machine = machine.as_ref().map(|machine| match machine {
            Machine::New(vm) => vm.clone(),
            Machine::Saved(record) => record.vm.clone(),
        });
        let persistence = machine.map(|machine| {
            let record = match machine {
                Machine::New(vm) => SavedRecord::new(
                    &id,
                    vm,
                    &health,
                    workspace.as_ref().map(|ws| ws.path().to_owned()),
                ),
                Machine::Saved(record) => *record,
            };
            Persistence::new(
                SavedStore::new(&self.saved_dir),
                record,
                dir.path(),
                self.vmm_user,
                self.agent_port,
            )
        });
        let carried = persistence.as_ref().and_then(|p| {
            let record = p
                .record
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            (!record.generations.is_empty()).then_some(record.usage)
        });
        let vm = VmShared::new(
            vmm,
            begin,
            channel.clone(),
            quiesce,
            features,
            slot,
            persistence,
        );
        if let Some(usage) = carried {
            vm.carry_usage(&usage);
        }
        vm.limit_lifetime(self.max_lifetime);
        if self.adoptable {
            let record = self.adoption_record(super::adopt::Recorded {
                id: &id,
                machine: recorded_machine,
                accel,
                workspace: workspace.as_ref().map(|ws| ws.path().to_owned()),
                vmm: vmm_identity,
                clock: vm.recorded_clock(),
                network: network.as_ref().map(SandboxNetwork::record),
            })?;
            let keeper = crate::adopt::Keeper::new(dir.path().to_owned(), record);
            // A pool's member is adoptable from its handout on.
            if !self.pooled {
                keeper
                    .activate()
                    .map_err(|source| crate::adopt::AdoptError::Record {
                        id: id.clone(),
                        source,
                    })?;
            }
            vm.set_adoption(keeper);
        }
        Ok(Sandbox::from_parts(
            self,
            SandboxParts {
                vm,
                channel,
                workspace,
                id,
                timings,
                origin,
                accel,
                agent_version: health.agent_version,
                features,
                network,
                dir,
            },
        ))
    }

    /// Why this start does not use a template, if it does not.
    fn template_refusal(&self) -> Option<&'static str> {
        if !self.from_template {
            Some("templates are off")
        } else if !matches!(self.backend, BackendKind::Qemu) {
            Some("the process backend has no VM to snapshot")
        } else if self.channel != GuestChannel::Serial {
            Some("QEMU cannot snapshot a VM with the vsock device")
        } else if self.workspace.is_some() {
            Some("a workspace is mounted at boot, so its sandbox boots cold")
        } else {
            None
        }
    }

    /// Boots a VM from its kernel.
    async fn launch_cold(
        &self,
        accel: Accel,
        disks: Vec<Disk>,
        deadline: Deadline,
    ) -> Result<Launched> {
        let memory = match self.channel {
            GuestChannel::Serial => GuestMemory::Private,
            GuestChannel::Vsock => GuestMemory::SharedMemfd,
        };
        let (dir, vmm) = self.launch(accel, disks, memory, false).await?;
        Launched::connect(dir, vmm, Instant::now(), deadline).await
    }

    /// Creates a state directory and starts the backend in it, with the
    /// guest's memory backed by `memory`; `incoming` starts QEMU waiting
    /// for a saved state.
    pub(super) async fn launch(
        &self,
        accel: Accel,
        disks: Vec<Disk>,
        memory: GuestMemory,
        incoming: bool,
    ) -> Result<(StateDir, Backend)> {
        let dir = state_dir::create(&self.state_dir_base)?;
        let vmm = match &self.backend {
            BackendKind::Qemu => {
                let paths = VmPaths::in_dir(dir.path());
                let config = self.qemu_config(accel, &paths, disks, memory, incoming);
                tracing::info!(state_dir = %dir.path().display(), accel = accel.qemu_name(), incoming, "starting VM");
                Backend::Qemu(Box::new(
                    QemuVm::start(&config, paths, self.vmm_user, self.agent_port).await?,
                ))
            }
            BackendKind::Process { agent } => {
                let _span = tracing::info_span!("launch_vmm", incoming).entered();
                tracing::info!(state_dir = %dir.path().display(), "starting the agent as a process");
                Backend::Process(ProcessVm::start(agent, dir.path())?)
            }
        };
        Ok((dir, vmm))
    }

    /// The QEMU command line's inputs for a VM in `paths`.
    pub(super) fn qemu_config(
        &self,
        accel: Accel,
        paths: &VmPaths,
        disks: Vec<Disk>,
        memory: GuestMemory,
        incoming: bool,
    ) -> QemuConfig {
        QemuConfig {
            accel,
            cpu: crate::vmm::cpu_model(accel).to_owned(),
            memory_mib: self.memory_mib,
            vcpus: self.vcpus,
            kernel: self.kernel.clone(),
            initramfs: self.initramfs.clone(),
            kernel_cmdline: self.kernel_cmdline(accel),
            agent_port: match self.channel {
                GuestChannel::Serial => AgentPort::Serial(paths.agent_socket.clone()),
                GuestChannel::Vsock => AgentPort::Vsock(paths.vhost_user_socket.clone()),
            },
            memory,
            incoming,
            console_log: paths.console_log.clone(),
            qmp_socket: paths.qmp_socket.clone(),
            disks,
            serial_ports: self.serial_ports.clone(),
        }
    }
}

/// Gives the guest fresh entropy, the host's clock, its hostname and id.
#[tracing::instrument(name = "personalize", skip_all)]
async fn personalize(channel: &Channel, id: &str) -> Result<()> {
    let request = personalize_request(id)?;
    let mut client = SystemClient::new(channel.clone()).capped();
    let call = client.personalize(request);
    let answer = tokio::time::timeout(PERSONALIZE_TIMEOUT, call)
        .await
        .map_err(|_| {
            Error::Protocol(format!(
                "System.Personalize did not answer within {PERSONALIZE_TIMEOUT:?}"
            ))
        })?
        .map_err(|status| Error::agent("System.Personalize", status))?
        .into_inner();
    check_personalized(&answer);
    Ok(())
}

/// `System.Personalize` for the sandbox `id`: 64 bytes from the host's
/// `/dev/urandom`, the host's clock, `id` as hostname and id.
pub(super) fn personalize_request(id: &str) -> Result<PersonalizeRequest> {
    let mut entropy = vec![0u8; ENTROPY_BYTES];
    crate::random::fill(&mut entropy)
        .map_err(|e| Error::Protocol(format!("no entropy from the host's /dev/urandom: {e}")))?;
    let unix_nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    Ok(PersonalizeRequest {
        entropy: entropy.into(),
        unix_nanos,
        hostname: id.to_owned(),
        sandbox_id: id.to_owned(),
    })
}

/// Warns when the guest only mixed the entropy in.
pub(super) fn check_personalized(answer: &PersonalizeResponse) {
    if !answer.reseeded {
        tracing::warn!(
            "the guest kernel did not reseed its random generator; entropy was mixed in"
        );
    }
}
