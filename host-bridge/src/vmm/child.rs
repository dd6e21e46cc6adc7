//! Spawning, recording and reaping the processes a backend runs.
//!
//! Each VMM process starts in a session of its own (through util-linux's
//! `setsid`, which execs the program in the same process; the library has
//! no unsafe code for a `pre_exec`). A process group of its own is not
//! enough once the sandbox must outlive its owner: when the owner dies,
//! the kernel sends SIGHUP and SIGCONT to a process group of the owner's
//! session that it leaves orphaned with a stopped member, so a paused
//! (SIGSTOPped) QEMU would end ("terminating on signal 1"). A group in
//! another session is never orphaned that way. Without `setsid` on the
//! host the process gets a process group of its own, as before, and a
//! paused sandbox ends with its owner.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use super::VmmError;
use crate::state_dir::{self, owner::ProcessId};

/// Adds a just-started VMM process to the owner record.
pub(super) fn record(dir: &Path, child: &Child) -> Result<(), VmmError> {
    let fail = |source| VmmError::StateDir {
        path: dir.to_owned(),
        source,
    };
    // A process that already exited leaves nothing to collect; the caller
    // reports its exit.
    let Some(process) = ProcessId::of(child.id()) else {
        return Ok(());
    };
    state_dir::record_vmm_process(dir, process).map_err(fail)
}

/// Sends `signal` to process `pid`.
pub(super) fn signal(pid: u32, signal: nix::sys::signal::Signal) -> Result<(), VmmError> {
    let pid = i32::try_from(pid).map_err(|_| VmmError::Exited)?;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal).map_err(VmmError::Signal)
}

/// The command that starts `program` in a session of its own (see the
/// module docs); add its arguments and credentials, then [`spawn`] it.
pub(super) fn command(program: &Path) -> Command {
    match setsid() {
        Some(setsid) => {
            let mut cmd = Command::new(setsid);
            cmd.arg(program);
            cmd
        }
        None => {
            let mut cmd = Command::new(program);
            // Its own process group: a Ctrl-C at the user's terminal
            // reaches the embedding program, which then tears the VM down
            // in order.
            cmd.process_group(0);
            cmd
        }
    }
}

/// `setsid`, looked up once.
fn setsid() -> Option<&'static PathBuf> {
    static SETSID: OnceLock<Option<PathBuf>> = OnceLock::new();
    SETSID
        .get_or_init(|| match super::binaries::SETSID.locate() {
            Ok(path) => Some(path),
            Err(error) => {
                tracing::warn!(
                    %error,
                    "VMM processes get no session of their own: a paused sandbox's VM ends \
                     with its owner"
                );
                None
            }
        })
        .as_ref()
}

/// Starts `cmd` (made by [`command`] for `program`) with its output in
/// `log`.
pub(super) fn spawn(cmd: &mut Command, program: &Path, log: &Path) -> Result<Child, VmmError> {
    let log_file = |path: &Path| {
        File::create(path).map_err(|source| VmmError::LogFile {
            path: path.to_owned(),
            source,
        })
    };
    let stdout = log_file(log)?;
    let stderr = stdout.try_clone().map_err(|source| VmmError::LogFile {
        path: log.to_owned(),
        source,
    })?;
    cmd.stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .map_err(|source| VmmError::Spawn {
            program: program.to_owned(),
            source,
        })
}

pub(super) fn kill_and_reap(child: &mut Child) {
    if let Ok(None) = child.try_wait() {
        if let Err(error) = child.kill() {
            tracing::warn!(%error, pid = child.id(), "cannot kill VMM process");
        }
        // SIGKILL cannot be caught: the wait is short.
        if let Err(error) = child.wait() {
            tracing::warn!(%error, pid = child.id(), "cannot reap VMM process");
        }
    }
}
