//! What `System.Personalize` can fail with: a request that cannot be
//! honoured, or a step that failed.

use crate::clock::ClockError;
use crate::entropy::EntropyError;

use super::limits::{ENTROPY_MAX, ENTROPY_MIN, SANDBOX_ID_MAX};

/// A request that cannot be honoured, or a step that failed.
#[derive(Debug, thiserror::Error)]
pub enum PersonalizeError {
    /// Too little or too much entropy.
    #[error("entropy must be {ENTROPY_MIN} to {ENTROPY_MAX} bytes, not {0}")]
    EntropySize(usize),
    /// The hostname is empty, too long or contains a `/`.
    #[error("hostname {0:?} is not valid (1-64 bytes, no '/')")]
    BadHostname(String),
    /// The sandbox id is too long.
    #[error("sandbox id is {0} bytes; at most {SANDBOX_ID_MAX} are allowed")]
    SandboxIdTooLong(usize),
    /// The clock time is out of range, or the clock could not be set.
    #[error(transparent)]
    Clock(#[from] ClockError),
    /// The entropy could not be mixed in.
    #[error(transparent)]
    Entropy(#[from] EntropyError),
    /// The hostname could not be set.
    #[error("cannot set the hostname to {hostname:?}")]
    Hostname {
        /// The hostname.
        hostname: String,
        /// Why setting it failed.
        #[source]
        source: nix::Error,
    },
}
