//! What a `System` call can fail with.

use crate::clock::ClockError;
use crate::personalize::error::PersonalizeError;
use crate::trust::error::TrustError;

/// A System call that cannot be honoured.
#[derive(Debug, thiserror::Error)]
pub enum SystemError {
    /// The call changes the machine, and the agent is not PID 1.
    #[error("the agent {0} only as PID 1 in a guest")]
    NotPid1(&'static str),
    /// `SetClock` failed.
    #[error(transparent)]
    Clock(#[from] ClockError),
    /// `Personalize` failed.
    #[error(transparent)]
    Personalize(#[from] PersonalizeError),
    /// `TrustRoots` failed.
    #[error(transparent)]
    Trust(#[from] TrustError),
}
