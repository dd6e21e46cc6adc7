//! The bounded label values: every value a label can take is listed here,
//! so every series exists from the start and none is ever made from what a
//! caller sent.

use airlock_api::reason::REASON_KEY;
use airlock_api::v1::ErrorReason;
use tonic::Status;

/// Where a created sandbox came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A member of the warm pool, handed out.
    Pool,
    /// A clone of its configuration's template.
    Clone,
    /// A clone of a named snapshot.
    Snapshot,
    /// Started from a named template.
    Template,
    /// Booted from the kernel.
    Cold,
    /// A fork of a running sandbox.
    Fork,
    /// A sandbox saved to disk, restored for a call.
    Restored,
}

impl Origin {
    /// Every origin, in the order of their discriminants.
    pub const ALL: [Origin; 7] = [
        Origin::Pool,
        Origin::Clone,
        Origin::Snapshot,
        Origin::Template,
        Origin::Cold,
        Origin::Fork,
        Origin::Restored,
    ];

    /// Its label value.
    pub fn name(self) -> &'static str {
        match self {
            Origin::Pool => "pool",
            Origin::Clone => "clone",
            Origin::Snapshot => "snapshot",
            Origin::Template => "template",
            Origin::Cold => "cold",
            Origin::Fork => "fork",
            Origin::Restored => "restored",
        }
    }

    /// Where a create of `machine` means to take its sandbox from, before
    /// it starts (the warm pool's machine is `pool`).
    pub fn planned(
        machine: &crate::machine::Machine,
        pool: Option<&crate::machine::Machine>,
    ) -> Origin {
        if pool.is_some_and(|pool| machine.pooled_from(pool)) {
            Origin::Pool
        } else if machine.snapshot.is_some() {
            Origin::Snapshot
        } else if machine.template.is_some() {
            Origin::Template
        } else if machine.cold {
            Origin::Cold
        } else {
            Origin::Clone
        }
    }

    /// Where a started sandbox came from, as the library says (`pooled`:
    /// handed out by the pool; `template`: the create named a template).
    pub fn of(started: &airlock::Origin, pooled: bool, template: bool) -> Origin {
        match started {
            _ if pooled => Origin::Pool,
            airlock::Origin::Snapshot { .. } if template => Origin::Template,
            airlock::Origin::Snapshot { .. } => Origin::Snapshot,
            airlock::Origin::Clone { .. } if template => Origin::Template,
            airlock::Origin::Clone { .. } => Origin::Clone,
            airlock::Origin::Fork { .. } => Origin::Fork,
            airlock::Origin::Restored { .. } => Origin::Restored,
            _ => Origin::Cold,
        }
    }
}

/// Which front refused a key or token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Front {
    /// The API's TCP listener (gRPC and gRPC-Web).
    Api,
    /// The E2B-compatible front.
    E2b,
}

impl Front {
    pub const ALL: [Front; 2] = [Front::Api, Front::E2b];

    pub fn name(self) -> &'static str {
        match self {
            Front::Api => "api",
            Front::E2b => "e2b",
        }
    }
}

/// Why a key or token was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthCause {
    /// None was sent.
    Missing,
    /// The header could not be read.
    Malformed,
    /// An unknown or removed key, or another sandbox's access token.
    Unknown,
    /// The address had failed too often and was refused without a look.
    Throttled,
}

impl AuthCause {
    pub const ALL: [AuthCause; 4] = [
        AuthCause::Missing,
        AuthCause::Malformed,
        AuthCause::Unknown,
        AuthCause::Throttled,
    ];

    pub fn name(self) -> &'static str {
        match self {
            AuthCause::Missing => "missing",
            AuthCause::Malformed => "malformed",
            AuthCause::Unknown => "unknown",
            AuthCause::Throttled => "throttled",
        }
    }
}

/// The HTTP status classes, 1xx to 5xx.
pub const STATUS_CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// The API's error reasons by their number (`UNSPECIFIED` first: a status
/// that names none, as tonic's own do), with their names.
pub const REASONS: [(ErrorReason, &str); 22] = {
    use ErrorReason as R;
    [
        (R::Unspecified, "UNSPECIFIED"),
        (R::Unauthenticated, "UNAUTHENTICATED"),
        (R::OwnerOnly, "OWNER_ONLY"),
        (R::InvalidArgument, "INVALID_ARGUMENT"),
        (R::SandboxNotFound, "SANDBOX_NOT_FOUND"),
        (R::NotFound, "NOT_FOUND"),
        (R::GuestNotFound, "GUEST_NOT_FOUND"),
        (R::AlreadyExists, "ALREADY_EXISTS"),
        (R::SandboxLimit, "SANDBOX_LIMIT"),
        (R::QuotaExceeded, "QUOTA_EXCEEDED"),
        (R::RateLimited, "RATE_LIMITED"),
        (R::SandboxEnded, "SANDBOX_ENDED"),
        (R::SandboxPaused, "SANDBOX_PAUSED"),
        (R::NoNetwork, "NO_NETWORK"),
        (R::Unsupported, "UNSUPPORTED"),
        (R::Interrupted, "INTERRUPTED"),
        (R::ShuttingDown, "SHUTTING_DOWN"),
        (R::Timeout, "TIMEOUT"),
        (R::Internal, "INTERNAL"),
        (R::GuestRefused, "GUEST_REFUSED"),
        (R::GuestExhausted, "GUEST_EXHAUSTED"),
        (R::PortClosed, "PORT_CLOSED"),
    ]
};

/// The place in [`REASONS`] of a reason named `name` (a status's
/// `airlock-error`); 0 for none, or one this server does not know.
pub fn reason_index_of(name: Option<&str>) -> usize {
    name.and_then(ErrorReason::from_str_name)
        .map(|reason| reason as usize)
        .filter(|&index| index < REASONS.len())
        .unwrap_or(0)
}

/// The place in [`REASONS`] of the reason `status` names.
pub fn reason_index(status: &Status) -> usize {
    reason_index_of(
        status
            .metadata()
            .get(REASON_KEY)
            .and_then(|value| value.to_str().ok()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_of_the_api_has_its_place_and_its_name() {
        for (index, (reason, name)) in REASONS.iter().enumerate() {
            assert_eq!(*reason as usize, index, "{name}");
            if *reason != ErrorReason::Unspecified {
                assert_eq!(reason.as_str_name(), *name);
            }
        }
        // A reason the API adds must be added here.
        assert!(ErrorReason::try_from(REASONS.len() as i32).is_err());
        assert_eq!(reason_index_of(Some("QUOTA_EXCEEDED")), 9);
        assert_eq!(reason_index_of(Some("NO_SUCH_THING")), 0);
        assert_eq!(reason_index_of(None), 0);
    }

    #[test]
    fn origins_follow_their_discriminants() {
        for (index, origin) in Origin::ALL.iter().enumerate() {
            assert_eq!(*origin as usize, index);
        }
        let clone = airlock::Origin::Clone {
            key: "k".into(),
            built: false,
        };
        assert_eq!(Origin::of(&clone, false, false), Origin::Clone);
        assert_eq!(Origin::of(&clone, false, true), Origin::Template);
        assert_eq!(Origin::of(&clone, true, false), Origin::Pool);
        assert_eq!(
            Origin::of(&airlock::Origin::Cold, false, false),
            Origin::Cold
        );
    }
}
