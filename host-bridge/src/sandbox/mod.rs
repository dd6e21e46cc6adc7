//! [`Sandbox`]: one microVM with the agent running as its PID 1.
//!
//! [`SandboxBuilder::start`] locks the workspace if there is one (see
//! `workspace`), creates the private state directory, starts the VMM (see
//! `vmm`) with the root image and the workspace as disks, then waits for the
//! agent to announce itself and connects to it over hybrid vsock (see
//! `connect` and `transport`). After that, [`Sandbox::exec`] runs programs. Dropping the
//! sandbox kills the VM and removes its state directory;
//! [`Sandbox::shutdown`] powers it off gracefully first.
//!
//! Once running, the VM belongs to `lifecycle`: a watchdog enforces the
//! lifetime ceiling and the idle timeout, [`Sandbox::pause`] and
//! [`Sandbox::resume`] park it, and every call goes through a channel that
//! counts it and holds it back while the VM is paused.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use airlock_proto::contract::cmdline as keys;
use airlock_proto::v1::health_client::HealthClient;
use airlock_proto::v1::process_client::ProcessClient;
use airlock_proto::v1::system_client::SystemClient;
use airlock_proto::v1::{
    CheckRequest, CheckResponse, ConnectRequest, ListRequest, ShutdownRequest,
};
use airlock_proto::Feature;
use tempfile::TempDir;
use tokio::sync::OwnedSemaphorePermit;
use tokio::task::JoinHandle;

use crate::error::{Error, Result};
use crate::exec::{Command, Execution, Limits, ProcessHandle, ProcessInfo, Target};
use crate::features::AgentFeatures;
use crate::fs::Files;
use crate::lifecycle::channel::AgentChannel;
use crate::lifecycle::vm::VmShared;
use crate::lifecycle::{watchdog, EndReason, IdlePolicy, PausedCalls, SandboxState, SandboxUsage};
use crate::transport::CapMessages;
use crate::vmm::{Disk, QemuConfig, SerialPort, VmPaths, Vmm, VmmUser};
use crate::workspace::{Workspace, DEFAULT_WORKSPACE_BYTES};
use crate::{artifacts, state_dir, transport, Accel};
use connect::{connect_agent, Deadline};

mod connect;

/// QEMU drive ids (and virtio serials) of the root image and the workspace.
const ROOT_DISK: &str = "root";
const WORKSPACE_DISK: &str = "workspace";
/// The default hard ceiling on a sandbox's wall-clock life.
pub const DEFAULT_MAX_LIFETIME: Duration = Duration::from_secs(60 * 60);
/// How long a running sandbox's agent may go without answering, by
/// default, before the VM is killed as hung.
pub const DEFAULT_UNRESPONSIVE_AFTER: Duration = Duration::from_secs(60);
/// The default disk budget of the guest console's log on the host.
pub const DEFAULT_CONSOLE_LOG_BUDGET: u64 = 16 << 20;

/// Configures and starts a [`Sandbox`].
#[derive(Debug, Clone)]
pub struct SandboxBuilder {
    kernel: PathBuf,
    initramfs: PathBuf,
    memory_mib: u32,
    vcpus: u32,
    boot_timeout: Duration,
    accel: Accel,
    agent_port: u32,
    state_dir_base: PathBuf,
    kernel_args: Vec<String>,
    image: Option<PathBuf>,
    workspace: Option<PathBuf>,
    workspace_bytes: u64,
    default_limits: Limits,
    default_user: Option<String>,
    serial_ports: Vec<SerialPort>,
    vmm_user: VmmUser,
    collect_orphans: bool,
    max_lifetime: Option<Duration>,
    idle: Option<(Duration, IdlePolicy)>,
    paused_calls: PausedCalls,
    console_log_budget: u64,
    unresponsive_after: Option<Duration>,
}

impl Default for SandboxBuilder {
    fn default() -> Self {
        SandboxBuilder {
            kernel: artifacts::default_kernel(),
            initramfs: artifacts::default_initramfs(),
            memory_mib: 512,
            vcpus: 1,
            boot_timeout: Duration::from_secs(60),
            accel: Accel::Auto,
            agent_port: airlock_proto::DEFAULT_AGENT_PORT,
            state_dir_base: state_dir::default_base(),
            kernel_args: Vec::new(),
            image: None,
            workspace: None,
            workspace_bytes: DEFAULT_WORKSPACE_BYTES,
            default_limits: Limits::default(),
            default_user: None,
            serial_ports: Vec::new(),
            vmm_user: VmmUser::Auto,
            collect_orphans: false,
            max_lifetime: Some(DEFAULT_MAX_LIFETIME),
            idle: None,
            paused_calls: PausedCalls::default(),
            console_log_budget: DEFAULT_CONSOLE_LOG_BUDGET,
            unresponsive_after: Some(DEFAULT_UNRESPONSIVE_AFTER),
        }
    }
}

impl SandboxBuilder {
    /// The guest kernel (default: `kernel/vmlinuz` in [`artifacts::home`]).
    pub fn kernel(mut self, path: impl Into<PathBuf>) -> Self {
        self.kernel = path.into();
        self
    }

    /// The initramfs holding the agent (default: `initramfs.cpio.gz` in [`artifacts::home`]).
    pub fn initramfs(mut self, path: impl Into<PathBuf>) -> Self {
        self.initramfs = path.into();
        self
    }

    /// Limits applied to every command run in the sandbox; a command's own
    /// [`limits`](Command::limits) win field by field.
    pub fn default_limits(mut self, limits: Limits) -> Self {
        self.default_limits = limits;
        self
    }

    /// The user every command runs as unless it names one (default: root,
    /// without the dangerous capabilities unless
    /// [`privileged`](Command::privileged)).
    pub fn default_user(mut self, user: impl Into<String>) -> Self {
        self.default_user = Some(user.into());
        self
    }

    /// Guest memory in MiB (default 512).
    pub fn memory_mib(mut self, mib: u32) -> Self {
        self.memory_mib = mib;
        self
    }

    /// Number of virtual CPUs (default 1).
    pub fn vcpus(mut self, vcpus: u32) -> Self {
        self.vcpus = vcpus;
        self
    }

    /// How long boot may take until the agent answers (default 60 s, which
    /// leaves room for software emulation on a loaded host).
    pub fn boot_timeout(mut self, timeout: Duration) -> Self {
        self.boot_timeout = timeout;
        self
    }

    /// The CPU accelerator (default [`Accel::Auto`]).
    pub fn accel(mut self, accel: Accel) -> Self {
        self.accel = accel;
        self
    }

    /// Where state directories are created (default: see `AIRLOCK_STATE_DIR`).
    pub fn state_dir_base(mut self, dir: impl Into<PathBuf>) -> Self {
        self.state_dir_base = dir.into();
        self
    }

    /// Boots into this root filesystem image (ext4, see `airlock::images`)
    /// instead of the initramfs's busybox: the agent mounts it read-only
    /// under an overlay whose writable layer lives in memory, or on the
    /// workspace. The file is attached read-only, so any number of sandboxes
    /// can share it.
    pub fn image(mut self, path: impl Into<PathBuf>) -> Self {
        self.image = Some(path.into());
        self
    }

    /// Keeps the guest's writes on this disk file, created on first use
    /// (sparse, [`SandboxBuilder::workspace_size`] bytes, ext4): what one
    /// sandbox writes outside `/tmp` the next one on the same workspace
    /// sees. Needs [`SandboxBuilder::image`]. Only one sandbox at a time may
    /// hold a workspace.
    pub fn workspace(mut self, path: impl Into<PathBuf>) -> Self {
        self.workspace = Some(path.into());
        self
    }

    /// The size limit of a workspace created by this sandbox (default
    /// 4 GiB). An existing workspace keeps its size.
    pub fn workspace_size(mut self, bytes: u64) -> Self {
        self.workspace_bytes = bytes;
        self
    }

    /// Appends an argument to the guest kernel's command line.
    pub fn kernel_arg(mut self, arg: impl Into<String>) -> Self {
        self.kernel_args.push(arg.into());
        self
    }

    /// Adds a virtio-serial port named `name` for a program of your own in
    /// the guest (such as a guest agent of another kind): QEMU listens on
    /// the Unix socket `socket` on the host, and the guest sees the port as
    /// `/dev/vportNpM` (the `name` file under `/sys/class/virtio-ports/`
    /// tells which). Airlock's own agent does not use it.
    pub fn serial_port(mut self, name: impl Into<String>, socket: impl Into<PathBuf>) -> Self {
        self.serial_ports.push(SerialPort {
            name: name.into(),
            socket: socket.into(),
        });
        self
    }

    /// The hard ceiling on the sandbox's wall-clock life, paused time
    /// included (default [`DEFAULT_MAX_LIFETIME`], one hour): when it is
    /// reached the VM is killed, whatever it is doing, and the sandbox ends
    /// with [`EndReason::LifetimeExceeded`]. `None` removes the ceiling.
    pub fn max_lifetime(mut self, limit: Option<Duration>) -> Self {
        self.max_lifetime = limit;
        self
    }

    /// Pauses or stops the sandbox after `after` with no call in flight (an
    /// open output stream counts as a call). Off by default.
    pub fn idle_timeout(mut self, after: Duration, policy: IdlePolicy) -> Self {
        self.idle = Some((after, policy));
        self
    }

    /// Kills the VM once its agent has not answered a Health probe for this
    /// long while running (default [`DEFAULT_UNRESPONSIVE_AFTER`], 60 s),
    /// so calls on a hung guest fail with [`EndReason::Unresponsive`]
    /// instead of waiting forever. Paused time does not count. `None` turns
    /// the probe off.
    pub fn unresponsive_after(mut self, after: Option<Duration>) -> Self {
        self.unresponsive_after = after;
        self
    }

    /// How much of the host's disk the guest console's log may take
    /// (default [`DEFAULT_CONSOLE_LOG_BUDGET`], 16 MiB). A guest that writes
    /// more to its console keeps only the newest part; see
    /// [`Sandbox::console_tail`].
    pub fn console_log_budget(mut self, bytes: u64) -> Self {
        self.console_log_budget = bytes;
        self
    }

    /// What a call made while the sandbox is paused does (default
    /// [`PausedCalls::Resume`]).
    pub fn paused_calls(mut self, policy: PausedCalls) -> Self {
        self.paused_calls = policy;
        self
    }

    /// Who runs QEMU and its vsock device (default [`VmmUser::Auto`]: an
    /// unprivileged user when the caller is root and the host allows it).
    pub fn vmm_user(mut self, user: VmmUser) -> Self {
        self.vmm_user = user;
        self
    }

    /// Before starting, kills and removes the sandboxes under the state
    /// directory base whose owner process is gone (see [`crate::gc`]); off
    /// by default.
    pub fn collect_orphans(mut self, collect: bool) -> Self {
        self.collect_orphans = collect;
        self
    }

    fn validate(&self) -> Result<()> {
        if self.memory_mib < 64 {
            return Err(Error::Config(format!(
                "memory {} MiB is too small; use at least 64",
                self.memory_mib
            )));
        }
        if self.vcpus == 0 || self.vcpus > 255 {
            return Err(Error::Config(format!(
                "vcpus must be 1..=255, not {}",
                self.vcpus
            )));
        }
        for (what, path) in [("kernel", &self.kernel), ("initramfs", &self.initramfs)] {
            if !path.is_file() {
                return Err(Error::MissingArtifact {
                    what,
                    path: path.clone(),
                });
            }
        }
        if let Some(image) = &self.image {
            if !image.is_file() {
                return Err(Error::MissingArtifact {
                    what: "root image",
                    path: image.clone(),
                });
            }
        }
        if self.max_lifetime == Some(Duration::ZERO) {
            return Err(Error::Config(
                "a maximum lifetime of zero would kill the sandbox at once; use None for no ceiling"
                    .into(),
            ));
        }
        if self
            .unresponsive_after
            .is_some_and(|after| after < Duration::from_secs(1))
        {
            return Err(Error::Config(
                "an unresponsive limit under a second would kill busy guests; use None to turn the probe off"
                    .into(),
            ));
        }
        if self.console_log_budget < 64 * 1024 {
            return Err(Error::Config(format!(
                "a console log budget of {} bytes is too small to keep a useful tail; use at least 64 KiB",
                self.console_log_budget
            )));
        }
        if self.idle.is_some_and(|(after, _)| after.is_zero()) {
            return Err(Error::Config("the idle timeout must be above zero".into()));
        }
        if self.workspace.is_some() && self.image.is_none() {
            return Err(Error::Config(
                "a workspace needs a root image; set one with .image()".into(),
            ));
        }
        Ok(())
    }

    fn kernel_cmdline(&self, accel: Accel) -> String {
        // `reboot=t`: a guest reboot is a triple fault, which QEMU (started
        // with -no-reboot) turns into its exit. The kernel's default methods
        // (ACPI, keyboard controller, BIOS) can leave a microvm halted with
        // interrupts off instead, which looks like a hung guest.
        let mut cmdline = format!(
            "console=ttyS0 quiet panic=-1 reboot=t {}={}",
            keys::PORT,
            self.agent_port
        );
        if accel == Accel::Tcg {
            if let Some(khz) = crate::accel::host_tsc_khz() {
                cmdline.push_str(&format!(" tsc_early_khz={khz}"));
            }
        }
        // Disks appear as vda, vdb, ... in the order of `disks()`.
        let mut devices = (b'a'..=b'z').map(|letter| format!("/dev/vd{}", letter as char));
        for disk in self.disks() {
            if let Some(device) = devices.next() {
                let key = match disk.id {
                    ROOT_DISK => keys::ROOT,
                    _ => keys::WORKSPACE,
                };
                cmdline.push_str(&format!(" {key}={device}"));
            }
        }
        for arg in &self.kernel_args {
            cmdline.push(' ');
            cmdline.push_str(arg);
        }
        cmdline
    }

    /// The disks to attach, in guest order: the image, then the workspace.
    fn disks(&self) -> Vec<Disk> {
        let root = self.image.iter().map(|path| Disk {
            id: ROOT_DISK,
            path: path.clone(),
            read_only: true,
        });
        let workspace = self.workspace.iter().map(|path| Disk {
            id: WORKSPACE_DISK,
            path: path.clone(),
            read_only: false,
        });
        root.chain(workspace).collect()
    }

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
        let mut vmm = Vmm::start(&config, paths, self.vmm_user).await?;
        let vmm_started = begin.elapsed();

        let deadline = Deadline {
            at: begin + self.boot_timeout,
            timeout: self.boot_timeout,
        };
        let (channel, health) = connect_agent(&mut vmm, self.agent_port, deadline).await?;
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

/// A running microVM with the Airlock agent as PID 1.
///
/// Dropping it kills the VM and removes its state directory.
#[derive(Debug)]
pub struct Sandbox {
    // `Drop` kills the VM; then the fields go, the directory among the last.
    vm: Arc<VmShared>,
    channel: AgentChannel,
    watchdog: JoinHandle<()>,
    id: String,
    timings: BootTimings,
    accel: Accel,
    agent_version: String,
    features: AgentFeatures,
    default_limits: Limits,
    default_user: Option<String>,
    state_dir: TempDir,
    /// Holds the workspace lock until the VM is gone.
    _workspace: Option<Workspace>,
}

impl Sandbox {
    /// A builder with the default configuration.
    pub fn builder() -> SandboxBuilder {
        SandboxBuilder::default()
    }

    /// Starts `command` (by value or by reference) and returns once the
    /// guest has started it; the returned [`Execution`] streams its output
    /// and controls it.
    ///
    /// A program that cannot start (not found, not executable, bad working
    /// directory, unknown user) is an [`Error::Agent`] whose
    /// [`Error::agent_code`] tells why.
    pub async fn exec(&self, command: impl std::borrow::Borrow<Command>) -> Result<Execution> {
        let command = command
            .borrow()
            .with_defaults(&self.default_limits, self.default_user.as_deref());
        self.features.require_all(command.required_feature())?;
        let events = ProcessClient::new(self.channel.clone())
            .capped()
            .start(command.to_request())
            .await
            .map_err(|status| Error::agent("Process.Start", status))?
            .into_inner();
        Execution::begin(
            "Process.Start",
            self.channel.clone(),
            events,
            self.features,
            Some(Arc::clone(&self.vm)),
        )
        .await
    }

    /// Attaches to a program started earlier (by pid or tag), running or
    /// recently finished: replays the output the agent still holds (an
    /// [`Event::Dropped`](crate::Event::Dropped) first if some was lost),
    /// then follows it live. Takes over from any client attached before.
    pub async fn attach(&self, target: impl Into<Target>) -> Result<Execution> {
        self.attach_from(target, 0).await
    }

    /// Like [`attach`](Sandbox::attach), replaying from output offset
    /// `offset` on: pass [`Execution::offset`] to resume a broken stream
    /// without gaps or repeats.
    pub async fn attach_from(&self, target: impl Into<Target>, offset: u64) -> Result<Execution> {
        self.features.require(Feature::Attach)?;
        let events = ProcessClient::new(self.channel.clone())
            .capped()
            .connect(ConnectRequest {
                process: target.into().selector(),
                from_offset: offset,
            })
            .await
            .map_err(|status| Error::agent("Process.Connect", status))?
            .into_inner();
        Execution::begin(
            "Process.Connect",
            self.channel.clone(),
            events,
            self.features,
            Some(Arc::clone(&self.vm)),
        )
        .await
    }

    /// The controls (stdin, signals) of a program by pid or tag, without
    /// attaching to its output.
    pub fn process(&self, target: impl Into<Target>) -> ProcessHandle {
        ProcessHandle::new(self.channel.clone(), target.into(), self.features)
    }

    /// Running and recently finished programs, oldest first.
    pub async fn list(&self) -> Result<Vec<ProcessInfo>> {
        self.features.require(Feature::List)?;
        let answer = ProcessClient::new(self.channel.clone())
            .capped()
            .list(ListRequest {})
            .await
            .map_err(|status| Error::agent("Process.List", status))?
            .into_inner();
        answer
            .processes
            .into_iter()
            .map(ProcessInfo::from_proto)
            .collect()
    }

    /// The guest's filesystem: read, write, list, watch, and move whole
    /// directories (needs protocol revision 3).
    pub fn fs(&self) -> Files {
        Files::new(self.channel.clone(), self.features)
    }

    /// Asks the agent for its health report.
    pub async fn health(&self) -> Result<CheckResponse> {
        Ok(HealthClient::new(self.channel.clone())
            .capped()
            .check(CheckRequest {})
            .await
            .map_err(|status| Error::agent("Health.Check", status))?
            .into_inner())
    }

    /// Where the start-up time went.
    pub fn boot_timings(&self) -> BootTimings {
        self.timings
    }

    /// The accelerator the VM runs with.
    pub fn accel(&self) -> Accel {
        self.accel
    }

    /// The agent's version.
    pub fn agent_version(&self) -> &str {
        &self.agent_version
    }

    /// The private state directory (console log, sockets).
    pub fn state_dir(&self) -> &std::path::Path {
        self.state_dir.path()
    }

    /// Opens a raw stream to a guest vsock `port` that a program in the
    /// guest listens on (the agent's own port is taken by gRPC).
    pub async fn connect_vsock(&self, port: u32) -> Result<tokio::net::UnixStream> {
        transport::connect_hybrid(self.vm.vsock_uds(), port)
            .await
            .map_err(|e| Error::Protocol(format!("vsock port {port}: {}", crate::error_chain(&e))))
    }

    /// The guest console so far (kernel and agent logs), at most `max_bytes`
    /// from the end.
    pub fn console_tail(&self, max_bytes: usize) -> String {
        self.vm.console_tail(max_bytes)
    }

    /// The sandbox's name: its state directory's, unique on the host.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Running, paused, or ended (and why).
    pub fn state(&self) -> SandboxState {
        self.vm.state()
    }

    /// Why the sandbox ended, once it has.
    pub fn end_reason(&self) -> Option<EndReason> {
        self.vm.end_reason()
    }

    /// Wall time, running (unpaused) time and guest CPU time so far.
    pub fn usage(&self) -> SandboxUsage {
        self.vm.usage()
    }

    /// Freezes the VM (QEMU's process, with SIGSTOP): the guest uses no CPU and its
    /// memory stays as it is. Calls meanwhile resume it, wait or fail, as
    /// [`SandboxBuilder::paused_calls`] says. Pausing twice does nothing.
    pub async fn pause(&self) -> Result<()> {
        self.vm.pause().await
    }

    /// Restarts the VM's CPUs and sets the guest's clock to the host's, so
    /// timestamps and certificate checks are right after the pause.
    /// Resuming a running sandbox does nothing.
    pub async fn resume(&self) -> Result<()> {
        self.vm.resume().await
    }

    /// Kills the VM now; the sandbox ends as [`EndReason::Stopped`] and
    /// every open call on it fails. The state directory goes when the
    /// sandbox is dropped.
    pub fn kill(&self) {
        self.vm.kill(EndReason::Stopped);
    }

    /// Powers the VM off gracefully: the agent syncs and powers off; after
    /// `grace` the VM is killed regardless. The state directory is removed.
    pub async fn shutdown(self, grace: Duration) -> Result<()> {
        self.power_off(grace).await
    }

    /// [`shutdown`](Sandbox::shutdown) through a shared handle (the manager
    /// stops sandboxes that callers still hold); the state directory goes
    /// when the last handle is dropped.
    #[tracing::instrument(skip_all)]
    pub(crate) async fn power_off(&self, grace: Duration) -> Result<()> {
        if let Some(reason) = self.vm.end_reason() {
            tracing::debug!(%reason, "already ended");
            return Ok(());
        }
        // A paused guest cannot power itself off.
        if self.vm.state() == SandboxState::Paused {
            self.vm.resume().await?;
        }
        self.vm.begin_stop();
        let asked = tokio::time::timeout(
            grace,
            SystemClient::new(self.channel.clone())
                .capped()
                .shutdown(ShutdownRequest {}),
        )
        .await;
        if let Ok(Err(status)) = &asked {
            tracing::warn!(%status, "agent refused to shut down");
        }
        if self.vm.wait_exit(grace).await {
            tracing::debug!("VM powered off");
        } else {
            tracing::warn!(?grace, "VM did not power off in time; asking QEMU to quit");
            match crate::Qmp::connect(self.vm.qmp_socket()).await {
                Ok(mut qmp) => {
                    if let Err(error) = qmp.execute("quit", None).await {
                        tracing::debug!(%error, "qmp quit");
                    }
                }
                Err(error) => tracing::debug!(%error, "qmp connect"),
            }
            self.vm.wait_exit(Duration::from_secs(1)).await;
        }
        self.vm.kill(EndReason::Stopped);
        Ok(())
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.watchdog.abort();
        self.vm.kill(EndReason::Stopped);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn handles_are_send_and_sync() {
        assert_send_sync::<Sandbox>();
        assert_send_sync::<Execution>();
        assert_send_sync::<ProcessHandle>();
        assert_send_sync::<SandboxBuilder>();
    }

    #[test]
    fn missing_kernel_names_the_setup_command() {
        let err = Sandbox::builder()
            .kernel("/nonexistent/vmlinuz")
            .validate()
            .unwrap_err()
            .to_string();
        assert!(err.contains("/nonexistent/vmlinuz"), "{err}");
        assert!(err.contains("scripts/setup"), "{err}");
    }

    #[test]
    fn silly_sizes_are_refused() {
        assert!(Sandbox::builder().memory_mib(8).validate().is_err());
        assert!(Sandbox::builder().vcpus(0).validate().is_err());
    }

    #[test]
    fn cmdline_carries_the_agent_port_and_extra_args() {
        let line = Sandbox::builder()
            .kernel_arg("airlock.log=debug")
            .kernel_cmdline(Accel::Kvm);
        assert!(line.contains("airlock.port=1024"), "{line}");
        assert!(line.contains(" reboot=t "), "{line}");
        assert!(line.ends_with("airlock.log=debug"), "{line}");
        assert!(!line.contains("tsc_early_khz"), "{line}");
    }

    #[test]
    fn image_and_workspace_are_named_on_the_command_line() {
        let plain = Sandbox::builder().kernel_cmdline(Accel::Kvm);
        assert!(!plain.contains("airlock.root"), "{plain}");
        let builder = Sandbox::builder().image("/i/rootfs.ext4");
        let line = builder.kernel_cmdline(Accel::Kvm);
        assert!(line.contains(" airlock.root=/dev/vda"), "{line}");
        assert!(!line.contains("airlock.workspace"), "{line}");
        let builder = builder.workspace("/w/ws.img");
        let line = builder.kernel_cmdline(Accel::Kvm);
        assert!(line.contains(" airlock.root=/dev/vda"), "{line}");
        assert!(line.contains(" airlock.workspace=/dev/vdb"), "{line}");
        let disks = builder.disks();
        assert_eq!(disks.len(), 2);
        assert!(disks[0].read_only && !disks[1].read_only);
    }

    #[test]
    fn a_workspace_needs_an_image() {
        let err = Sandbox::builder()
            .kernel("/bin/sh")
            .initramfs("/bin/sh")
            .workspace("/tmp/ws")
            .validate()
            .unwrap_err()
            .to_string();
        assert!(err.contains("workspace needs a root image"), "{err}");
    }

    #[test]
    fn tcg_guests_get_the_host_tsc_rate() {
        let line = Sandbox::builder().kernel_cmdline(Accel::Tcg);
        if crate::accel::host_tsc_khz().is_some() {
            assert!(line.contains(" tsc_early_khz="), "{line}");
        }
    }
}
