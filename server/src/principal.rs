//! Who a call is made as: the machine's owner (anyone who can open the
//! private Unix socket) or an API key (on TCP). The listener's layer puts
//! the [`Principal`] into each request's extensions; handlers read it with
//! [`Principal::of`].

use std::fmt;
use std::sync::Arc;

use tonic::Status;

use airlock_api::reason;
use airlock_api::v1::ErrorReason;

/// Who a call is made as.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Principal {
    /// The machine's owner: sees and may do everything.
    Owner,
    /// An API key, by name: sees its own sandboxes only.
    Key(Arc<str>),
}

impl Principal {
    /// The principal a listener's layer attached to `request`. A request
    /// without one never passed a listener's layer, which is a bug; it is
    /// refused rather than trusted.
    pub fn of<T>(request: &tonic::Request<T>) -> Result<Principal, Status> {
        request
            .extensions()
            .get::<Principal>()
            .cloned()
            .ok_or_else(|| reason::status(ErrorReason::Unauthenticated, "no principal"))
    }

    /// The key's name, for a key.
    pub fn key(&self) -> Option<&str> {
        match self {
            Principal::Owner => None,
            Principal::Key(name) => Some(name),
        }
    }

    /// Whether this principal may see a sandbox owned by `owner` (`None`:
    /// the owner's own).
    pub fn may_see(&self, owner: Option<&str>) -> bool {
        match self {
            Principal::Owner => true,
            Principal::Key(name) => owner == Some(name),
        }
    }

    /// Refuses a call that only the owner may make.
    pub fn require_owner(&self, what: &str) -> Result<(), Status> {
        match self {
            Principal::Owner => Ok(()),
            Principal::Key(_) => Err(reason::status(
                ErrorReason::OwnerOnly,
                format!("{what} is for the machine's owner, on the server's Unix socket"),
            )),
        }
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Principal::Owner => f.write_str("owner"),
            Principal::Key(name) => write!(f, "key:{name}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_sees_only_its_own() {
        let alice = Principal::Key("alice".into());
        assert!(alice.may_see(Some("alice")));
        assert!(!alice.may_see(Some("bob")));
        assert!(!alice.may_see(None));
        assert!(Principal::Owner.may_see(Some("bob")));
        assert!(Principal::Owner.may_see(None));
        assert_eq!(alice.to_string(), "key:alice");
        let refused = alice.require_owner("managing keys").unwrap_err();
        assert_eq!(refused.code(), tonic::Code::PermissionDenied);
    }
}
