//! What can stop the agent's listener from being set up or serving.

use std::path::PathBuf;

use super::serial::error::SerialError;

/// The listener could not be set up or failed.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// `--listen` is malformed.
    #[error("bad listen address {0:?}; use serial:NAME, vsock:PORT or unix:PATH")]
    BadAddress(String),
    /// The virtio-serial port could not be found or opened.
    #[error(transparent)]
    Serial(#[from] SerialError),
    /// The vsock port could not be bound.
    #[error("cannot listen on vsock port {port}; is the vsock device (vhost-vsock) present?")]
    BindVsock {
        /// The port.
        port: u32,
        /// Why binding failed.
        #[source]
        source: std::io::Error,
    },
    /// The Unix socket could not be bound.
    #[error("cannot listen on unix socket {}", path.display())]
    BindUnix {
        /// The socket path.
        path: PathBuf,
        /// Why binding failed.
        #[source]
        source: std::io::Error,
    },
    /// The server failed while serving.
    #[error("grpc server failed")]
    Serve(#[source] tonic::transport::Error),
}
