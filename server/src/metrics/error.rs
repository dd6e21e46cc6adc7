//! [`MetricsBindError`]: what can go wrong before the metrics listener serves.

use std::net::SocketAddr;

/// The metrics listener could not be bound or taken into the runtime.
#[derive(Debug, thiserror::Error)]
#[error("the metrics listener on {address}")]
pub struct MetricsBindError {
    pub(super) address: SocketAddr,
    #[source]
    pub(super) source: std::io::Error,
}
