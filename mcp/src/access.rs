//! How a session reaches the Airlock server. Over stdio one client serves
//! the whole session ([`Connector`]: the local server, started on demand,
//! or a remote one). Over HTTP every request brings its caller's API key,
//! and the gate hands the tools a client that sends exactly that key
//! ([`Caller`]), so what a caller may see and do is the server's decision.

use std::fmt;
use std::path::PathBuf;

use sha2::{Digest, Sha256};

use airlock_client::{Client, ClientError, Endpoint};

/// Where a stdio session's server is.
#[derive(Debug, Clone)]
pub enum Connector {
    /// The local server on `socket`, started with `program serve` when
    /// nobody answers there.
    Local { socket: PathBuf, program: PathBuf },
    /// A server at an endpoint (a remote one, with its key).
    Endpoint(Endpoint),
}

impl Connector {
    /// Connects (starting the local server if it must).
    pub async fn connect(&self) -> Result<Client, ClientError> {
        match self {
            Connector::Local { socket, program } => Client::connect_or_start(socket, program).await,
            Connector::Endpoint(endpoint) => endpoint.connect().await,
        }
    }
}

/// An API key's SHA-256: how the gate and the sessions tell keys apart
/// without keeping the keys.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyId([u8; 32]);

impl KeyId {
    pub fn of(key: &str) -> KeyId {
        KeyId(Sha256::digest(key.as_bytes()).into())
    }
}

impl fmt::Debug for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A few bytes of the hash tell keys apart in logs; never the key.
        write!(
            f,
            "KeyId({:02x}{:02x}{:02x}{:02x})",
            self.0[0], self.0[1], self.0[2], self.0[3]
        )
    }
}

/// The caller of one HTTP request, as the gate admitted them: a client of
/// the server that sends their key.
#[derive(Debug, Clone)]
pub struct Caller {
    pub client: Client,
    pub key: KeyId,
}
