//! The lifetime section of a create: `timeout_secs` (unset: the server's
//! default; 0: never, the owner's alone) and `idle` (a timeout without
//! calls, and what then happens).

use std::time::Duration;

use tonic::Status;

use airlock::IdlePolicy;
use airlock_api::limits;
use airlock_api::reason::invalid;
use airlock_api::v1 as api;

use crate::principal::Principal;
use crate::validate;

/// How long a sandbox may live, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetime {
    /// `None`: never killed for age.
    pub timeout: Option<Duration>,
    pub idle: Option<(Duration, IdlePolicy)>,
}

/// The lifetime a create asks for; `default_timeout` when it names none.
pub fn lifetime(
    timeout_secs: Option<u64>,
    idle: Option<&api::Idle>,
    principal: &Principal,
    default_timeout: Duration,
) -> Result<Lifetime, Status> {
    Ok(Lifetime {
        timeout: timeout(timeout_secs, principal, default_timeout)?,
        idle: idle.map(idle_timeout).transpose()?,
    })
}

fn timeout(
    secs: Option<u64>,
    principal: &Principal,
    default_timeout: Duration,
) -> Result<Option<Duration>, Status> {
    match secs {
        None => Ok(Some(default_timeout)),
        Some(0) => {
            principal.require_owner("a sandbox without a timeout (timeout_secs 0)")?;
            Ok(None)
        }
        Some(secs) => Ok(Some(Duration::from_secs(validate::within(
            "timeout_secs",
            secs,
            1,
            limits::MAX_TIMEOUT_SECS,
        )?))),
    }
}

fn idle_timeout(idle: &api::Idle) -> Result<(Duration, IdlePolicy), Status> {
    let after = validate::within(
        "idle.timeout_secs",
        idle.timeout_secs,
        1,
        limits::MAX_IDLE_SECS,
    )?;
    let policy = match idle.policy() {
        api::IdlePolicy::Pause => IdlePolicy::Pause,
        api::IdlePolicy::Stop => IdlePolicy::Stop,
        api::IdlePolicy::PauseToDisk => IdlePolicy::PauseToDisk,
        api::IdlePolicy::Unspecified => {
            return Err(invalid(
                "idle.policy",
                "an idle timeout needs a policy: pause, pause-to-disk or stop",
            ))
        }
    };
    Ok((Duration::from_secs(after), policy))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use airlock_api::reason::field_of;

    const DEFAULT: Duration = Duration::from_secs(3600);

    fn key() -> Principal {
        Principal::Key("alice".into())
    }

    #[test]
    fn unset_is_the_default_and_zero_is_never_for_the_owner_only() {
        let plain = lifetime(None, None, &key(), DEFAULT).unwrap();
        assert_eq!(plain.timeout, Some(DEFAULT));
        assert_eq!(plain.idle, None);
        assert_eq!(
            lifetime(Some(0), None, &Principal::Owner, DEFAULT)
                .unwrap()
                .timeout,
            None
        );
        let refused = lifetime(Some(0), None, &key(), DEFAULT).unwrap_err();
        assert_eq!(refused.code(), tonic::Code::PermissionDenied);
        let refused =
            lifetime(Some(limits::MAX_TIMEOUT_SECS + 1), None, &key(), DEFAULT).unwrap_err();
        assert_eq!(field_of(&refused), Some("timeout_secs"));
    }

    #[test]
    fn an_idle_timeout_needs_bounds_and_a_policy() {
        let idle = api::Idle {
            timeout_secs: 30,
            policy: api::IdlePolicy::PauseToDisk.into(),
        };
        let checked = lifetime(None, Some(&idle), &key(), DEFAULT).unwrap();
        assert_eq!(
            checked.idle,
            Some((Duration::from_secs(30), IdlePolicy::PauseToDisk))
        );
        let no_policy = api::Idle {
            timeout_secs: 30,
            ..api::Idle::default()
        };
        let refused = lifetime(None, Some(&no_policy), &key(), DEFAULT).unwrap_err();
        assert_eq!(field_of(&refused), Some("idle.policy"));
        let zero = api::Idle {
            timeout_secs: 0,
            policy: api::IdlePolicy::Stop.into(),
        };
        let refused = lifetime(None, Some(&zero), &key(), DEFAULT).unwrap_err();
        assert_eq!(field_of(&refused), Some("idle.timeout_secs"));
    }
}
