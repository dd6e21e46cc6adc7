//! The daemon's side: a private Unix socket in front of a [`Sandboxes`]
//! manager. Each connection carries one request (see `protocol`) and runs
//! in its own task; an exec goes to `exec`.

use std::fs::{File, OpenOptions};
use std::future::Future;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg};
use tokio::net::{UnixListener, UnixStream};
use tokio::task::JoinSet;

use super::protocol::{
    read_frame, write_frame, CreateRequest, IdleAction, Request, Response, SandboxEntry,
};
use super::DaemonError;
use airlock::{error_chain, IdlePolicy, Sandbox, SandboxBuilder, Sandboxes};

/// How long the daemon waits before accepting again after `accept` failed
/// (say, out of file descriptors).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The daemon's socket, bound and exclusively held: a lock file next to
/// it (`<socket>.lock`) keeps a second daemon out for as long as this one
/// lives. Dropping it removes the socket file.
#[derive(Debug)]
pub struct DaemonSocket {
    listener: UnixListener,
    path: PathBuf,
    _lock: Flock<File>,
}

impl DaemonSocket {
    /// Takes the lock, makes sure no daemon answers on `path`, replaces a
    /// stale socket file, and listens there with mode 0600.
    pub async fn bind(path: &Path) -> Result<DaemonSocket, DaemonError> {
        let failed = |source| DaemonError::Bind {
            socket: path.to_owned(),
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
                return Err(DaemonError::AlreadyRunning {
                    socket: path.to_owned(),
                })
            }
            Err((_, errno)) => return Err(failed(std::io::Error::from(errno))),
        };
        if UnixStream::connect(path).await.is_ok() {
            return Err(DaemonError::AlreadyRunning {
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
        Ok(DaemonSocket {
            listener,
            path: path.to_owned(),
            _lock: lock,
        })
    }

    /// Where the socket is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for DaemonSocket {
    fn drop(&mut self) {
        if let Err(error) = std::fs::remove_file(&self.path) {
            tracing::warn!(%error, socket = %self.path.display(), "cannot remove the socket");
        }
    }
}

/// Serves requests on `socket` with a manager of at most `max` sandboxes
/// until `shutdown` completes; then kills every sandbox, waits for the
/// connections' tasks to end, and removes the socket.
pub async fn serve(
    socket: DaemonSocket,
    max: usize,
    shutdown: impl Future<Output = ()>,
) -> Result<(), DaemonError> {
    let sandboxes = Arc::new(Sandboxes::new(max));
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    tracing::info!(socket = %socket.path().display(), max, "serving");
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = socket.listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(handle(stream, Arc::clone(&sandboxes)));
                }
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    let live = sandboxes.list().len();
    tracing::info!(sandboxes = live, "shutting down: killing every sandbox");
    sandboxes.kill_all();
    // The tasks hold sandboxes too; they go (and their state directories
    // with them) before the daemon exits.
    connections.abort_all();
    while connections.join_next().await.is_some() {}
    drop(sandboxes);
    drop(socket);
    Ok(())
}

/// One connection: read the request, answer it.
async fn handle(stream: UnixStream, sandboxes: Arc<Sandboxes>) {
    let (mut reader, mut writer) = stream.into_split();
    let request = match read_frame::<_, Request>(&mut reader).await {
        Ok(Some(request)) => request,
        Ok(None) => return,
        Err(error) => {
            tracing::warn!(error = %error_chain(&error), "bad request");
            let message = error_chain(&error);
            let _ = write_frame(&mut writer, &Response::Error { message }).await;
            return;
        }
    };
    tracing::debug!(?request, "request");
    let response = match request {
        Request::Exec(exec) => return super::exec::run(exec, &sandboxes, reader, writer).await,
        other => answer(other, &sandboxes).await,
    };
    if let Err(error) = write_frame(&mut writer, &response).await {
        tracing::debug!(error = %error_chain(&error), "client gone before the answer");
    }
}

/// The answer to every request but exec.
async fn answer(request: Request, sandboxes: &Sandboxes) -> Response {
    let done = match request {
        Request::Ping => Ok(Response::Pong {
            pid: std::process::id(),
        }),
        Request::Create(create) => match sandboxes.start(builder(create)).await {
            Ok(sandbox) => {
                tracing::info!(id = sandbox.id(), "created");
                Ok(Response::Created {
                    id: sandbox.id().to_owned(),
                })
            }
            Err(error) => Err(error),
        },
        Request::List => Ok(Response::Sandboxes {
            sandboxes: sandboxes
                .list()
                .iter()
                .map(SandboxEntry::from_info)
                .collect(),
        }),
        Request::CopyIn { id, host, guest } => match sandboxes.get(&id) {
            Ok(sandbox) => sandbox
                .fs()
                .copy_in(&host, &guest)
                .await
                .map(|_| Response::Ok),
            Err(error) => Err(error),
        },
        Request::CopyOut { id, guest, host } => match sandboxes.get(&id) {
            Ok(sandbox) => sandbox
                .fs()
                .copy_out(&guest, &host)
                .await
                .map(|_| Response::Ok),
            Err(error) => Err(error),
        },
        Request::Pause { id } => match sandboxes.get(&id) {
            Ok(sandbox) => sandbox.pause().await.map(|()| Response::Ok),
            Err(error) => Err(error),
        },
        Request::Resume { id } => match sandboxes.get(&id) {
            Ok(sandbox) => sandbox.resume().await.map(|()| Response::Ok),
            Err(error) => Err(error),
        },
        Request::Kill { id } => sandboxes.kill(&id).map(|()| {
            tracing::info!(%id, "killed");
            Response::Ok
        }),
        Request::Exec(_) => Ok(Response::Error {
            message: "exec is served on its own".into(),
        }),
    };
    done.unwrap_or_else(|error| Response::Error {
        message: error_chain(&error),
    })
}

/// The sandbox a create request describes.
fn builder(create: CreateRequest) -> SandboxBuilder {
    let mut builder = Sandbox::builder()
        .memory_mib(create.memory_mib)
        .vcpus(create.vcpus);
    if let Some(image) = create.image {
        builder = builder.image(image);
    }
    if let Some(workspace) = create.workspace {
        builder = builder.workspace(workspace);
    }
    match create.max_lifetime_secs {
        Some(0) => builder = builder.max_lifetime(None),
        Some(secs) => builder = builder.max_lifetime(Some(Duration::from_secs(secs))),
        None => {}
    }
    if let Some((secs, action)) = create.idle {
        let policy = match action {
            IdleAction::Pause => IdlePolicy::Pause,
            IdleAction::Stop => IdlePolicy::Stop,
        };
        builder = builder.idle_timeout(Duration::from_secs(secs), policy);
    }
    builder
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::daemon::client;

    #[tokio::test]
    async fn a_private_socket_that_keeps_a_second_daemon_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested").join("daemon.sock");
        let socket = DaemonSocket::bind(&path).await.unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let second = DaemonSocket::bind(&path).await.unwrap_err();
        assert!(
            matches!(second, DaemonError::AlreadyRunning { .. }),
            "{second}"
        );

        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(socket, 2, async {
            let _ = stopped.await;
        }));
        let pong = client::Connection::connect(&path)
            .await
            .unwrap()
            .call(&Request::Ping)
            .await
            .unwrap();
        assert_eq!(
            pong,
            Response::Pong {
                pid: std::process::id()
            }
        );
        let list = client::Connection::connect(&path)
            .await
            .unwrap()
            .call(&Request::List)
            .await
            .unwrap();
        assert_eq!(list, Response::Sandboxes { sandboxes: vec![] });
        let missing = client::Connection::connect(&path)
            .await
            .unwrap()
            .call(&Request::Pause { id: "nope".into() })
            .await
            .unwrap_err();
        assert!(missing.to_string().contains("no sandbox nope"), "{missing}");

        stop.send(()).unwrap();
        server.await.unwrap().unwrap();
        assert!(!path.exists(), "the socket is removed");
    }

    #[tokio::test]
    async fn a_stale_socket_file_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.sock");
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let socket = DaemonSocket::bind(&path).await.unwrap();
        assert!(UnixStream::connect(&path).await.is_ok());
        drop(socket);
        assert!(!path.exists());
    }
}
