//! [`Unavailable`]: why a call was not let through to the agent.

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
