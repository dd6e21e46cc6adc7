//! Where CA certificates come from: [`Origin`], for messages, and
//! [`CA_CERTS_ENV`], what a start trusts unless its builder says.

use std::fmt;
use std::path::PathBuf;

/// The environment variable that gives every start its CA certificates
/// unless the builder was given some: PEM files separated by `:`, and
/// `host` for the host's system store (as
/// [`trust_host_roots`](crate::SandboxBuilder::trust_host_roots)). Empty
/// or unset: none.
pub const CA_CERTS_ENV: &str = "AIRLOCK_CA_CERTS";

/// Where certificates came from, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A file.
    File(PathBuf),
    /// Text given as such (an API request, say).
    Text,
    /// The host's system store, this file of it.
    HostStore(PathBuf),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File(path) => write!(f, "{}", path.display()),
            Origin::Text => f.write_str("the PEM text"),
            Origin::HostStore(path) => write!(f, "the host's trust store {}", path.display()),
        }
    }
}
