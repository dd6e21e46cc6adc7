//! The QEMU backend: QEMU `-M microvm`, with the agent on a virtio-serial
//! port (the default) or on vsock through `vhost-device-vsock`, the
//! vhost-user device that gives the guest a vsock without the kernel's
//! `/dev/vhost-vsock`.
//!
//! [`QemuVm::start`] lays out the state directory and starts QEMU. On the
//! serial channel that is all: QEMU listens on the port's Unix socket and
//! the host opens a connection there (see `transport::serial`). On vsock it
//! first binds the socket on which the agent announces that it serves
//! ([`QemuVm::take_ready_listener`]), starts the vsock device and waits for
//! its vhost-user socket; the host then reaches the guest through the
//! device's hybrid-vsock Unix socket. Every process is killed when the
//! `QemuVm` is dropped, unless it was told to [`leave`](QemuVm::leave) them
//! running (a detached sandbox's).
//!
//! [`QemuVm::adopt`] takes over the QEMU of a sandbox whose owner died
//! (see `crate::adopt`): not our child, so it is held as an adopted
//! [`VmmProcess`]; only the serial channel can be adopted (a vsock device
//! would be one more orphan to take over, for a channel kept only for
//! VMMs without snapshots).
//!
//! What only QEMU knows lives here too: which of its threads are vCPUs
//! (guest CPU time), QMP `quit` for a graceful end, and the guest's names
//! for the disks (`/dev/vda`, `/dev/vdb`, ...).

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use std::os::unix::process::CommandExt;

use tokio::net::UnixListener;

use super::child::{command, kill_and_reap, record, spawn};
use super::handle::{Exited, VmmProcess};
use super::log_file::{self, tail};
use super::qemu::{AgentPort, GuestMemory, QemuConfig};
use super::user::{Access, Credentials};
use super::{binaries, cpu_time, VmmError, VmmUser};
use crate::state_dir::{self, owner::ProcessId};
use crate::transport::AgentTransport;
use crate::Accel;

/// The guest's vsock context id. Each VM has its own vsock device, so every
/// guest can use the same one.
const GUEST_CID: u32 = 3;
/// How long vhost-device-vsock may take to create its socket.
const DEVICE_READY_TIMEOUT: Duration = Duration::from_secs(10);

/// The files a VM keeps in its private state directory.
#[derive(Debug, Clone)]
pub(crate) struct VmPaths {
    /// The state directory itself, which holds the owner record.
    pub dir: PathBuf,
    /// QEMU's socket for the agent's virtio-serial port.
    pub agent_socket: PathBuf,
    pub vhost_user_socket: PathBuf,
    pub vsock_uds: PathBuf,
    /// Where the device delivers the guest's connection to host port
    /// [`READY_PORT`](airlock_proto::READY_PORT).
    pub ready_socket: PathBuf,
    pub console_log: PathBuf,
    pub qmp_socket: PathBuf,
    pub qemu_log: PathBuf,
    pub device_log: PathBuf,
}

impl VmPaths {
    pub fn in_dir(dir: &Path) -> Self {
        VmPaths {
            dir: dir.to_owned(),
            agent_socket: dir.join("agent.sock"),
            vhost_user_socket: dir.join("vhost-user-vsock.sock"),
            vsock_uds: dir.join("vsock.sock"),
            // vhost-device-vsock's naming for guest-initiated connections.
            ready_socket: dir.join(format!("vsock.sock_{}", airlock_proto::READY_PORT)),
            console_log: dir.join("console.log"),
            qmp_socket: dir.join("qmp.sock"),
            qemu_log: dir.join("qemu.log"),
            device_log: dir.join("vhost-device-vsock.log"),
        }
    }
}

/// A running VM: the QEMU process, and its vsock device process when the
/// agent's channel is vsock.
#[derive(Debug)]
pub(crate) struct QemuVm {
    qemu: VmmProcess,
    device: Option<Child>,
    paths: VmPaths,
    qemu_exit: Option<Exited>,
    /// Whether dropping this value leaves the processes running.
    leave: bool,
    ready: Option<UnixListener>,
    /// Whether the agent serves on the virtio-serial port.
    serial: bool,
    agent_port: u32,
}

impl QemuVm {
    /// Starts QEMU (after the vsock device, on that channel) as `user`,
    /// with files under `paths`; on vsock the agent serves on guest port
    /// `agent_port`.
    #[tracing::instrument(name = "launch_vmm", skip_all, fields(incoming = config.incoming))]
    pub async fn start(
        config: &QemuConfig,
        paths: VmPaths,
        user: VmmUser,
        agent_port: u32,
    ) -> Result<Self, VmmError> {
        let qemu_program = binaries::QEMU.locate()?;
        let device_program = match config.agent_port {
            AgentPort::Vsock(_) => Some(binaries::VHOST_DEVICE_VSOCK.locate()?),
            AgentPort::Serial(_) => None,
        };
        let programs: Vec<&Path> = std::iter::once(qemu_program.as_path())
            .chain(device_program.as_deref())
            .collect();
        let needs = vmm_needs(config, &paths, &programs);
        let credentials = user.resolve(&needs, config.accel == Accel::Kvm)?;
        if let Some(Credentials { uid, gid }) = credentials {
            state_dir::share_with_group(&paths.dir, gid).map_err(|source| VmmError::StateDir {
                path: paths.dir.clone(),
                source,
            })?;
            if let GuestMemory::File { path, .. } = &config.memory {
                share_memory_file(path, gid).map_err(|source| VmmError::StateDir {
                    path: path.clone(),
                    source,
                })?;
            }
            tracing::debug!(uid, gid, "the VMM runs unprivileged");
        }
        let (ready, mut device) = match &device_program {
            Some(program) => {
                let ready = bind_ready_socket(&paths.ready_socket, credentials)?;
                let device = start_device(program, &paths, credentials).await?;
                (Some(ready), Some(device))
            }
            None => (None, None),
        };

        let mut qemu_cmd = command(&qemu_program);
        qemu_cmd.args(config.args());
        run_as(&mut qemu_cmd, credentials);
        tracing::debug!(command = ?qemu_cmd, "starting qemu");
        let mut qemu = match spawn(&mut qemu_cmd, &qemu_program, &paths.qemu_log) {
            Ok(qemu) => qemu,
            Err(error) => {
                device.iter_mut().for_each(kill_and_reap);
                return Err(error);
            }
        };
        if let Err(error) = record(&paths.dir, &qemu) {
            kill_and_reap(&mut qemu);
            device.iter_mut().for_each(kill_and_reap);
            return Err(error);
        }
        Ok(QemuVm {
            qemu: VmmProcess::Child(qemu),
            device,
            serial: matches!(config.agent_port, AgentPort::Serial(_)),
            paths,
            qemu_exit: None,
            leave: false,
            ready,
            agent_port,
        })
    }

    /// Takes over the running QEMU `qemu` of a sandbox in `paths` whose
    /// agent serves on the virtio-serial port. Fails if that process no
    /// longer runs.
    pub fn adopt(paths: VmPaths, qemu: ProcessId, agent_port: u32) -> Result<Self, VmmError> {
        Ok(QemuVm {
            qemu: VmmProcess::adopt(qemu)?,
            device: None,
            serial: true,
            paths,
            qemu_exit: None,
            leave: false,
            ready: None,
            agent_port,
        })
    }

    /// With `leave`, QEMU runs on: [`kill`](QemuVm::kill) and drop leave
    /// it alone.
    pub fn leave(&mut self, leave: bool) {
        self.leave = leave;
    }

    /// QEMU's identity (pid and start time), while it runs.
    pub fn identity(&self) -> Option<ProcessId> {
        self.qemu.identity()
    }

    /// Whether QEMU is stopped (frozen with SIGSTOP).
    pub fn is_frozen(&self) -> bool {
        self.qemu.is_stopped()
    }

    /// The listener on which the agent announces that it serves (see
    /// [`READY_PORT`](airlock_proto::READY_PORT)); `None` once taken.
    pub fn take_ready_listener(&mut self) -> Option<UnixListener> {
        self.ready.take()
    }

    /// Fails if the vsock device has exited: the guest is then out of reach.
    pub fn check_device(&mut self) -> Result<(), VmmError> {
        let Some(device) = &mut self.device else {
            return Ok(());
        };
        match device.try_wait().map_err(VmmError::Wait)? {
            None => Ok(()),
            Some(status) => Err(VmmError::DeviceExited {
                status: status.to_string(),
                log: tail(&self.paths.device_log, 2048),
            }),
        }
    }

    /// The vsock device's state for error messages: running or its exit
    /// status, and the end of its log.
    pub fn device_diagnostics(&mut self, max_bytes: usize) -> String {
        let Some(device) = &mut self.device else {
            return format!(
                "virtio-serial port (QEMU's socket {})",
                self.paths.agent_socket.display()
            );
        };
        let state = match device.try_wait() {
            Ok(None) => format!(
                "running (pid {}, threads: {})",
                device.id(),
                thread_names(device.id()).join(", ")
            ),
            Ok(Some(status)) => format!("exited ({status})"),
            Err(error) => format!("unknown ({error})"),
        };
        let log = tail(&self.paths.device_log, max_bytes);
        if log.trim().is_empty() {
            format!("{state}, empty log")
        } else {
            format!("{state}, log tail:\n{}", log.trim_end())
        }
    }

    /// QEMU's process id.
    pub fn qemu_pid(&self) -> u32 {
        self.qemu.id()
    }

    /// How the host reaches the agent.
    pub fn transport(&self) -> AgentTransport {
        if self.serial {
            return AgentTransport::Serial(self.paths.agent_socket.clone());
        }
        AgentTransport::HybridVsock {
            uds: self.paths.vsock_uds.clone(),
            port: self.agent_port,
        }
    }

    /// Whether the agent serves on the virtio-serial port.
    pub fn is_serial(&self) -> bool {
        self.serial
    }

    /// CPU time (user + system) of QEMU's vCPU threads (named `CPU N/TCG`
    /// or `CPU N/KVM`), or `None` once QEMU is gone.
    pub fn vcpu_time(&self) -> Option<Duration> {
        cpu_time::threads_time(self.qemu_pid(), |name| name.starts_with("CPU "))
    }

    pub fn qmp_socket(&self) -> &Path {
        &self.paths.qmp_socket
    }

    /// How QEMU ended, if it has, without blocking.
    pub fn try_exit(&mut self) -> Result<Option<Exited>, VmmError> {
        if self.qemu_exit.is_none() {
            self.qemu_exit = self.qemu.try_exit()?;
        }
        Ok(self.qemu_exit)
    }

    /// Keeps the guest console's log within `budget` bytes of disk (see
    /// `log_file::bound`).
    pub fn bound_console_log(&self, budget: u64) {
        match log_file::bound(&self.paths.console_log, budget) {
            Ok(Some(before)) => tracing::warn!(
                before,
                budget,
                "the guest floods its console; freed all but the newest part of the log"
            ),
            Ok(None) => {}
            Err(error) => tracing::debug!(%error, "cannot bound the console log"),
        }
    }

    /// Freezes (SIGSTOP) or thaws (SIGCONT) QEMU's whole process: the
    /// vCPUs stop where they are and the devices with them, without the
    /// vring stop/start a QMP `stop` puts the vhost-user vsock device
    /// through (which vhost-device-vsock 0.3 does not always survive).
    pub fn freeze(&mut self, frozen: bool) -> Result<(), VmmError> {
        use nix::sys::signal::Signal;
        if self.try_exit()?.is_some() {
            return Err(VmmError::Exited);
        }
        let signal = if frozen {
            Signal::SIGSTOP
        } else {
            Signal::SIGCONT
        };
        // Not reaped (try_exit said so), so the process is still QEMU.
        self.qemu.signal(signal)
    }

    /// The last `max_bytes` of the guest console plus QEMU's own stderr,
    /// for error messages.
    pub fn diagnostics(&self, max_bytes: usize) -> String {
        let mut text = tail(&self.paths.console_log, max_bytes);
        let qemu = tail(&self.paths.qemu_log, max_bytes / 4);
        if !qemu.trim().is_empty() {
            text.push_str("\n[qemu] ");
            text.push_str(qemu.trim());
        }
        text
    }

    /// Kills both processes and reaps them (unless told to leave them).
    /// Idempotent.
    pub fn kill(&mut self) {
        if self.leave {
            return;
        }
        if self.qemu_exit.is_none() {
            self.qemu.kill();
            self.qemu_exit = self.qemu.try_exit().ok().flatten();
        }
        self.device.iter_mut().for_each(kill_and_reap);
    }
}

impl Drop for QemuVm {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What the VMM user must be able to do for QEMU and the device to run.
fn vmm_needs(config: &QemuConfig, paths: &VmPaths, programs: &[&Path]) -> Vec<(PathBuf, Access)> {
    let mut needs: Vec<(PathBuf, Access)> = programs
        .iter()
        .map(|program| (program.to_path_buf(), Access::Execute))
        .collect();
    needs.push((config.kernel.clone(), Access::Read));
    needs.push((config.initramfs.clone(), Access::Read));
    for disk in &config.disks {
        let access = if disk.read_only {
            Access::Read
        } else {
            Access::ReadWrite
        };
        needs.push((disk.path.clone(), access));
    }
    // A template's memory file is shared with the VMM's group once the
    // user is known (`share_memory_file`); its directory must be reachable.
    if let GuestMemory::File { path, .. } = &config.memory {
        if let Some(parent) = path.parent() {
            needs.push((parent.to_owned(), Access::Reach));
        }
    }
    for port in &config.serial_ports {
        if let Some(parent) = port.socket.parent() {
            needs.push((parent.to_owned(), Access::CreateIn));
        }
    }
    // The state directory itself is shared with the VMM's group.
    if let Some(base) = paths.dir.parent() {
        needs.push((base.to_owned(), Access::Reach));
    }
    needs
}

/// The names of a process's threads: vhost-device-vsock moves its queues
/// in a thread named `vring_worker`, whose absence means a wedged device.
fn thread_names(pid: u32) -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut names: Vec<String> = tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim_end().to_owned())
        .collect();
    names.sort();
    names
}

/// Binds the announcement socket where the device, running as the VMM
/// user, can connect to it.
fn bind_ready_socket(
    path: &Path,
    credentials: Option<Credentials>,
) -> Result<UnixListener, VmmError> {
    use std::os::unix::fs::PermissionsExt;
    let fail = |source| VmmError::ReadySocket {
        path: path.to_owned(),
        source,
    };
    let listener = UnixListener::bind(path).map_err(fail)?;
    if let Some(Credentials { gid, .. }) = credentials {
        std::os::unix::fs::chown(path, None, Some(gid)).map_err(fail)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660)).map_err(fail)?;
    }
    Ok(listener)
}

/// Lets the VMM's group read and write a memory file. A clone maps it
/// privately, so no write reaches the file; QEMU 7.2 still opens it
/// read-write.
fn share_memory_file(path: &Path, gid: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::os::unix::fs::chown(path, None, Some(gid))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
}

/// Starts vhost-device-vsock and waits for its vhost-user socket.
async fn start_device(
    program: &Path,
    paths: &VmPaths,
    credentials: Option<Credentials>,
) -> Result<Child, VmmError> {
    let mut device_cmd = command(program);
    device_cmd.arg("--vm").arg(format!(
        "guest-cid={GUEST_CID},socket={},uds-path={}",
        paths.vhost_user_socket.display(),
        paths.vsock_uds.display()
    ));
    run_as(&mut device_cmd, credentials);
    let mut device = spawn(&mut device_cmd, program, &paths.device_log)?;
    if let Err(error) = record(&paths.dir, &device) {
        kill_and_reap(&mut device);
        return Err(error);
    }
    if let Err(error) =
        wait_for_socket(&paths.vhost_user_socket, &mut device, &paths.device_log).await
    {
        kill_and_reap(&mut device);
        return Err(error);
    }
    Ok(device)
}

fn run_as(cmd: &mut Command, credentials: Option<Credentials>) {
    if let Some(Credentials { uid, gid }) = credentials {
        // As root, std also drops the supplementary groups.
        cmd.uid(uid).gid(gid);
    }
}

async fn wait_for_socket(socket: &Path, device: &mut Child, log: &Path) -> Result<(), VmmError> {
    let deadline = Instant::now() + DEVICE_READY_TIMEOUT;
    while !socket.exists() {
        let exited = device.try_wait().map_err(VmmError::Wait)?.is_some();
        if exited || Instant::now() >= deadline {
            return Err(VmmError::DeviceNotReady {
                socket: socket.to_owned(),
                timeout: DEVICE_READY_TIMEOUT,
                log: tail(log, 2048),
            });
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}
