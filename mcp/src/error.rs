//! [`ServeError`]: why `airlock mcp` could not start or serve.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Why the MCP server could not start or had to stop.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    #[error(
        "--http checks each caller's API key with an Airlock server on TCP: start one with \
         `airlock serve --listen 127.0.0.1:7443 --tls-cert FILE --tls-key FILE` and set \
         AIRLOCK_HOST=https://localhost:7443 (and AIRLOCK_CA_CERT for a private CA)"
    )]
    NeedsTcpServer,
    #[error(
        "refusing plain HTTP on {0}, which is not a loopback address: give --tls-cert and \
         --tls-key, or listen on 127.0.0.1"
    )]
    PlainHttp(SocketAddr),
    #[error("TLS: {}: {reason}", path.display())]
    Tls { path: PathBuf, reason: String },
    #[error("cannot listen on {address}")]
    Bind {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("the MCP session failed: {0}")]
    Session(String),
    #[error("cannot watch for signals")]
    Signals(#[source] std::io::Error),
}
