//! The VMM seam: what the sandbox and its lifecycle need from whatever runs
//! the agent, and the backends behind it.
//!
//! [`Backend`] is a closed enum, not a public trait: each operation below
//! is one `match`, and a new VMM is one more variant.
//!
//! | operation | QEMU ([`QemuVm`]) | process ([`ProcessVm`]) |
//! | --- | --- | --- |
//! | start | QEMU `-M microvm` (after vhost-device-vsock, on vsock) | the agent binary with `--listen unix:` |
//! | agent transport | virtio-serial through QEMU's socket, or hybrid vsock over the device's | the agent's Unix socket |
//! | templates | save and restore over QMP (`snapshot`), serial channel only | none |
//! | readiness | serial: the opening is answered; vsock: the agent's announcement on host port 1025 | the socket answers |
//! | freeze / thaw | SIGSTOP / SIGCONT of QEMU | SIGSTOP / SIGCONT of the agent and its programs |
//! | exit, kill | QEMU's exit; kill QEMU and the device | the agent's exit; kill it and its programs |
//! | graceful quit | QMP `quit` | SIGTERM |
//! | diagnostics | console tail, QEMU's stderr, the device's state | the agent's log |
//! | guest CPU time | QEMU's vCPU threads (`CPU N/TCG`, `CPU N/KVM`) | the agent process |
//! | disks | virtio-blk, `/dev/vda`, `/dev/vdb`, ... | none |
//!
//! The process backend exists so the lifecycle (ceilings, idle policy,
//! watchdog, reconnects) is tested in milliseconds without a VM.
//!
//! - `qemu_vm`: [`QemuVm`]; `qemu`: its command line; `qmp`: a small QMP
//!   client; `binaries`: locating `qemu-system-x86_64` and
//!   `vhost-device-vsock`; `user`: which (unprivileged) user they run as.
//! - `process`: [`ProcessVm`].
//! - `child`, `cpu_time`, `log_file`: spawning and reaping processes,
//!   reading their CPU time, bounding and tailing their logs.
//! - `handle`: [`VmmProcess`], a VMM process that is our child or one
//!   adopted from an owner that died (see `crate::adopt`).
//!
//! Each process is added to the state directory's owner record as soon as
//! it runs, so `gc` can end it if the owner dies without doing so.

mod binaries;
mod child;
mod cpu_time;
mod handle;
mod log_file;
mod process;
mod qemu;
mod qemu_vm;
pub mod qmp;
pub(crate) mod snapshot;
mod user;

use std::path::PathBuf;
use std::time::Duration;

use tokio::net::UnixListener;

use crate::transport::AgentTransport;

pub(crate) use handle::{Exited, VmmProcess};
pub(crate) use process::ProcessVm;
pub(crate) use qemu::{
    cpu_model, guest_disk_device, AgentPort, Disk, GuestMemory, QemuConfig, SerialPort,
};
pub(crate) use qemu_vm::{QemuVm, VmPaths};
pub(crate) use snapshot::SnapshotError;
pub use user::VmmUser;

/// Errors starting or controlling the VMM processes.
#[derive(Debug, thiserror::Error)]
pub enum VmmError {
    #[error("{name} not found (set {env} or {hint})")]
    ProgramNotFound {
        name: &'static str,
        env: &'static str,
        hint: &'static str,
    },
    #[error("cannot start {program}")]
    Spawn {
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot create {path}")]
    LogFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("vhost-device-vsock did not create {socket} within {timeout:?}; its log:\n{log}")]
    DeviceNotReady {
        socket: PathBuf,
        timeout: Duration,
        log: String,
    },
    #[error("the vsock device exited ({status}); its log:\n{log}")]
    DeviceExited { status: String, log: String },
    #[error("QEMU has already exited")]
    Exited,
    #[error("cannot tell the version of {program} from {output:?}")]
    Version { program: PathBuf, output: String },
    #[error("cannot signal QEMU")]
    Signal(#[source] nix::Error),
    #[error("cannot take over the VMM process")]
    Adopt(#[source] std::io::Error),
    #[error("waiting for a VMM process")]
    Wait(#[source] std::io::Error),
    #[error("running the VMM as uid {uid} needs root; use VmmUser::Caller")]
    UserNeedsRoot { uid: u32 },
    #[error(
        "the VMM user (uid {uid}, gid {gid}) cannot {access} {path}; give it access \
         (and to the directories above) or choose another VMM user"
    )]
    UserCannotReach {
        uid: u32,
        gid: u32,
        path: PathBuf,
        access: &'static str,
    },
    #[error("cannot listen on {path} for the agent's announcement")]
    ReadySocket {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot prepare the state directory {path} for the VMM")]
    StateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The QEMU binary this host runs.
pub(crate) fn locate_qemu() -> Result<PathBuf, VmmError> {
    binaries::QEMU.locate()
}

/// The version of the QEMU this host runs, `major.minor.micro` as QMP's
/// `query-version` gives it, from `--version`; asked once per process.
pub(crate) fn qemu_version() -> Result<String, VmmError> {
    static VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    if let Some(version) = VERSION.get() {
        return Ok(version.clone());
    }
    let program = locate_qemu()?;
    let output = std::process::Command::new(&program)
        .arg("--version")
        .output()
        .map_err(|source| VmmError::Spawn {
            program: program.clone(),
            source,
        })?;
    let text = String::from_utf8_lossy(&output.stdout);
    let version = parse_qemu_version(&text).ok_or_else(|| VmmError::Version {
        program,
        output: text.trim().to_owned(),
    })?;
    Ok(VERSION.get_or_init(|| version).clone())
}

/// `7.2.22` from `QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u13)`.
fn parse_qemu_version(text: &str) -> Option<String> {
    let after = text.split("version ").nth(1)?;
    let version: String = after
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let parts = version.split('.').count();
    (parts == 3 && version.split('.').all(|p| !p.is_empty())).then_some(version)
}

/// Which backend a sandbox runs on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum BackendKind {
    #[default]
    Qemu,
    /// The agent binary as a plain host process (tests of the lifecycle).
    Process { agent: PathBuf },
}

/// How a backend tells that its agent serves.
#[derive(Debug)]
pub(crate) enum Readiness {
    /// Wait for the agent's announcement on this listener, then dial.
    Announcement(UnixListener),
    /// Open a connection on the serial channel: the opening itself waits
    /// for the agent.
    Opening,
    /// Dial until the agent answers.
    Dial,
}

/// How to ask a backend to end gracefully, without holding it.
#[derive(Debug, Clone)]
pub(crate) enum Quit {
    /// QMP `quit` on this socket.
    Qmp(PathBuf),
    /// SIGTERM to this process.
    Terminate(u32),
}

impl Quit {
    pub async fn send(&self) {
        match self {
            Quit::Qmp(socket) => match qmp::Qmp::connect(socket).await {
                Ok(mut qmp) => {
                    if let Err(error) = qmp.execute("quit", None).await {
                        tracing::debug!(%error, "qmp quit");
                    }
                }
                Err(error) => tracing::debug!(%error, "qmp connect"),
            },
            Quit::Terminate(pid) => {
                if let Err(error) = child::signal(*pid, nix::sys::signal::Signal::SIGTERM) {
                    tracing::debug!(%error, pid, "sigterm");
                }
            }
        }
    }
}

/// A running backend: the VMM (or process) that runs one sandbox's agent.
#[derive(Debug)]
pub(crate) enum Backend {
    Qemu(Box<QemuVm>),
    Process(ProcessVm),
}

impl Backend {
    /// How the host reaches the agent.
    pub fn transport(&self) -> AgentTransport {
        match self {
            Backend::Qemu(vm) => vm.transport(),
            Backend::Process(vm) => vm.transport(),
        }
    }

    /// How to tell that the agent serves; `None` once the announcement
    /// listener was taken.
    pub fn take_readiness(&mut self) -> Option<Readiness> {
        match self {
            Backend::Qemu(vm) if vm.is_serial() => Some(Readiness::Opening),
            Backend::Qemu(vm) => vm.take_ready_listener().map(Readiness::Announcement),
            Backend::Process(_) => Some(Readiness::Dial),
        }
    }

    /// The main process's id, for logs.
    pub fn pid(&self) -> u32 {
        match self {
            Backend::Qemu(vm) => vm.qemu_pid(),
            Backend::Process(vm) => vm.pid(),
        }
    }

    /// Fails if a helper process the agent's channel depends on has exited.
    pub fn check_device(&mut self) -> Result<(), VmmError> {
        match self {
            Backend::Qemu(vm) => vm.check_device(),
            Backend::Process(_) => Ok(()),
        }
    }

    /// The state of the channel's helper for error messages.
    pub fn device_diagnostics(&mut self, max_bytes: usize) -> String {
        match self {
            Backend::Qemu(vm) => vm.device_diagnostics(max_bytes),
            Backend::Process(_) => "none (the agent runs as a process)".into(),
        }
    }

    /// How the VMM (or agent process) ended, if it has, without blocking.
    pub fn try_exit(&mut self) -> Result<Option<Exited>, VmmError> {
        match self {
            Backend::Qemu(vm) => vm.try_exit(),
            Backend::Process(vm) => vm.try_exit(),
        }
    }

    /// Freezes or thaws the guest.
    pub fn freeze(&mut self, frozen: bool) -> Result<(), VmmError> {
        match self {
            Backend::Qemu(vm) => vm.freeze(frozen),
            Backend::Process(vm) => vm.freeze(frozen),
        }
    }

    /// Kills everything the backend runs and reaps it. Idempotent.
    pub fn kill(&mut self) {
        match self {
            Backend::Qemu(vm) => vm.kill(),
            Backend::Process(vm) => vm.kill(),
        }
    }

    /// With `leave`, the processes run on whatever happens to this value:
    /// [`kill`](Backend::kill) and dropping it leave them alone (a detached
    /// sandbox's, for the process that adopts it).
    pub fn leave(&mut self, leave: bool) {
        match self {
            Backend::Qemu(vm) => vm.leave(leave),
            Backend::Process(vm) => vm.leave(leave),
        }
    }

    /// The main process's identity (pid and start time), while it runs:
    /// what an adoption record names.
    pub fn identity(&self) -> Option<crate::state_dir::owner::ProcessId> {
        match self {
            Backend::Qemu(vm) => vm.identity(),
            Backend::Process(vm) => vm.identity(),
        }
    }

    /// Whether the guest is frozen (its main process stopped by SIGSTOP).
    pub fn is_frozen(&self) -> bool {
        match self {
            Backend::Qemu(vm) => vm.is_frozen(),
            Backend::Process(vm) => vm.is_frozen(),
        }
    }

    /// How to ask for a graceful end.
    pub fn quit(&self) -> Quit {
        match self {
            Backend::Qemu(vm) => Quit::Qmp(vm.qmp_socket().to_owned()),
            Backend::Process(vm) => Quit::Terminate(vm.pid()),
        }
    }

    /// The end of the guest's output (console, logs), for error messages.
    pub fn diagnostics(&self, max_bytes: usize) -> String {
        match self {
            Backend::Qemu(vm) => vm.diagnostics(max_bytes),
            Backend::Process(vm) => vm.diagnostics(max_bytes),
        }
    }

    /// Keeps the guest console's log within `budget` bytes of disk.
    pub fn bound_console_log(&self, budget: u64) {
        match self {
            Backend::Qemu(vm) => vm.bound_console_log(budget),
            Backend::Process(_) => {}
        }
    }

    /// CPU time the guest has used, or `None` when it is gone.
    pub fn guest_cpu(&self) -> Option<Duration> {
        match self {
            Backend::Qemu(vm) => vm.vcpu_time(),
            Backend::Process(vm) => vm.cpu_time(),
        }
    }

    /// Whether the guest keeps its own clock, which then needs the host's
    /// time after a pause (a process shares the host's).
    pub fn has_own_clock(&self) -> bool {
        matches!(self, Backend::Qemu(_))
    }
}

#[cfg(test)]
mod tests {
    use super::parse_qemu_version;

    #[test]
    fn qemu_versions_read_as_qmp_reports_them() {
        let line = "QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u13)\nCopyright";
        assert_eq!(parse_qemu_version(line).as_deref(), Some("7.2.22"));
        assert_eq!(
            parse_qemu_version("QEMU emulator version 10.0.2\n").as_deref(),
            Some("10.0.2")
        );
        assert_eq!(parse_qemu_version("QEMU emulator version 9.1"), None);
        assert_eq!(parse_qemu_version("something else"), None);
    }
}
