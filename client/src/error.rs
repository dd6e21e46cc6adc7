//! [`ClientError`]: why a call could not be made, or what the server said.

use std::path::PathBuf;
use std::time::Duration;

use tonic::{Code, Status};

use airlock_api::reason;
use airlock_api::v1::ErrorReason;

/// Why a client could not connect, or why a call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    #[error("{0}")]
    Endpoint(String),
    #[error("cannot reach the Airlock server at {endpoint}")]
    Connect {
        endpoint: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot open a connection to the Airlock server at {endpoint}")]
    Transport {
        endpoint: String,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("TLS: {}: {reason}", path.display())]
    Tls { path: PathBuf, reason: String },
    #[error(
        "started a local server on {} but it did not answer within {waited:?}; see {}",
        socket.display(),
        log.display()
    )]
    NotStarted {
        socket: PathBuf,
        log: PathBuf,
        waited: Duration,
    },
    #[error("cannot start a local server ({}): {source}", program.display())]
    Spawn {
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The server refused or failed the call: its message, and (see
    /// [`ClientError::reason`]) its reason.
    #[error("{}", describe(.0))]
    Call(Box<Status>),
    /// The call's stream ended before it should have.
    #[error("the server ended the call early")]
    Closed,
}

fn describe(status: &Status) -> String {
    match reason::reason_of(status) {
        Some(_) => status.message().to_owned(),
        None if status.message().is_empty() => format!("the call failed ({:?})", status.code()),
        None => format!("{} ({:?})", status.message(), status.code()),
    }
}

impl From<Status> for ClientError {
    fn from(status: Status) -> Self {
        ClientError::Call(Box::new(status))
    }
}

impl ClientError {
    /// The server's status, for a failed call.
    pub fn status(&self) -> Option<&Status> {
        match self {
            ClientError::Call(status) => Some(status),
            _ => None,
        }
    }

    /// The gRPC code of a failed call.
    pub fn code(&self) -> Option<Code> {
        self.status().map(Status::code)
    }

    /// The reason the server gave.
    pub fn reason(&self) -> Option<ErrorReason> {
        self.status().and_then(reason::reason_of)
    }

    /// The field of a request the server refused.
    pub fn field(&self) -> Option<&str> {
        self.status().and_then(reason::field_of)
    }
}
