//! The lifecycle's errors: [`Unavailable`], why a call was not let
//! through to the agent, and [`SnapshotProblem`], what went wrong with a
//! snapshot besides QEMU and the files, and [`ClockError`], why the
//! guest's clock was not set.

use std::time::Duration;

use super::EndReason;

/// Why a call was not let through to the agent. Carried as the source of
/// the call's status, and turned back into
/// [`Error::SandboxEnded`](crate::Error::SandboxEnded),
/// [`Error::Paused`](crate::Error::Paused) and the like by `Error::agent`.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum Unavailable {
    #[error("the sandbox has ended: {0}")]
    Ended(EndReason),
    #[error("the sandbox is paused")]
    Paused,
    #[error(
        "the sandbox was saved to disk while the call was open (its VM process ended); \
         the next call restores it"
    )]
    SavedDuringCall,
    #[error(
        "the sandbox was forked while the call was open (the fork's snapshot ended its \
         connection); the sandbox runs on, and the call can be made again"
    )]
    ForkedDuringCall,
    /// The sandbox was on disk or paused, and starting it again for the
    /// call failed (the cause, formatted).
    #[error("resuming the sandbox for the call failed: {0}")]
    ResumeFailed(String),
}

/// What went wrong with a snapshot besides QEMU's migration and the
/// files: the cause of an [`Error::Snapshot`](crate::Error::Snapshot).
#[derive(Debug, thiserror::Error)]
pub(crate) enum SnapshotProblem {
    /// The restored agent refused its first call.
    #[error("the restored agent does not answer")]
    AgentRefused(#[source] tonic::Status),
    /// The restored agent did not answer its first call in time.
    #[error("the restored agent does not answer within {0:?}")]
    NoAnswer(Duration),
    /// The process backend runs no VM to snapshot.
    #[error("the process backend has no VM to snapshot")]
    NoVm,
}

/// Why the guest's clock could not be set after a resume.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClockError {
    /// The agent refused.
    #[error("the agent refused to set the clock")]
    Refused(#[source] tonic::Status),
    /// The agent did not answer in time.
    #[error("no answer within {0:?}")]
    NoAnswer(Duration),
}
