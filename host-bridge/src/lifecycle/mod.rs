//! A running sandbox's life after boot: its state (running, paused,
//! ended and why), the policies that end or park it, and what it used.
//!
//! - `vm`: [`VmShared`](vm::VmShared), the one owner of the VMM processes
//!   once the agent answered; pause, resume (with the clock pushed to the
//!   guest) and kill go through it, and every handle on the sandbox holds
//!   it.
//! - `watchdog`: a task per sandbox that notices the VM's own end promptly
//!   and enforces the lifetime ceiling and the idle timeout, and one that
//!   ends a VM whose agent stops answering.
//! - `channel`: the gRPC channel every call goes through; it counts calls in
//!   flight (what "idle" means), and holds calls back while the VM is paused.
//! - `meter`: wall, running and guest CPU time.
//! - `recorded`: the policies to and from an adoption record's form.
//! - `error`: `Unavailable`, why a call was not let through (an ended,
//!   paused or saved sandbox), which `Error::agent` turns back into an
//!   [`Error`](crate::Error); `SnapshotProblem`; `ClockError`.

pub(crate) mod channel;
mod error;
mod meter;
mod recorded;
pub(crate) mod vm;
pub(crate) mod watchdog;

use std::fmt;
use std::time::Duration;

pub(crate) use error::{ClockError, SnapshotProblem, Unavailable};
pub use meter::{SandboxUsage, Traffic};

/// Where a sandbox is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SandboxState {
    /// The VM runs and the agent takes calls.
    Running,
    /// The VM is stopped (no guest CPU); see [`PausedCalls`] for what a
    /// call does meanwhile.
    Paused,
    /// Saved to disk ([`Sandbox::pause_to_disk`](crate::Sandbox::pause_to_disk)):
    /// memory, programs and files are in a snapshot file and the VM process
    /// is gone. A resume (or a call, as [`PausedCalls`] says) restores it.
    OnDisk,
    /// The VM is gone; calls fail with [`Error::SandboxEnded`](crate::Error::SandboxEnded).
    Ended(EndReason),
}

impl SandboxState {
    /// Paused in memory or on disk: the guest does not run until resumed.
    pub fn is_paused(&self) -> bool {
        matches!(self, SandboxState::Paused | SandboxState::OnDisk)
    }
}

/// Why a sandbox ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EndReason {
    /// It reached its maximum lifetime ([`SandboxBuilder::max_lifetime`](crate::SandboxBuilder::max_lifetime)) and was killed.
    LifetimeExceeded { limit: Duration },
    /// It had no call in flight for the idle timeout, and the policy was
    /// [`IdlePolicy::Stop`].
    Idle { after: Duration },
    /// The VM exited by itself: the guest powered off or rebooted (a
    /// privileged program can), or its kernel died.
    VmExited {
        /// QEMU's exit status.
        status: String,
        /// The end of the guest console, which usually says why.
        console_tail: String,
    },
    /// Its agent gave no answer for this long while the VM was running (a
    /// hung guest kernel, or a VM frozen from outside), so it was killed.
    Unresponsive { after: Duration },
    /// Its owner stopped it (drop, `shutdown`, `kill`, or the manager).
    Stopped,
    /// Its owner let it go without stopping it
    /// ([`Sandbox::detach`](crate::Sandbox::detach)): its VM runs on, for
    /// another process (or this one) to adopt.
    Detached,
}

impl fmt::Display for EndReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EndReason::LifetimeExceeded { limit } => {
                write!(f, "killed at its maximum lifetime of {limit:?}")
            }
            EndReason::Idle { after } => write!(f, "stopped after {after:?} without a call"),
            EndReason::VmExited {
                status,
                console_tail,
            } => {
                write!(
                    f,
                    "the VM exited ({status}): a privileged program may have powered off or \
                     rebooted the guest, or the guest kernel died"
                )?;
                let tail = console_tail.trim();
                if !tail.is_empty() {
                    write!(f, "; console tail:\n{tail}")?;
                }
                Ok(())
            }
            EndReason::Unresponsive { after } => write!(
                f,
                "killed after its agent gave no answer for {after:?} (a hung guest, or a VM \
                 frozen from outside)"
            ),
            EndReason::Stopped => f.write_str("stopped by its owner"),
            EndReason::Detached => {
                f.write_str("detached by its owner; its VM runs on, for a new owner to adopt")
            }
        }
    }
}

/// What happens to a sandbox that has had no call in flight for the idle
/// timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdlePolicy {
    /// Pause the VM; the next call resumes it (with the default
    /// [`PausedCalls::Resume`]).
    Pause,
    /// Save the VM to disk, which frees its memory; the next call restores
    /// it (see [`Sandbox::pause_to_disk`](crate::Sandbox::pause_to_disk)).
    PauseToDisk,
    /// Kill the VM; the sandbox ends with [`EndReason::Idle`].
    Stop,
}

/// What a call made while the sandbox is paused does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PausedCalls {
    /// Resume the VM (pushing the current time to the guest), then run.
    #[default]
    Resume,
    /// Wait until someone calls [`Sandbox::resume`](crate::Sandbox::resume).
    Wait,
    /// Fail at once with [`Error::Paused`](crate::Error::Paused).
    Fail,
}
