//! [`UnixSocket`]: the owner's private socket.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use tokio::net::{UnixListener, UnixStream};

use crate::error::ServerError;

/// The server's Unix socket, bound and exclusively held: a lock file next
/// to it (`<socket>.lock`) keeps a second server out for as long as this
/// one lives. Dropping it removes the socket file.
#[derive(Debug)]
pub struct UnixSocket {
    /// Taken when the server starts serving.
    listener: Option<UnixListener>,
    path: PathBuf,
    _lock: Flock<File>,
}

impl UnixSocket {
    /// Takes the lock, makes sure no server answers on `path`, replaces a
    /// stale socket file, and listens there with mode 0600.
    pub async fn bind(path: &Path) -> Result<UnixSocket, ServerError> {
        let failed = |source| ServerError::Bind {
            address: path.display().to_string(),
            source,
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            // The same mode as the state directories' parent, which this
            // usually is: VMMs running as another user must traverse it.
            std::os::unix::fs::DirBuilderExt::mode(
                std::fs::DirBuilder::new().recursive(true),
                0o755,
            )
            .create(parent)
            .map_err(failed)?;
        }
        let mut lock_path = path.as_os_str().to_owned();
        lock_path.push(".lock");
        let lock_file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&lock_path)
            .map_err(failed)?;
        let lock = match Flock::lock(lock_file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => lock,
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
                return Err(ServerError::AlreadyRunning {
                    socket: path.to_owned(),
                })
            }
            Err((_, errno)) => return Err(failed(std::io::Error::from(errno))),
        };
        if UnixStream::connect(path).await.is_ok() {
            return Err(ServerError::AlreadyRunning {
                socket: path.to_owned(),
            });
        }
        match std::fs::remove_file(path) {
            Ok(()) => tracing::info!(socket = %path.display(), "removed a stale socket"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(failed(e)),
        }
        // Nobody else may connect, not even between bind and chmod.
        let umask = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
        let listener = UnixListener::bind(path);
        nix::sys::stat::umask(umask);
        let listener = listener.map_err(failed)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(failed)?;
        Ok(UnixSocket {
            listener: Some(listener),
            path: path.to_owned(),
            _lock: lock,
        })
    }

    /// Where the socket is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn take_listener(&mut self) -> Option<UnixListener> {
        self.listener.take()
    }
}

impl Drop for UnixSocket {
    fn drop(&mut self) {
        if let Err(error) = std::fs::remove_file(&self.path) {
            tracing::warn!(%error, socket = %self.path.display(), "cannot remove the socket");
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_private_socket_that_keeps_a_second_server_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested").join("server.sock");
        let socket = UnixSocket::bind(&path).await.unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let second = UnixSocket::bind(&path).await.unwrap_err();
        assert!(
            matches!(second, ServerError::AlreadyRunning { .. }),
            "{second}"
        );
        drop(socket);
        assert!(!path.exists(), "the socket is removed");
    }

    #[tokio::test]
    async fn a_stale_socket_file_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("server.sock");
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let socket = UnixSocket::bind(&path).await.unwrap();
        assert!(UnixStream::connect(&path).await.is_ok());
        drop(socket);
        assert!(!path.exists());
    }
}
