//! Spawning, recording and reaping the processes a backend runs.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

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
        // Its own process group: a Ctrl-C at the user's terminal reaches the
        // embedding program, which then tears the VM down in order.
        .process_group(0)
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
