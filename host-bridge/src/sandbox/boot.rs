//! Starting a configured sandbox: lock the workspace, create the state
//! directory, start the VMM, reach the agent (see `connect`), and hand the
//! running VM to `lifecycle`'s watchdog.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::OwnedSemaphorePermit;

use crate::error::{Error, Result};
use crate::features::AgentFeatures;
use crate::lifecycle::channel::AgentChannel;
use crate::lifecycle::vm::VmShared;
use crate::lifecycle::watchdog;
use crate::state_dir;
use crate::vmm::{Backend, BackendKind, ProcessVm, QemuConfig, QemuVm, VmPaths};
use crate::workspace::Workspace;

use super::builder::SandboxBuilder;
use super::connect::{connect_agent, Deadline};
use super::Sandbox;

impl SandboxBuilder {
    /// Boots the VM and waits until the agent answers.
    pub async fn start(self) -> Result<Sandbox> {
        self.start_in_slot(None).await
    }

    /// [`start`](SandboxBuilder::start), holding a manager's slot until the
    /// VM ends.
    #[tracing::instrument(name = "sandbox_start", skip_all)]
    pub(crate) async fn start_in_slot(self, slot: Option<OwnedSemaphorePermit>) -> Result<Sandbox> {
        let begin = Instant::now();
        self.validate()?;
        let accel = self
            .accel
            .resolve()
            .map_err(|e| Error::Config(e.to_string()))?;
        // The lock is taken before anything starts, and lives in the Sandbox.
        let workspace = match &self.workspace {
            Some(path) => Some(Workspace::open(path, self.workspace_bytes)?),
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
        let dir = state_dir::create(&self.state_dir_base)?;
        let mut vmm = match &self.backend {
            BackendKind::Qemu => {
                let paths = VmPaths::in_dir(dir.path());
                let config = QemuConfig {
                    accel,
                    memory_mib: self.memory_mib,
                    vcpus: self.vcpus,
                    kernel: self.kernel.clone(),
                    initramfs: self.initramfs.clone(),
                    kernel_cmdline: self.kernel_cmdline(accel),
                    vhost_user_socket: paths.vhost_user_socket.clone(),
                    console_log: paths.console_log.clone(),
                    qmp_socket: paths.qmp_socket.clone(),
                    disks,
                    serial_ports: self.serial_ports.clone(),
                };
                tracing::info!(state_dir = %dir.path().display(), accel = accel.qemu_name(), "starting VM");
                Backend::Qemu(QemuVm::start(&config, paths, self.vmm_user, self.agent_port).await?)
            }
            BackendKind::Process { agent } => {
                tracing::info!(state_dir = %dir.path().display(), "starting the agent as a process");
                Backend::Process(ProcessVm::start(agent, dir.path())?)
            }
        };
        let vmm_started = begin.elapsed();

        let deadline = Deadline {
            at: begin + self.boot_timeout,
            timeout: self.boot_timeout,
        };
        let (channel, health) = connect_agent(&mut vmm, deadline).await?;
        let timings = BootTimings {
            vmm_started,
            kernel_to_init: Duration::from_micros(health.init_started_us),
            init_to_serving: Duration::from_micros(
                health
                    .serving_since_us
                    .saturating_sub(health.init_started_us),
            ),
            ready: begin.elapsed(),
        };
        tracing::info!(?timings, agent_version = %health.agent_version, "sandbox ready");
        let id = dir
            .path()
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        let features = AgentFeatures::new(health.protocol_revision);
        let vm = VmShared::new(vmm, begin, channel.clone(), features, slot);
        let watchdog = watchdog::spawn(
            &vm,
            watchdog::Policy {
                max_lifetime: self.max_lifetime,
                idle: self.idle,
                console_log_budget: self.console_log_budget,
                unresponsive_after: self.unresponsive_after,
            },
        );
        Ok(Sandbox {
            channel: AgentChannel::new(channel, Arc::clone(&vm), self.paused_calls),
            vm,
            watchdog,
            id,
            timings,
            accel,
            agent_version: health.agent_version,
            features,
            default_limits: self.default_limits,
            default_user: self.default_user,
            state_dir: dir,
            _workspace: workspace,
        })
    }
}

/// Where a sandbox's start-up time went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BootTimings {
    /// Host: from `start()` until the VMM processes were running.
    pub vmm_started: Duration,
    /// Guest: kernel boot until the agent (PID 1) started.
    pub kernel_to_init: Duration,
    /// Guest: agent start (mounts, modules) until it served gRPC.
    pub init_to_serving: Duration,
    /// Host: from `start()` until the agent answered Health.
    pub ready: Duration,
}
