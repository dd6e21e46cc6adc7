//! The manager's errors: [`PoolError`] (a pool call) and [`WarmUpError`]
//! (a pool member's warm-up).
//!
//! A warm-up's cause is the library's own [`Error`](crate::Error), which
//! wraps [`PoolError`]; it is held as a boxed trait object, so that this
//! file imports nothing of the crate and the crate's error imports it
//! (`downcast_ref::<airlock::Error>()` recovers it).

use std::time::Duration;

use crate::error::Reason;

/// A cause that is the library's [`Error`](crate::Error).
type BoxedError = Box<dyn std::error::Error + Send + Sync>;

/// Why a pool call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PoolError {
    /// The pool would not fit in the manager.
    #[error("a pool of {size} does not fit in a manager of at most {max} sandboxes")]
    TooLarge { size: usize, max: usize },
    /// [`Sandboxes::start_pooled`](crate::Sandboxes::start_pooled) on a
    /// manager without a pool.
    #[error("this manager has no pool; set one with Sandboxes::set_pool")]
    NoPool,
    /// The pool refills from tokio tasks.
    #[error("a pool refills in the background; set it from within a tokio runtime")]
    NoRuntime,
    /// A member's warm-up failed; the member was discarded.
    #[error(transparent)]
    WarmUp(#[from] WarmUpError),
}

/// Why a pool member's warm-up failed; the member is discarded and the
/// fill reported as failed ([`PoolStatus::last_error`](crate::PoolStatus)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WarmUpError {
    /// A program could not be started or followed.
    #[error("warm-up `{command}`")]
    Exec {
        command: String,
        /// The library's [`Error`](crate::Error).
        #[source]
        source: BoxedError,
    },
    /// A program did not exit 0.
    #[error("warm-up `{command}` ended with {status}{stderr}; a warm-up program must succeed")]
    Failed {
        command: String,
        status: String,
        stderr: String,
    },
    /// A program ran past its limit and was killed.
    #[error("warm-up `{command}` ran past {limit:?} and was killed")]
    TimedOut { command: String, limit: Duration },
    /// The warm-up created, changed or deleted files a user would see.
    #[error(
        "the warm-up changed {paths} (checked: {roots}); a warm-up may write only under its \
         HOME and TMPDIR, which are removed after it"
    )]
    LeftChanges { roots: String, paths: String },
    /// Preparing the warm-up or cleaning up after it failed.
    #[error("preparing or checking the warm-up")]
    Setup(#[source] BoxedError),
}

impl PoolError {
    /// What this error is about (see [`Reason`]).
    pub fn reason(&self) -> Reason {
        match self {
            PoolError::TooLarge { .. } => Reason::Invalid,
            PoolError::NoPool => Reason::Unsupported,
            PoolError::NoRuntime => Reason::Internal,
            PoolError::WarmUp(error) => error.reason(),
        }
    }
}

impl WarmUpError {
    /// What this error is about (see [`Reason`]): a member the pool could
    /// not prepare, whatever the cause.
    pub fn reason(&self) -> Reason {
        match self {
            WarmUpError::Exec { .. }
            | WarmUpError::Failed { .. }
            | WarmUpError::TimedOut { .. }
            | WarmUpError::LeftChanges { .. }
            | WarmUpError::Setup(_) => Reason::Internal,
        }
    }
}
