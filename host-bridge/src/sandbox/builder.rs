//! [`SandboxBuilder`]: a sandbox's configuration, its checks, and what it
//! becomes on the VMM's command line (the kernel command line and the
//! disks). Starting it is `boot`.

use std::path::PathBuf;
use std::time::Duration;

use airlock_proto::contract::cmdline as keys;

use super::error::ConfigError;
use crate::error::{Error, Result};
use crate::exec::Limits;
use crate::lifecycle::{IdlePolicy, PausedCalls};
use crate::trust::{CaCert, TrustConfig};
use crate::vmm::{guest_disk_device, BackendKind, Disk, SerialPort, VmmUser};
use crate::workspace::DEFAULT_WORKSPACE_BYTES;
use crate::{artifacts, state_dir, Accel};
use airlock_gateway::policy::NetRule;
use airlock_gateway::NetworkOptions;

/// The default hard ceiling on a sandbox's wall-clock life.
pub const DEFAULT_MAX_LIFETIME: Duration = Duration::from_secs(60 * 60);
/// How long a running sandbox's agent may go without answering, by
/// default, before the VM is killed as hung.
pub const DEFAULT_UNRESPONSIVE_AFTER: Duration = Duration::from_secs(60);
/// The default disk budget of the guest console's log on the host.
pub const DEFAULT_CONSOLE_LOG_BUDGET: u64 = 16 << 20;

/// Configures and starts a [`Sandbox`](crate::Sandbox).
#[derive(Debug, Clone)]
pub struct SandboxBuilder {
    pub(super) kernel: PathBuf,
    pub(super) initramfs: PathBuf,
    pub(super) memory_mib: u32,
    pub(super) vcpus: u32,
    pub(super) boot_timeout: Duration,
    pub(super) accel: Accel,
    pub(super) agent_port: u32,
    pub(super) state_dir_base: PathBuf,
    pub(super) kernel_args: Vec<String>,
    pub(super) image: Option<PathBuf>,
    pub(super) workspace: Option<PathBuf>,
    pub(super) workspace_bytes: u64,
    pub(super) default_limits: Limits,
    pub(super) default_user: Option<String>,
    pub(super) default_cwd: Option<String>,
    pub(super) serial_ports: Vec<SerialPort>,
    pub(super) vmm_user: VmmUser,
    pub(super) collect_orphans: bool,
    pub(super) max_lifetime: Option<Duration>,
    pub(super) idle: Option<(Duration, IdlePolicy)>,
    pub(super) paused_calls: PausedCalls,
    pub(super) console_log_budget: u64,
    pub(super) unresponsive_after: Option<Duration>,
    pub(super) backend: BackendKind,
    pub(super) channel: GuestChannel,
    pub(super) from_template: bool,
    pub(super) template_dir: PathBuf,
    /// The named template this start clones (see [`SandboxBuilder::template`]).
    pub(super) named_template: Option<String>,
    /// The snapshot this start clones (see [`SandboxBuilder::snapshot`]).
    pub(super) from_snapshot: Option<crate::snapshot::Snapshot>,
    pub(super) saved_dir: PathBuf,
    pub(super) network: Option<NetworkOptions>,
    pub(super) adoptable: bool,
    /// The default environment, in the order given.
    pub(super) env: Vec<(String, String)>,
    /// A pool's fill: the adoption record is written at the handout.
    pub(crate) pooled: bool,
    /// The roots the guest trusts besides its image's.
    pub(super) trust: TrustConfig,
}

/// The virtio channel the agent serves on (QEMU).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum GuestChannel {
    /// A virtio-serial port: QEMU can snapshot it, so templates work. The
    /// default.
    #[default]
    Serial,
    /// vsock through vhost-device-vsock, the channel of VMMs that only
    /// have vsock (Firecracker, Cloud Hypervisor). QEMU cannot snapshot a
    /// VM with it, so these sandboxes always boot cold.
    Vsock,
}

impl GuestChannel {
    pub(super) fn contract(self) -> airlock_proto::contract::Channel {
        match self {
            GuestChannel::Serial => airlock_proto::contract::Channel::Serial,
            GuestChannel::Vsock => airlock_proto::contract::Channel::Vsock,
        }
    }
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
            default_cwd: None,
            serial_ports: Vec::new(),
            vmm_user: VmmUser::Auto,
            collect_orphans: false,
            max_lifetime: Some(DEFAULT_MAX_LIFETIME),
            idle: None,
            paused_calls: PausedCalls::default(),
            console_log_budget: DEFAULT_CONSOLE_LOG_BUDGET,
            unresponsive_after: Some(DEFAULT_UNRESPONSIVE_AFTER),
            backend: BackendKind::Qemu,
            channel: GuestChannel::default(),
            from_template: false,
            template_dir: crate::template::default_dir(),
            named_template: None,
            from_snapshot: None,
            saved_dir: crate::saved::default_dir(),
            network: None,
            adoptable: false,
            env: Vec::new(),
            pooled: false,
            trust: TrustConfig::default(),
        }
    }
}

impl SandboxBuilder {
    /// The guest kernel (default: `kernel/vmlinuz` in [`artifacts::home`]).
    pub fn kernel(mut self, path: impl Into<PathBuf>) -> Self {
        self.kernel = path.into();
        self
    }

    /// The initramfs holding the agent (default: `initramfs.cpio` in [`artifacts::home`]).
    pub fn initramfs(mut self, path: impl Into<PathBuf>) -> Self {
        self.initramfs = path.into();
        self
    }

    /// Limits applied to every command run in the sandbox; a command's own
    /// [`limits`](crate::Command::limits) win field by field.
    pub fn default_limits(mut self, limits: Limits) -> Self {
        self.default_limits = limits;
        self
    }

    /// Sets `key` to `value` in the environment of every program
    /// ([`Sandbox::exec`](crate::Sandbox::exec)) and every code context
    /// (those [`Contexts::create`](crate::Contexts::create) makes, and the
    /// default context a [`run_code`](crate::Sandbox::run_code) without a
    /// context uses), under the program's or context's own variables. With
    /// a network these go over the network's variables (proxy, CA bundle,
    /// secrets' placeholders) of the same name. A later value of a key
    /// replaces an earlier one.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        let key = key.into();
        let value = value.into();
        match self.env.iter_mut().find(|(k, _)| *k == key) {
            Some((_, old)) => *old = value,
            None => self.env.push((key, value)),
        }
        self
    }

    /// [`env`](SandboxBuilder::env) for each pair of `vars`.
    pub fn envs<I, K, V>(self, vars: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        vars.into_iter()
            .fold(self, |builder, (key, value)| builder.env(key, value))
    }

    /// Lets the sandbox outlive the process holding it (off by default).
    /// Its state directory then keeps a record (`adopt.json`, mode 0600,
    /// kept current) of everything needed to take it over: the machine,
    /// the VMM process, the clock, the policies, the default limits, user
    /// and environment, and its network with the secrets' values and the
    /// sandbox CA's key (so that what the guest holds stays valid). If the
    /// process dies (SIGKILL, a crash) or [detaches](crate::Sandbox::detach)
    /// it, the VM runs on, `gc` leaves it alone while it runs and its
    /// lifetime lasts, and [`SandboxBuilder::adopt`] in another process (or
    /// this one) takes it over; see [`crate::adopt`]. Needs the serial
    /// channel (the default): the vsock channel is refused.
    pub fn adoptable(mut self, adoptable: bool) -> Self {
        self.adoptable = adoptable;
        self
    }

    /// The user every command runs as unless it names one (default: root,
    /// without the dangerous capabilities unless
    /// [`privileged`](crate::Command::privileged)).
    pub fn default_user(mut self, user: impl Into<String>) -> Self {
        self.default_user = Some(user.into());
        self
    }

    /// The directory every command starts in unless it names one (an
    /// absolute path; default: the user's home, `/root` for root, when it is
    /// a directory, else `/`). A named template's `WORKDIR` sets it.
    pub fn default_cwd(mut self, dir: impl Into<String>) -> Self {
        self.default_cwd = Some(dir.into());
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
    /// included but not time saved to disk (default [`DEFAULT_MAX_LIFETIME`], one hour): when it is
    /// reached the VM is killed, whatever it is doing, and the sandbox ends
    /// with [`EndReason::LifetimeExceeded`](crate::EndReason::LifetimeExceeded). `None` removes the ceiling.
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
    /// so calls on a hung guest fail with [`EndReason::Unresponsive`](crate::EndReason::Unresponsive)
    /// instead of waiting forever. Paused time does not count. `None` turns
    /// the probe off.
    pub fn unresponsive_after(mut self, after: Option<Duration>) -> Self {
        self.unresponsive_after = after;
        self
    }

    /// How much of the host's disk the guest console's log may take
    /// (default [`DEFAULT_CONSOLE_LOG_BUDGET`], 16 MiB). A guest that writes
    /// more to its console keeps only the newest part; see
    /// [`Sandbox::console_tail`](crate::Sandbox::console_tail).
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

    /// The channel the agent serves on (default [`GuestChannel::Serial`]).
    pub fn guest_channel(mut self, channel: GuestChannel) -> Self {
        self.channel = channel;
        self
    }

    /// Starts from a template of this configuration (off by default): the
    /// first start boots the guest, saves it as a template and clones it;
    /// later starts only clone it, in a fraction of a cold boot, sharing
    /// the template's memory copy on write. Each clone gets its own
    /// entropy, clock, hostname and id before anything runs in it. A
    /// configuration no template can serve (a workspace, the vsock
    /// channel) boots cold, and so does any start whose template is
    /// missing its files, corrupt or fails to restore, with a warning; see
    /// [`Sandbox::origin`](crate::Sandbox::origin).
    pub fn from_template(mut self, on: bool) -> Self {
        self.from_template = on;
        self
    }

    /// Where templates are kept (default [`template::default_dir`](crate::template::default_dir)).
    pub fn template_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.template_dir = dir.into();
        self
    }

    /// Where sandboxes saved to disk are kept (default
    /// [`saved::default_dir`](crate::saved::default_dir)); a restore after a
    /// restart looks there.
    pub fn saved_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.saved_dir = dir.into();
        self
    }

    /// The sandboxes under this builder's state directory base that wait
    /// for adoption (see [`crate::adopt::orphans`]).
    pub fn orphans(&self) -> std::io::Result<Vec<crate::adopt::Orphan>> {
        crate::adopt::orphans(&self.state_dir_base)
    }

    /// The store of sandboxes saved to disk this builder restores from.
    pub fn saved_store(&self) -> crate::saved::SavedStore {
        crate::saved::SavedStore::new(&self.saved_dir)
    }

    /// Gives the guest network access under `options` (off by default: the
    /// guest has no network at all). The guest's connections and DNS
    /// queries are carried to the host, which allows what the policy allows
    /// and records every decision ([`Sandbox::network_audit`]).
    ///
    /// [`Sandbox::network_audit`]: crate::Sandbox::network_audit
    pub fn network(mut self, options: NetworkOptions) -> Self {
        self.network = Some(options);
        self
    }

    /// Allows `rule` (turning the network on with a deny-all policy first
    /// if it was off).
    pub fn allow_net(mut self, rule: NetRule) -> Self {
        self.network = Some(self.network.take().unwrap_or_default().allow(rule));
        self
    }

    /// Makes the guest trust `cert` as a root of TLS, besides its image's
    /// roots (repeatable): every client that reads the system store
    /// (OpenSSL's bundle and directory, Python's default context, pip,
    /// curl) and, through `SSL_CERT_FILE`, `REQUESTS_CA_BUNDLE`,
    /// `NODE_EXTRA_CA_CERTS` and the like, runtimes with roots of their
    /// own. With a network, the host also trusts it when it checks the
    /// servers of secret-bound hosts. The roots are installed at every
    /// start, cold or a clone of a template, before anything runs; a
    /// workspace keeps none of them.
    ///
    /// A builder given no roots at all takes them from
    /// [`AIRLOCK_CA_CERTS`](crate::trust::CA_CERTS_ENV); `ca_certs([])`
    /// says "none".
    pub fn ca_cert(self, cert: CaCert) -> Self {
        self.ca_certs([cert])
    }

    /// [`ca_cert`](Self::ca_cert) for each of `certs` (a PEM file's, say:
    /// [`CaCert::from_pem_file`]).
    pub fn ca_certs(mut self, certs: impl IntoIterator<Item = CaCert>) -> Self {
        self.trust.add(certs);
        self
    }

    /// Makes the guest trust exactly the host's system store (read at
    /// start: `SSL_CERT_FILE`, else the distribution's bundle, such as
    /// `/etc/ssl/certs/ca-certificates.crt`) instead of its image's roots,
    /// plus any [`ca_cert`](Self::ca_cert): what a host behind a
    /// TLS-inspecting proxy needs, so that the guest reaches what the host
    /// reaches. Like `ca_cert`, it also goes to the host's checks of
    /// secret-bound servers.
    pub fn trust_host_roots(mut self, on: bool) -> Self {
        self.trust.host_roots(on);
        self
    }

    /// Runs the agent binary `agent` as a plain host process on a Unix
    /// socket instead of booting a VM: for tests of the lifecycle (lifetime
    /// ceiling, idle policy, the unresponsive-agent watchdog, reconnects),
    /// which then take milliseconds. Not a sandbox: the programs it runs
    /// are host processes. No kernel, image, workspace or serial port.
    #[doc(hidden)]
    pub fn process_backend(mut self, agent: impl Into<PathBuf>) -> Self {
        self.backend = BackendKind::Process {
            agent: agent.into(),
        };
        self
    }

    pub(super) fn validate(&self) -> Result<()> {
        if self.memory_mib < 64 {
            return Err(ConfigError::MemoryTooSmall {
                mib: self.memory_mib,
            }
            .into());
        }
        if self.vcpus == 0 || self.vcpus > 255 {
            return Err(ConfigError::Vcpus { vcpus: self.vcpus }.into());
        }
        let artifacts = match &self.backend {
            BackendKind::Qemu => vec![("kernel", &self.kernel), ("initramfs", &self.initramfs)],
            BackendKind::Process { agent } => {
                if self.image.is_some() || self.workspace.is_some() || !self.serial_ports.is_empty()
                {
                    return Err(ConfigError::ProcessBackendDevices.into());
                }
                if !agent.is_file() {
                    return Err(ConfigError::AgentBinaryMissing {
                        path: agent.clone(),
                    }
                    .into());
                }
                Vec::new()
            }
        };
        for (what, path) in artifacts {
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
            return Err(ConfigError::ZeroLifetime.into());
        }
        if self
            .unresponsive_after
            .is_some_and(|after| after < Duration::from_secs(1))
        {
            return Err(ConfigError::UnresponsiveTooShort.into());
        }
        if self.console_log_budget < 64 * 1024 {
            return Err(ConfigError::ConsoleBudgetTooSmall {
                bytes: self.console_log_budget,
            }
            .into());
        }
        if self.idle.is_some_and(|(after, _)| after.is_zero()) {
            return Err(ConfigError::ZeroIdleTimeout.into());
        }
        if self.workspace.is_some() && self.image.is_none() {
            return Err(ConfigError::WorkspaceWithoutImage.into());
        }
        if self.adoptable
            && self.backend == BackendKind::Qemu
            && self.channel != GuestChannel::Serial
        {
            return Err(ConfigError::AdoptableNeedsSerial.into());
        }
        if let Some(network) = &self.network {
            airlock_gateway::host::check_rules(
                network.get_policy().rules(),
                network.get_host_access(),
            )
            .map_err(|(index, error)| Error::HostRule { index, error })?;
        }
        if let Some((key, _)) = self
            .env
            .iter()
            .find(|(key, _)| key.is_empty() || key.contains(['=', '\0']))
        {
            return Err(ConfigError::EnvName { name: key.clone() }.into());
        }
        Ok(())
    }

    pub(super) fn kernel_cmdline(&self, accel: Accel) -> String {
        // `reboot=t`: a guest reboot is a triple fault, which QEMU (started
        // with -no-reboot) turns into its exit. The kernel's default methods
        // (ACPI, keyboard controller, BIOS) can leave a microvm halted with
        // interrupts off instead, which looks like a hung guest.
        let mut cmdline = format!(
            "console=ttyS0 quiet panic=-1 reboot=t {}={} {}={}",
            keys::PORT,
            self.agent_port,
            keys::CHANNEL,
            self.channel.contract().as_str()
        );
        if accel == Accel::Tcg {
            cmdline.push_str(&format!(" {}", crate::accel::TCG_TSC_RELIABLE));
            if let Some(khz) = crate::accel::host_tsc_khz() {
                cmdline.push_str(&format!(" tsc_early_khz={khz}"));
            }
        }
        for (index, disk) in self.disks().into_iter().enumerate() {
            if let Some(device) = guest_disk_device(index) {
                let key = match disk.id {
                    Disk::ROOT => keys::ROOT,
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
    pub(super) fn disks(&self) -> Vec<Disk> {
        let root = self.image.iter().map(|path| Disk {
            id: Disk::ROOT,
            path: path.clone(),
            read_only: true,
        });
        let workspace = self.workspace.iter().map(|path| Disk {
            id: Disk::WORKSPACE,
            path: path.clone(),
            read_only: false,
        });
        root.chain(workspace).collect()
    }
}
