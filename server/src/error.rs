//! [`ServerError`]: why a server could not start or serve.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::keys::KeyError;
use crate::record::RecordError;

/// Why a server could not start or serve.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    #[error("cannot listen on {address}")]
    Bind {
        address: String,
        #[source]
        source: std::io::Error,
    },
    #[error("a server is already running on {}", socket.display())]
    AlreadyRunning { socket: PathBuf },
    #[error("TLS: {}: {reason}", path.display())]
    Tls { path: PathBuf, reason: String },
    #[error(
        "{addr}: a TCP listener needs TLS (--tls-cert and --tls-key); plain TCP is for a \
         loopback address with --insecure"
    )]
    NoTls { addr: SocketAddr },
    #[error("{addr}: plain TCP (--insecure) is only for a loopback address; give TLS files")]
    PlainOffLoopback { addr: SocketAddr },
    #[error("API keys")]
    Keys(#[from] KeyError),
    #[error("sandbox records")]
    Records(#[from] RecordError),
    #[error("the event log")]
    Events(#[from] crate::events::EventLogError),
    #[error("webhooks")]
    Webhooks(#[from] crate::webhooks::error::WebhooksError),
    #[error("--webhook")]
    WebhookUrl(#[from] crate::webhooks::target::TargetError),
    #[error("metrics")]
    Metrics(#[from] crate::metrics::error::MetricsBindError),
    #[error("the usage ledger")]
    Usage(#[from] crate::usage::error::UsageError),
    #[error("the warm pool: {0}")]
    Pool(String),
    #[error("serving")]
    Serve(#[source] tonic::transport::Error),
}
