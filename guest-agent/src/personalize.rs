//! `System.Personalize`: making a guest its own machine before any program
//! runs in it. A clone of a template starts as a copy of the template: the
//! same kernel random state, the clock where the template stopped, the
//! template's hostname and no sandbox id.
//!
//! [`Personalization::from_request`] checks a request (the limits below);
//! [`do_personalize`] then mixes the entropy into the kernel's pool and
//! reseeds its generator ([`crate::entropy`]), sets the wall clock
//! ([`crate::clock`]), the hostname, and the [`SandboxId`] that
//! `Health.Check` reports from then on. Whether the agent may do this at all
//! (only as PID 1) is the service's decision, not this module's.

pub mod error;
pub mod limits;

use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use airlock_proto::v1::PersonalizeRequest;
use bytes::Bytes;

use crate::clock::{self, Realtime};
use crate::cmdline;
use crate::entropy;

pub use self::error::PersonalizeError;
pub use self::limits::{ENTROPY_MAX, ENTROPY_MIN, SANDBOX_ID_MAX};

/// A checked `PersonalizeRequest`. Its `Debug` leaves the entropy out.
pub struct Personalization {
    entropy: Bytes,
    time: Realtime,
    hostname: String,
    sandbox_id: String,
}

impl fmt::Debug for Personalization {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Personalization")
            .field("entropy_bytes", &self.entropy.len())
            .field("time", &self.time)
            .field("hostname", &self.hostname)
            .field("sandbox_id", &self.sandbox_id)
            .finish()
    }
}

impl Personalization {
    /// Checks `request` against the limits.
    pub fn from_request(request: PersonalizeRequest) -> Result<Self, PersonalizeError> {
        let PersonalizeRequest {
            entropy,
            unix_nanos,
            hostname,
            sandbox_id,
        } = request;
        if !(ENTROPY_MIN..=ENTROPY_MAX).contains(&entropy.len()) {
            return Err(PersonalizeError::EntropySize(entropy.len()));
        }
        if !cmdline::is_valid_hostname(&hostname) {
            return Err(PersonalizeError::BadHostname(hostname));
        }
        if sandbox_id.len() > SANDBOX_ID_MAX {
            return Err(PersonalizeError::SandboxIdTooLong(sandbox_id.len()));
        }
        Ok(Self {
            entropy,
            time: Realtime::from_unix_nanos(unix_nanos)?,
            hostname,
            sandbox_id,
        })
    }
}

/// What [`do_personalize`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Personalized {
    /// Whether the kernel's generator was reseeded.
    pub reseeded: bool,
}

/// Mixes in the entropy and reseeds, sets the clock and the hostname, and
/// records the sandbox id in `sandbox_id`, in that order: the first step
/// that fails ends it. Needs root (PID 1 in a guest).
pub fn do_personalize(
    personalization: Personalization,
    sandbox_id: &SandboxId,
) -> Result<Personalized, PersonalizeError> {
    let Personalization {
        entropy,
        time,
        hostname,
        sandbox_id: id,
    } = personalization;
    let reseeded = entropy::mix_and_reseed(Path::new(entropy::URANDOM), &entropy)?;
    clock::set_realtime(time)?;
    nix::unistd::sethostname(&hostname).map_err(|source| PersonalizeError::Hostname {
        hostname: hostname.clone(),
        source,
    })?;
    tracing::info!(hostname, sandbox_id = id, reseeded, "guest personalized");
    sandbox_id.set(id);
    Ok(Personalized { reseeded })
}

/// The sandbox id given by `Personalize`, shared with the Health service;
/// empty until then. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct SandboxId(Arc<Mutex<String>>);

impl SandboxId {
    /// Records `id`.
    pub fn set(&self, id: String) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = id;
    }

    /// The id recorded last, or empty.
    pub fn get(&self) -> String {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::clock::ClockError;

    fn request() -> PersonalizeRequest {
        PersonalizeRequest {
            entropy: vec![0x5a; 32].into(),
            unix_nanos: 1_700_000_000_000_000_000,
            hostname: "sandbox-1".to_owned(),
            sandbox_id: "sb-1".to_owned(),
        }
    }

    #[test]
    fn a_good_request_is_accepted_at_the_limits() {
        Personalization::from_request(request()).unwrap();
        Personalization::from_request(PersonalizeRequest {
            entropy: vec![1; ENTROPY_MAX].into(),
            hostname: "h".repeat(64),
            sandbox_id: "i".repeat(SANDBOX_ID_MAX),
            ..request()
        })
        .unwrap();
        Personalization::from_request(PersonalizeRequest {
            sandbox_id: String::new(),
            ..request()
        })
        .unwrap();
    }

    #[test]
    fn entropy_must_be_32_to_512_bytes() {
        for len in [0, 31, 513, 4096] {
            let err = Personalization::from_request(PersonalizeRequest {
                entropy: vec![1; len].into(),
                ..request()
            })
            .unwrap_err();
            assert!(
                matches!(err, PersonalizeError::EntropySize(n) if n == len),
                "{len}"
            );
        }
    }

    #[test]
    fn hostname_must_be_1_to_64_bytes_without_a_slash() {
        for hostname in [String::new(), "a/b".to_owned(), "h".repeat(65)] {
            let err = Personalization::from_request(PersonalizeRequest {
                hostname: hostname.clone(),
                ..request()
            })
            .unwrap_err();
            assert!(
                matches!(err, PersonalizeError::BadHostname(_)),
                "{hostname:?}"
            );
        }
    }

    #[test]
    fn sandbox_id_is_at_most_128_bytes() {
        let err = Personalization::from_request(PersonalizeRequest {
            sandbox_id: "i".repeat(SANDBOX_ID_MAX + 1),
            ..request()
        })
        .unwrap_err();
        assert!(matches!(err, PersonalizeError::SandboxIdTooLong(129)));
    }

    #[test]
    fn the_clock_time_is_checked_as_set_clock_does() {
        for unix_nanos in [0, u64::MAX] {
            let err = Personalization::from_request(PersonalizeRequest {
                unix_nanos,
                ..request()
            })
            .unwrap_err();
            assert!(matches!(
                err,
                PersonalizeError::Clock(ClockError::OutOfRange(_))
            ));
        }
    }

    #[test]
    fn debug_leaves_the_entropy_out() {
        let text = format!("{:?}", Personalization::from_request(request()).unwrap());
        assert!(text.contains("entropy_bytes: 32"), "{text}");
        assert!(!text.contains("90"), "{text}");
    }

    #[test]
    fn the_sandbox_id_is_shared_between_clones() {
        let id = SandboxId::default();
        let health_side = id.clone();
        assert_eq!(health_side.get(), "");
        id.set("sb-7".to_owned());
        assert_eq!(health_side.get(), "sb-7");
    }
}
