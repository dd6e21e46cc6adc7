//! The daemon's side: the `airlock.daemon.v1.Sandboxes` gRPC service on a
//! private Unix socket, in front of a [`Sandboxes`] manager. Every call's
//! work runs in a task the daemon tracks, so shutting down ends them all
//! (an exec's is in `exec`).

use std::fs::{File, OpenOptions};
use std::future::Future;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use airlock_proto::daemon::v1 as pb;
use airlock_proto::daemon::v1::sandboxes_server::SandboxesServer;
use airlock_proto::v1::{CodeEvent, ProcessEvent};
use futures::StreamExt;
use nix::fcntl::{Flock, FlockArg};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::oneshot;
use tokio::task::JoinSet;
use tokio_stream::wrappers::{ReceiverStream, UnixListenerStream};
use tonic::{Code, Request, Response, Status, Streaming};

use super::wire::{self, MAX_MESSAGE_BYTES};
use super::DaemonError;
use airlock::saved::SavedStore;
use airlock::{Sandbox, SandboxBuilder, Sandboxes};

/// How long the daemon waits before accepting again after `accept` failed
/// (say, out of file descriptors).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// How long a stopping daemon waits for its connections to close.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// The daemon's socket, bound and exclusively held: a lock file next to
/// it (`<socket>.lock`) keeps a second daemon out for as long as this one
/// lives. Dropping it removes the socket file.
#[derive(Debug)]
pub struct DaemonSocket {
    /// Taken by [`serve`].
    listener: Option<UnixListener>,
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
            listener: Some(listener),
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

/// A warm pool the daemon keeps: `size` sandboxes of the configuration
/// `request` describes, handed out to creates that ask for exactly it.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    pub request: pb::CreateRequest,
    pub size: usize,
}

/// Serves `airlock.daemon.v1.Sandboxes` on `socket` with a manager of at
/// most `max` sandboxes (and a warm pool, if `pool` says so) until
/// `shutdown` completes; then kills every sandbox (one saved to disk stays
/// there, for a restore after the next start), ends every call's task, and
/// removes the socket.
pub async fn serve(
    mut socket: DaemonSocket,
    max: usize,
    pool: Option<PoolConfig>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), DaemonError> {
    let sandboxes = Arc::new(Sandboxes::new(max));
    let pool_request = match pool {
        Some(PoolConfig { request, size }) => {
            let builder = builder(request.clone()).map_err(|status| DaemonError::Pool {
                message: status.message().to_owned(),
            })?;
            sandboxes
                .set_pool(builder, size)
                .map_err(|error| DaemonError::Pool {
                    message: airlock::error_chain(&error),
                })?;
            tracing::info!(size, "keeping a warm pool");
            Some(request)
        }
        None => None,
    };
    let tasks = Arc::new(Mutex::new(JoinSet::new()));
    let service = Service {
        sandboxes: Arc::clone(&sandboxes),
        tasks: Arc::clone(&tasks),
        pool_request,
        policy_changes: Mutex::new(()),
    };
    let listener = socket.listener.take().ok_or(DaemonError::Closed)?;
    // A failed accept (say, out of file descriptors) is retried, not fatal.
    let incoming = UnixListenerStream::new(listener).filter_map(|accepted| async move {
        match accepted {
            Ok(stream) => Some(Ok::<_, std::io::Error>(stream)),
            Err(error) => {
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                None
            }
        }
    });
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(
                SandboxesServer::new(service)
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES),
            )
            .serve_with_incoming_shutdown(incoming, async {
                let _ = stopped.await;
            }),
    );
    tracing::info!(socket = %socket.path().display(), max, "serving");
    shutdown.await;
    let live = sandboxes.list().len();
    tracing::info!(sandboxes = live, "shutting down: killing every sandbox");
    sandboxes.kill_all();
    // The calls' tasks hold sandboxes too; they go (and their state
    // directories with them) before the daemon exits.
    let mut running = std::mem::take(&mut *lock(&tasks));
    running.abort_all();
    while running.join_next().await.is_some() {}
    let _ = stop.send(());
    let served = match tokio::time::timeout(DRAIN_TIMEOUT, server).await {
        Ok(Ok(served)) => served.map_err(DaemonError::Serve),
        Ok(Err(_)) => Ok(()),
        Err(_) => {
            tracing::warn!("connections still open; stopping anyway");
            Ok(())
        }
    };
    drop(sandboxes);
    drop(socket);
    served
}

/// The tracked tasks, even if a panicking task poisoned the lock.
fn lock(tasks: &Mutex<JoinSet<()>>) -> std::sync::MutexGuard<'_, JoinSet<()>> {
    tasks
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The `Sandboxes` service.
#[derive(Debug)]
struct Service {
    sandboxes: Arc<Sandboxes>,
    /// Every call's work, ended when the daemon stops.
    tasks: Arc<Mutex<JoinSet<()>>>,
    /// The create request the warm pool serves, if there is a pool.
    pool_request: Option<pb::CreateRequest>,
    /// Held while a network policy is read, changed and written back.
    policy_changes: Mutex<()>,
}

impl Service {
    /// Runs `work` in a tracked task (see [`Service::spawn`]) and returns
    /// its answer; `UNAVAILABLE` if the daemon stopped it.
    async fn run<T, F>(&self, work: F) -> Result<Response<T>, Status>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, Status>> + Send + 'static,
    {
        let (answer, answered) = oneshot::channel();
        self.spawn(async move {
            let _ = answer.send(work.await);
        });
        match answered.await {
            Ok(answer) => answer.map(Response::new),
            Err(_) => Err(shutting_down()),
        }
    }

    /// Spawns `task` where a stopping daemon ends it.
    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        let mut tasks = lock(&self.tasks);
        while tasks.try_join_next().is_some() {}
        tasks.spawn(task);
    }

    /// The sandbox `id` names: one the daemon holds, else one saved to
    /// disk (by this daemon before it restarted, say), restored now.
    async fn sandbox(&self, id: &str) -> Result<Arc<Sandbox>, Status> {
        match self.sandboxes.get(id) {
            Ok(sandbox) => Ok(sandbox),
            Err(airlock::Error::NoSuchSandbox { .. }) if is_saved(id) => {
                let sandboxes = Arc::clone(&self.sandboxes);
                let id = id.to_owned();
                self.run(async move {
                    tracing::info!(%id, "restoring a sandbox saved to disk");
                    sandboxes
                        .restore(Sandbox::builder(), &id)
                        .await
                        .map_err(|e| wire::error_status(&e))
                })
                .await
                .map(Response::into_inner)
            }
            Err(error) => Err(wire::error_status(&error)),
        }
    }
}

/// Whether `id` is a sandbox saved to disk.
fn is_saved(id: &str) -> bool {
    SavedStore::new(airlock::saved::default_dir())
        .record(id)
        .is_ok()
}

fn shutting_down() -> Status {
    wire::status(
        Code::Unavailable,
        pb::ErrorReason::ShuttingDown,
        "the daemon is shutting down",
    )
}

#[tonic::async_trait]
impl pb::sandboxes_server::Sandboxes for Service {
    async fn ping(
        &self,
        _: Request<pb::PingRequest>,
    ) -> Result<Response<pb::PingResponse>, Status> {
        Ok(Response::new(pb::PingResponse {
            pid: std::process::id(),
        }))
    }

    async fn create(
        &self,
        request: Request<pb::CreateRequest>,
    ) -> Result<Response<pb::CreateResponse>, Status> {
        let request = request.into_inner();
        let pooled = self.pool_request.as_ref() == Some(&request);
        let builder = builder(request)?;
        let sandboxes = Arc::clone(&self.sandboxes);
        self.run(async move {
            let started = if pooled {
                sandboxes.start_pooled().await
            } else {
                sandboxes.start(builder).await
            };
            let sandbox = started.map_err(|e| wire::error_status(&e))?;
            tracing::info!(id = sandbox.id(), "created");
            Ok(pb::CreateResponse {
                id: sandbox.id().to_owned(),
            })
        })
        .await
    }

    async fn list(
        &self,
        _: Request<pb::ListRequest>,
    ) -> Result<Response<pb::ListResponse>, Status> {
        let mut sandboxes: Vec<pb::SandboxInfo> = self
            .sandboxes
            .list()
            .iter()
            .map(wire::sandbox_info)
            .collect();
        // Sandboxes saved to disk whose handle is gone (a restart) are
        // listed too; the next call on one restores it.
        let saved = SavedStore::new(airlock::saved::default_dir())
            .list()
            .unwrap_or_default();
        for record in saved {
            if !sandboxes.iter().any(|info| info.id == record.id) {
                sandboxes.push(wire::saved_info(&record));
            }
        }
        sandboxes.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(Response::new(pb::ListResponse { sandboxes }))
    }

    type ExecStream = ReceiverStream<Result<ProcessEvent, Status>>;

    async fn exec(
        &self,
        request: Request<Streaming<pb::ExecRequest>>,
    ) -> Result<Response<Self::ExecStream>, Status> {
        let mut inputs = request.into_inner();
        let start = match inputs.message().await? {
            Some(pb::ExecRequest {
                input: Some(pb::exec_request::Input::Start(start)),
            }) => start,
            _ => {
                return Err(wire::status(
                    Code::InvalidArgument,
                    pb::ErrorReason::InvalidArgument,
                    "an exec begins with its start message",
                ))
            }
        };
        let command = super::exec::command(&start).map_err(|e| wire::options_status(&e))?;
        let sandbox = self.sandbox(&start.id).await?;
        let id = start.id;
        let execution = self
            .run(async move {
                sandbox
                    .exec(&command)
                    .await
                    .map_err(|e| wire::error_status(&e))
            })
            .await?
            .into_inner();
        tracing::debug!(%id, pid = execution.pid(), "exec started");
        let (events, stream) = tokio::sync::mpsc::channel(super::exec::QUEUE);
        self.spawn(super::exec::run(execution, inputs, events));
        Ok(Response::new(ReceiverStream::new(stream)))
    }

    type RunCodeStream = ReceiverStream<Result<CodeEvent, Status>>;

    async fn run_code(
        &self,
        request: Request<pb::RunCodeRequest>,
    ) -> Result<Response<Self::RunCodeStream>, Status> {
        let request = request.into_inner();
        let cell = wire::cell(&request)?;
        let sandbox = self.sandbox(&request.id).await?;
        let language = match request.language.as_str() {
            "" => airlock::Language::default(),
            name => name.parse().unwrap_or_default(),
        };
        let execution = self
            .run(async move {
                if let Some(context) = &request.context {
                    super::code::ensure_context(&sandbox, context, language).await?;
                }
                sandbox
                    .run_code(cell)
                    .await
                    .map_err(|e| wire::error_status(&e))
            })
            .await?
            .into_inner();
        let (events, stream) = tokio::sync::mpsc::channel(super::code::QUEUE);
        self.spawn(super::code::run(execution, events));
        Ok(Response::new(ReceiverStream::new(stream)))
    }

    async fn copy_in(
        &self,
        request: Request<pb::CopyInRequest>,
    ) -> Result<Response<pb::CopyInResponse>, Status> {
        let request = request.into_inner();
        let sandbox = self.sandbox(&request.id).await?;
        self.run(async move {
            sandbox
                .fs()
                .copy_in(
                    Path::new(&request.host_path),
                    Path::new(&request.guest_path),
                )
                .await
                .map_err(|e| wire::error_status(&e))?;
            Ok(pb::CopyInResponse {})
        })
        .await
    }

    async fn copy_out(
        &self,
        request: Request<pb::CopyOutRequest>,
    ) -> Result<Response<pb::CopyOutResponse>, Status> {
        let request = request.into_inner();
        let sandbox = self.sandbox(&request.id).await?;
        self.run(async move {
            sandbox
                .fs()
                .copy_out(
                    Path::new(&request.guest_path),
                    Path::new(&request.host_path),
                )
                .await
                .map_err(|e| wire::error_status(&e))?;
            Ok(pb::CopyOutResponse {})
        })
        .await
    }

    async fn pause(
        &self,
        request: Request<pb::PauseRequest>,
    ) -> Result<Response<pb::PauseResponse>, Status> {
        let request = request.into_inner();
        let sandbox = self.sandbox(&request.id).await?;
        self.run(async move {
            let paused = if request.to_disk {
                sandbox.pause_to_disk().await
            } else {
                sandbox.pause().await
            };
            paused.map_err(|e| wire::error_status(&e))?;
            Ok(pb::PauseResponse {})
        })
        .await
    }

    async fn resume(
        &self,
        request: Request<pb::ResumeRequest>,
    ) -> Result<Response<pb::ResumeResponse>, Status> {
        let sandbox = self.sandbox(&request.into_inner().id).await?;
        self.run(async move {
            sandbox.resume().await.map_err(|e| wire::error_status(&e))?;
            Ok(pb::ResumeResponse {})
        })
        .await
    }

    async fn kill(
        &self,
        request: Request<pb::KillRequest>,
    ) -> Result<Response<pb::KillResponse>, Status> {
        let id = request.into_inner().id;
        match self.sandboxes.kill(&id) {
            Ok(()) => {}
            // One saved to disk and not restored: its files go.
            Err(airlock::Error::NoSuchSandbox { .. }) if is_saved(&id) => {
                SavedStore::new(airlock::saved::default_dir())
                    .remove(&id)
                    .map_err(|e| wire::error_status(&e.into()))?;
            }
            Err(error) => return Err(wire::error_status(&error)),
        }
        tracing::info!(%id, "killed");
        Ok(Response::new(pb::KillResponse {}))
    }

    async fn fork(
        &self,
        request: Request<pb::ForkRequest>,
    ) -> Result<Response<pb::ForkResponse>, Status> {
        let request = request.into_inner();
        if request.count == 0 {
            return Err(wire::status(
                Code::InvalidArgument,
                pb::ErrorReason::InvalidArgument,
                "a fork makes at least one sandbox",
            ));
        }
        // Resolved first, so a parent saved to disk is restored.
        self.sandbox(&request.id).await?;
        let sandboxes = Arc::clone(&self.sandboxes);
        self.run(async move {
            let count = usize::try_from(request.count).unwrap_or(usize::MAX);
            let children = sandboxes
                .fork(&request.id, count)
                .await
                .map_err(|e| wire::error_status(&e))?;
            let ids: Vec<String> = children.iter().map(|c| c.id().to_owned()).collect();
            tracing::info!(parent = request.id, ?ids, "forked");
            Ok(pb::ForkResponse { ids })
        })
        .await
    }

    async fn network_policy(
        &self,
        request: Request<pb::NetworkPolicyRequest>,
    ) -> Result<Response<pb::NetworkPolicyResponse>, Status> {
        let sandbox = self.sandbox(&request.into_inner().id).await?;
        super::network::policy(&sandbox).map(Response::new)
    }

    async fn change_network_policy(
        &self,
        request: Request<pb::ChangeNetworkPolicyRequest>,
    ) -> Result<Response<pb::NetworkPolicyResponse>, Status> {
        let request = request.into_inner();
        let sandbox = self.sandbox(&request.id).await?;
        super::network::change(&sandbox, &self.policy_changes, &request).map(Response::new)
    }

    async fn network_audit(
        &self,
        request: Request<pb::NetworkAuditRequest>,
    ) -> Result<Response<pb::NetworkAuditResponse>, Status> {
        let sandbox = self.sandbox(&request.into_inner().id).await?;
        super::network::audit(&sandbox).map(Response::new)
    }
}

/// The sandbox a create request describes.
fn builder(create: pb::CreateRequest) -> Result<SandboxBuilder, Status> {
    let network = wire::net_options(&create)?.network().map_err(|message| {
        wire::status(
            Code::InvalidArgument,
            pb::ErrorReason::InvalidArgument,
            message,
        )
    })?;
    let mut builder = Sandbox::builder()
        .memory_mib(create.memory_mib)
        .vcpus(create.vcpus)
        .from_template(!create.cold);
    if let Some(image) = create.image {
        builder = builder.image(PathBuf::from(image));
    }
    if let Some(workspace) = create.workspace {
        builder = builder.workspace(PathBuf::from(workspace));
    }
    match create.max_lifetime_secs {
        Some(0) => builder = builder.max_lifetime(None),
        Some(secs) => builder = builder.max_lifetime(Some(Duration::from_secs(secs))),
        None => {}
    }
    if let Some(idle) = create.idle {
        let policy = wire::idle_policy(idle.policy())?;
        builder = builder.idle_timeout(Duration::from_secs(idle.timeout_secs), policy);
    }
    if let Some(network) = network {
        builder = builder.network(network);
    }
    Ok(builder)
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
        let server = tokio::spawn(serve(socket, 2, None, async {
            let _ = stopped.await;
        }));
        let mut connection = client::Connection::connect(&path).await.unwrap();
        assert_eq!(connection.ping().await.unwrap(), std::process::id());
        assert!(connection.list().await.unwrap().is_empty());

        stop.send(()).unwrap();
        server.await.unwrap().unwrap();
        assert!(!path.exists(), "the socket is removed");
    }

    #[tokio::test]
    async fn unknown_sandboxes_are_not_found_with_a_reason() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.sock");
        let socket = DaemonSocket::bind(&path).await.unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(socket, 2, None, async {
            let _ = stopped.await;
        }));
        let connection = client::Connection::connect(&path).await.unwrap();
        let mut raw = connection.raw();
        for status in [
            raw.pause(pb::PauseRequest {
                id: "nope".into(),
                to_disk: false,
            })
            .await
            .unwrap_err(),
            raw.resume(pb::ResumeRequest { id: "nope".into() })
                .await
                .unwrap_err(),
            raw.kill(pb::KillRequest { id: "nope".into() })
                .await
                .unwrap_err(),
            raw.copy_in(pb::CopyInRequest {
                id: "nope".into(),
                host_path: "/etc/hostname".into(),
                guest_path: "/tmp/x".into(),
            })
            .await
            .unwrap_err(),
        ] {
            assert_eq!(status.code(), Code::NotFound, "{status:?}");
            assert_eq!(status.message(), "no sandbox nope");
            assert_eq!(wire::reason(&status), Some(pb::ErrorReason::NoSuchSandbox));
        }
        // The client's view: the message the CLI prints.
        let mut connection = client::Connection::connect(&path).await.unwrap();
        let error = connection.pause("nope", false).await.unwrap_err();
        assert_eq!(error.to_string(), "no sandbox nope");
        let start = pb::ExecStart {
            id: "nope".into(),
            argv: vec!["true".into()],
            options: Some(pb::ProgramOptions::default()),
            stdin: false,
        };
        let error = connection.exec(start.clone()).await.unwrap_err();
        assert_eq!(error.to_string(), "no sandbox nope");
        let no_program = pb::ExecStart {
            argv: vec![],
            ..start
        };
        let error = connection.exec(no_program).await.unwrap_err();
        assert_eq!(error.to_string(), "no program to run");
        let idle = pb::CreateRequest {
            idle: Some(pb::Idle {
                timeout_secs: 1,
                policy: pb::IdlePolicy::Unspecified.into(),
            }),
            ..pb::CreateRequest::default()
        };
        let status = raw.create(idle).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");

        stop.send(()).unwrap();
        server.await.unwrap().unwrap();
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
