//! What can go wrong between a client and the daemon.

use std::path::PathBuf;
use std::time::Duration;

/// A daemon or client failure (a refused request is [`DaemonError::Remote`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DaemonError {
    /// No daemon answered on the socket.
    #[error("cannot connect to the daemon at {}", socket.display())]
    Connect {
        socket: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The gRPC connection to the daemon could not be set up.
    #[error("cannot talk to the daemon at {}", socket.display())]
    Transport {
        socket: PathBuf,
        #[source]
        source: tonic::transport::Error,
    },

    /// A call failed without a reason from the daemon (say, the
    /// connection broke).
    #[error("the daemon call failed: {} ({:?})", .0.message(), .0.code())]
    Call(Box<tonic::Status>),

    /// The gRPC server stopped with an error.
    #[error("the daemon's server failed")]
    Serve(#[source] tonic::transport::Error),

    /// The peer hung up before the exchange was over.
    #[error("the daemon closed the connection early; see its log")]
    Closed,

    /// The daemon refused or failed the request (a status with a reason);
    /// the message says why.
    #[error("{0}")]
    Remote(String),

    /// The daemon reported an exit with neither a code nor a signal.
    #[error("the daemon sent an exit without a status")]
    ExitWithoutStatus,

    /// The daemon answered with a message that does not fit the call.
    #[error("unexpected answer from the daemon: {0}")]
    Unexpected(String),

    /// The warm pool asked for cannot be kept.
    #[error("cannot keep the warm pool: {message}")]
    Pool { message: String },

    /// Another daemon holds the socket.
    #[error(
        "another airlock daemon is serving {}; stop it first or pass another --socket",
        socket.display()
    )]
    AlreadyRunning { socket: PathBuf },

    /// The socket (or its lock file) could not be set up.
    #[error("cannot listen on {}", socket.display())]
    Bind {
        socket: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The daemon process could not be started.
    #[error("cannot start `{} serve`", program.display())]
    Spawn {
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A daemon was started but did not answer in time.
    #[error(
        "the airlock daemon did not come up on {} within {waited:?}; see its log {}",
        socket.display(),
        log.display()
    )]
    NotStarted {
        socket: PathBuf,
        log: PathBuf,
        waited: Duration,
    },
}
