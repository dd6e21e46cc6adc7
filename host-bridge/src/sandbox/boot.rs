//! Starting a configured sandbox: lock the workspace, create the state
//! directory, start the VMM (a cold boot, or a clone of a template: see
//! `clone`), reach the agent (see `connect`), make the guest its own
//! machine (`System.Personalize`), install the CA certificates it trusts
//! (`trust`), turn its network on, and hand the running VM to
//! `lifecycle`'s watchdog.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::state_dir::StateDir;
use airlock_proto::v1::system_client::SystemClient;
use airlock_proto::v1::{CheckResponse, PersonalizeRequest, PersonalizeResponse};
use airlock_proto::Feature;
use tokio::sync::OwnedSemaphorePermit;
use tonic::transport::Channel;

use super::clone::CloneError;
use super::error::{ConfigError, NamedTemplateError};
use super::network::SandboxNetwork;
use crate::error::{Error, Result};
use crate::features::AgentFeatures;
use crate::lifecycle::channel::AgentChannel;
use crate::lifecycle::vm::{relaunch, Persistence, VmShared};
use crate::lifecycle::watchdog;
use crate::network::audit::AuditLog;
use crate::saved::{GoodSnapshot, Restored, SavedRecord, SavedStore, SavedUsage, SavedVm};
use crate::state_dir;
use crate::transport::{CapMessages, Quiesce};
use crate::vmm::{
    AgentPort, Backend, BackendKind, Disk, GuestMemory, ProcessVm, QemuConfig, QemuVm, VmPaths,
};
use crate::workspace::Workspace;
use crate::Accel;

use super::builder::{GuestChannel, SandboxBuilder};
use super::connect::{connect_agent, Deadline};
use super::Sandbox;

/// How many random bytes a guest gets from the host at start.
const ENTROPY_BYTES: usize = 64;
/// How long `Personalize` may take.
const PERSONALIZE_TIMEOUT: Duration = Duration::from_secs(5);

/// How a sandbox came to run.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Origin {
    /// Booted from the kernel.
    Cold,
    /// Restored from the template `key`; `built` when this start made it.
    Clone { key: String, built: bool },
    /// A template was asked for, but this start booted cold instead.
    ColdFallback { reason: String },
    /// Restored from its own snapshot generation `generation` (after the
    /// process that saved it ended).
    Restored { generation: u64 },
    /// Forked from the running sandbox `parent`.
    Fork { parent: String },
    /// Taken over, still running, from an owner that died or detached it
    /// ([`SandboxBuilder::adopt`]).
    Adopted,
}

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

/// A VMM that runs and an agent that answered.
pub(super) struct Launched {
    /// When the VMM processes were running.
    pub vmm_started: Instant,
    pub dir: StateDir,
    pub vmm: Backend,
    pub channel: Channel,
    pub health: CheckResponse,
    /// When the Health answer arrived.
    pub answered: Instant,
    pub quiesce: Quiesce,
}

impl Launched {
    /// Waits for the agent of a VMM that runs (started at `vmm_started`).
    pub(super) async fn connect(
        dir: StateDir,
        mut vmm: Backend,
        vmm_started: Instant,
        deadline: Deadline,
    ) -> Result<Self> {
        let reached = connect_agent(&mut vmm, deadline).await?;
        Ok(Launched {
            vmm_started,
            dir,
            vmm,
            channel: reached.channel,
            health: reached.health,
            answered: reached.answered,
            quiesce: reached.quiesce,
        })
    }
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
            Some(path) => Some(Workspace::open(
                path,
                self.workspace_bytes,
                self.workspace_group(accel),
            )?),
            None => None,
        };
        let mut disks = self.disks();
        if let (Some(ws), Some(disk)) = (&workspace, disks.last_mut()) {
            tracing::info!(path = %ws.path().display(), created = ws.created(), "workspace attached");
            disk.path = ws.path().to_owned();
        }
        if self.collect_orphans {
            crate::gc::collect_before_start(self.state_dir_base.clone()).await;
        }
        let deadline = Deadline {
            at: begin + self.boot_timeout,
            timeout: self.boot_timeout,
        };
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
        let answered = answered.saturating_duration_since(begin);
        let booted_here = matches!(origin, Origin::Cold | Origin::ColdFallback { .. });
        let timings = BootTimings {
            vmm_started: vmm_started.saturating_duration_since(begin),
            before_guest_clock: booted_here
                .then(|| answered.saturating_sub(Duration::from_micros(health.uptime_us))),
            kernel_to_init: Duration::from_micros(health.init_started_us),
            init_to_serving: Duration::from_micros(
                health
                    .serving_since_us
                    .saturating_sub(health.init_started_us),
            ),
            serving_to_answer: booted_here.then(|| {
                Duration::from_micros(health.uptime_us.saturating_sub(health.serving_since_us))
            }),
            answered,
            ready: begin.elapsed(),
        };
        tracing::info!(?timings, ?origin, agent_version = %health.agent_version, "sandbox ready");
        let recorded_machine = machine.as_ref().map(|machine| match machine {
            Machine::New(vm) => vm.clone(),
            Machine::Saved(record) => record.vm.clone(),
        });
        let persistence = machine.map(|machine| {
            let record = match machine {
                Machine::New(vm) => SavedRecord {
                    id: id.clone(),
                    vm,
                    agent_version: health.agent_version.clone(),
                    protocol_revision: health.protocol_revision,
                    workspace: workspace.as_ref().map(|ws| ws.path().to_owned()),
                    usage: SavedUsage::default(),
                    generations: Vec::new(),
                },
                Machine::Saved(record) => *record,
            };
            Persistence {
                store: SavedStore::new(&self.saved_dir),
                record: std::sync::Mutex::new(record),
                paths: VmPaths::in_dir(dir.path()),
                vmm_user: self.vmm_user,
                agent_port: self.agent_port,
            }
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
        vm.hold_workspace(workspace);
        let watchdog = watchdog::spawn(&vm, self.watchdog_policy());
        let env = default_env(&self.env, network.as_ref().map(|n| n.env.as_slice()));
        Ok(Sandbox {
            channel: AgentChannel::new(channel, Arc::clone(&vm), self.paused_calls),
            vm,
            watchdog,
            id,
            timings,
            origin,
            accel,
            agent_version: health.agent_version,
            features,
            default_limits: self.default_limits,
            default_user: self.default_user.clone(),
            default_cwd: self.default_cwd.clone(),
            env,
            defaults_made: Arc::default(),
            ingress_audit: Arc::new(ingress_audit(
                self.adoptable && network.is_none(),
                dir.path(),
            )),
            network,
            builder: self,
            state_dir: dir,
        })
    }

    /// What the watchdog enforces (the lifetime ceiling is the VM's).
    pub(super) fn watchdog_policy(&self) -> watchdog::Policy {
        watchdog::Policy {
            idle: self.idle,
            console_log_budget: self.console_log_budget,
            unresponsive_after: self.unresponsive_after,
        }
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

/// What every program gets under its own variables: the builder's
/// environment first (it wins), then the network's.
pub(super) fn default_env(
    builder: &[(String, String)],
    network: Option<&[(String, String)]>,
) -> Arc<[(String, String)]> {
    builder
        .iter()
        .chain(network.unwrap_or_default())
        .cloned()
        .collect()
}

/// Gives the guest fresh entropy, the host's clock, its hostname and id.
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

/// Where a sandbox's start-up time went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BootTimings {
    /// Host: from `start()` until the VMM processes were running.
    pub vmm_started: Duration,
    /// Of a VM booted by this start (`Origin::Cold` and
    /// `Origin::ColdFallback`), the time from `start()` until the guest's
    /// clock began: the VMM's start, its firmware, and the kernel's set-up
    /// and decompression before it keeps time. It is what the host saw
    /// until the first answer less what the guest's clock counted, so it
    /// also holds that answer's way back to the host (a fraction of a
    /// millisecond). `None` for a restored VM, whose clock is its
    /// snapshot's.
    pub before_guest_clock: Option<Duration>,
    /// Guest: kernel boot until the agent (PID 1) started (a clone reports
    /// its template's).
    pub kernel_to_init: Duration,
    /// Guest: agent start (mounts, modules) until it served gRPC.
    pub init_to_serving: Duration,
    /// Guest: from serving gRPC until it answered the host's first Health
    /// (the host's connection, its opening and HTTP/2's set-up included),
    /// for a VM booted by this start; `None` for a restored VM.
    pub serving_to_answer: Option<Duration>,
    /// Host: from `start()` until the agent's first Health answer arrived.
    pub answered: Duration,
    /// Host: from `start()` until the sandbox was ready (after the answer,
    /// the guest's identity, entropy and clock, and its network if any).
    pub ready: Duration,
}

/// The audit log of a sandbox without a network (its ingress records):
/// kept in its state directory `dir` too when `on_disk` (an adoptable
/// sandbox's), as a network's is.
pub(super) fn ingress_audit(on_disk: bool, dir: &std::path::Path) -> AuditLog {
    match on_disk {
        true => AuditLog::kept_in(dir),
        false => AuditLog::default(),
    }
}
