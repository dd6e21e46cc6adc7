//! Where the agent listens: a virtio-serial port or AF_VSOCK in a VM, a
//! Unix socket in tests.
//!
//! [`Listen`] is the parsed `--listen` value (`serial:NAME`, `vsock:PORT`
//! or `unix:PATH`). [`Listener::bind`] opens the port or socket;
//! [`Listener::serve`] runs a tonic router on it until the shutdown future
//! completes.
//!
//! - vsock and Unix sockets accept any number of connections. Accept errors
//!   (such as running out of file descriptors) are logged and retried after
//!   a pause instead of ending the server.
//! - A virtio-serial port ([`serial`]) is one byte pipe that carries one
//!   host connection at a time: the agent waits for a host, runs the
//!   opening of `airlock_proto::opening`, serves HTTP/2 until the host
//!   leaves, and waits for the next host, for as long as it runs.
//!
//! The router comes with HTTP/2 keepalives (`services::router`), so on any
//! listener a connection whose host no longer answers pings ends.

use std::fmt;
use std::future::Future;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

pub mod error;
pub mod serial;

pub use self::error::ServerError;

use futures::{Stream, StreamExt};
use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;
use tokio_vsock::{VsockAddr, VsockListener, VMADDR_CID_ANY};
use tonic::transport::server::Router;

/// Pause after a failed accept, so a persistent error does not spin.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// An address to serve on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    /// The virtio-serial port with this name (QEMU's
    /// `virtserialport,name=...`).
    Serial(String),
    /// AF_VSOCK, any CID, this port.
    Vsock(u32),
    /// A Unix stream socket at this path.
    Unix(PathBuf),
}

impl FromStr for Listen {
    type Err = ServerError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ServerError::BadAddress(s.to_owned());
        match s.split_once(':') {
            Some(("serial", name)) if !name.is_empty() => Ok(Self::Serial(name.to_owned())),
            Some(("vsock", port)) => match port.parse::<u32>() {
                Ok(port) if port != 0 => Ok(Self::Vsock(port)),
                _ => Err(bad()),
            },
            Some(("unix", path)) if !path.is_empty() => Ok(Self::Unix(PathBuf::from(path))),
            _ => Err(bad()),
        }
    }
}

impl fmt::Display for Listen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Serial(name) => write!(f, "serial:{name}"),
            Self::Vsock(port) => write!(f, "vsock:{port}"),
            Self::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// A bound socket or an open port, ready to serve.
#[derive(Debug)]
pub enum Listener {
    /// A virtio-serial port.
    Serial(serial::Device),
    /// AF_VSOCK.
    Vsock(VsockListener),
    /// Unix socket, with its path to remove when done.
    Unix(UnixListener, PathBuf),
}

impl Listener {
    /// Binds `listen`. A stale Unix socket at the path is replaced; any
    /// other file there is an error. A virtio-serial port may appear a
    /// little after its driver loads: this waits for it, up to
    /// [`serial::APPEAR_WAIT`]. Must run inside a tokio runtime.
    pub async fn bind(listen: &Listen) -> Result<Self, ServerError> {
        match listen {
            Listen::Serial(name) => Ok(Self::Serial(serial::Device::open(name).await?)),
            Listen::Vsock(port) => VsockListener::bind(VsockAddr::new(VMADDR_CID_ANY, *port))
                .map(Self::Vsock)
                .map_err(|source| ServerError::BindVsock {
                    port: *port,
                    source,
                }),
            Listen::Unix(path) => {
                let bind_err = |source| ServerError::BindUnix {
                    path: path.clone(),
                    source,
                };
                remove_stale_socket(path).map_err(bind_err)?;
                UnixListener::bind(path)
                    .map(|l| Self::Unix(l, path.clone()))
                    .map_err(bind_err)
            }
        }
    }

    /// Serves `router` until `shutdown` completes and open calls finish.
    pub async fn serve(
        self,
        router: Router,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), ServerError> {
        match self {
            Self::Serial(device) => router
                .serve_with_incoming_shutdown(serial::incoming(device), shutdown)
                .await
                .map_err(ServerError::Serve),
            Self::Vsock(listener) => router
                .serve_with_incoming_shutdown(retrying(listener.incoming()), shutdown)
                .await
                .map_err(ServerError::Serve),
            Self::Unix(listener, path) => {
                let incoming = retrying(UnixListenerStream::new(listener));
                let served = router
                    .serve_with_incoming_shutdown(incoming, shutdown)
                    .await
                    .map_err(ServerError::Serve);
                if let Err(e) = std::fs::remove_file(&path) {
                    tracing::debug!(path = %path.display(), error = %e, "socket not removed");
                }
                served
            }
        }
    }
}

fn remove_stale_socket(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(path),
        _ => Ok(()),
    }
}

/// Logs accept errors and pauses before the next accept; yields only
/// accepted connections.
fn retrying<S, T>(incoming: S) -> impl Stream<Item = Result<T, std::io::Error>>
where
    S: Stream<Item = Result<T, std::io::Error>>,
{
    incoming
        .then(|accepted| async move {
            if let Err(e) = &accepted {
                tracing::warn!(error = %e, "accept failed; retrying");
                tokio::time::sleep(ACCEPT_RETRY).await;
            }
            accepted
        })
        .filter(|accepted| std::future::ready(accepted.is_ok()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_serial_vsock_and_unix() {
        assert_eq!(
            "serial:airlock.agent.0".parse::<Listen>().unwrap(),
            Listen::Serial("airlock.agent.0".to_owned())
        );
        assert_eq!("vsock:1024".parse::<Listen>().unwrap(), Listen::Vsock(1024));
        assert_eq!(
            "unix:/tmp/a b.sock".parse::<Listen>().unwrap(),
            Listen::Unix(PathBuf::from("/tmp/a b.sock"))
        );
    }

    #[test]
    fn rejects_malformed_addresses() {
        for bad in [
            "", "vsock", "vsock:", "vsock:x", "vsock:0", "unix:", "tcp:1", "/tmp/s", "serial:",
            "serial",
        ] {
            let err = bad.parse::<Listen>().unwrap_err();
            assert!(err.to_string().contains("vsock:PORT"), "{bad}: {err}");
        }
    }

    #[test]
    fn display_round_trips() {
        for text in ["vsock:7", "unix:/run/agent.sock", "serial:airlock.agent.0"] {
            assert_eq!(text.parse::<Listen>().unwrap().to_string(), text);
        }
    }

    #[tokio::test]
    async fn bind_replaces_stale_socket_but_not_other_files() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("agent.sock");
        drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
        Listener::bind(&Listen::Unix(sock.clone())).await.unwrap();

        let file = dir.path().join("file");
        std::fs::write(&file, b"keep").unwrap();
        assert!(Listener::bind(&Listen::Unix(file.clone())).await.is_err());
        assert_eq!(std::fs::read(&file).unwrap(), b"keep");
    }
}
