//! The client's side: connect to the daemon over gRPC (starting it when
//! nobody answers) and call it; for an exec, an [`ExecStream`] of the
//! program's events with a way to send it input.

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use airlock_proto::daemon::v1 as pb;
use airlock_proto::daemon::v1::sandboxes_client::SandboxesClient;
use airlock_proto::v1::{process_event, CodeEvent, ProcessEvent};
use futures::StreamExt;
use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};
use tonic::{Status, Streaming};

use super::wire::{self, MAX_MESSAGE_BYTES};
use super::DaemonError;
use airlock::{state_dir, Bytes, Event};

/// The socket's file name under the state directories' parent.
pub const SOCKET_NAME: &str = "daemon.sock";
/// The log of a daemon started on demand, next to the socket.
pub const LOG_NAME: &str = "daemon.log";
/// How long a client waits for a daemon it started.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);

/// `<state base>/daemon.sock` (see [`state_dir::default_base`], which
/// honours `AIRLOCK_STATE_DIR`).
pub fn default_socket() -> PathBuf {
    state_dir::default_base().join(SOCKET_NAME)
}

/// A status as the client reports it: the daemon's message when the
/// daemon gave a reason, else what the call's failure was.
fn from_status(status: Status) -> DaemonError {
    match wire::reason(&status) {
        Some(_) => DaemonError::Remote(status.message().to_owned()),
        None => DaemonError::Call(Box::new(status)),
    }
}

/// A connection to the daemon (a gRPC channel on its socket).
#[derive(Debug, Clone)]
pub struct Connection {
    client: SandboxesClient<Channel>,
}

impl Connection {
    /// Connects to a running daemon.
    pub async fn connect(socket: &Path) -> Result<Connection, DaemonError> {
        let first = UnixStream::connect(socket)
            .await
            .map_err(|source| DaemonError::Connect {
                socket: socket.to_owned(),
                source,
            })?;
        // The first stream is the one just made; a reconnect makes another.
        let first = Arc::new(Mutex::new(Some(first)));
        let path = socket.to_owned();
        let channel = Endpoint::from_static("http://airlock-daemon")
            .connect_with_connector(tower::service_fn(move |_| {
                let first = first
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .take();
                let path = path.clone();
                async move {
                    let stream = match first {
                        Some(stream) => stream,
                        None => UnixStream::connect(&path).await?,
                    };
                    Ok::<_, std::io::Error>(TokioIo::new(stream))
                }
            }))
            .await
            .map_err(|source| DaemonError::Transport {
                socket: socket.to_owned(),
                source,
            })?;
        let client = SandboxesClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        Ok(Connection { client })
    }

    /// Connects, starting a daemon first when none answers on `socket`:
    /// `program -v serve --socket SOCKET` in its own process group, its
    /// output appended to `daemon.log` beside the socket. Waits up to
    /// [`START_TIMEOUT`] for it to answer `Ping`.
    pub async fn connect_or_start(
        socket: &Path,
        program: &Path,
    ) -> Result<Connection, DaemonError> {
        match Connection::connect(socket).await {
            Ok(connection) => return Ok(connection),
            Err(DaemonError::Connect { source, .. })
                if matches!(
                    source.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
                ) => {}
            Err(error) => return Err(error),
        }
        let log = socket.with_file_name(LOG_NAME);
        let mut child = spawn_daemon(socket, program, &log)?;
        tracing::info!(pid = child.id(), socket = %socket.display(), "started the daemon");
        let began = Instant::now();
        let mut pause = Duration::from_millis(10);
        loop {
            if let Ok(connection) = Connection::answering(socket).await {
                return Ok(connection);
            }
            // A daemon that exited at once (say, it lost a race with
            // another one) gets one more look, then its log is the answer.
            let exited = matches!(child.try_wait(), Ok(Some(_)));
            if exited || began.elapsed() >= START_TIMEOUT {
                tokio::time::sleep(pause).await;
                return Connection::answering(socket)
                    .await
                    .map_err(|_| DaemonError::NotStarted {
                        socket: socket.to_owned(),
                        log,
                        waited: began.elapsed(),
                    });
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }

    /// A connection to a daemon that answers `Ping`.
    async fn answering(socket: &Path) -> Result<Connection, DaemonError> {
        let mut connection = Connection::connect(socket).await?;
        connection.ping().await?;
        Ok(connection)
    }

    /// The generated client, for calls this type does not wrap.
    #[cfg(test)]
    pub fn raw(&self) -> SandboxesClient<Channel> {
        self.client.clone()
    }

    /// The daemon's process id.
    pub async fn ping(&mut self) -> Result<u32, DaemonError> {
        let response = self
            .client
            .ping(pb::PingRequest {})
            .await
            .map_err(from_status)?;
        Ok(response.into_inner().pid)
    }

    /// Starts a sandbox; returns its id.
    pub async fn create(&mut self, request: pb::CreateRequest) -> Result<String, DaemonError> {
        let response = self.client.create(request).await.map_err(from_status)?;
        Ok(response.into_inner().id)
    }

    /// The daemon's sandboxes.
    pub async fn list(&mut self) -> Result<Vec<pb::SandboxInfo>, DaemonError> {
        let response = self
            .client
            .list(pb::ListRequest {})
            .await
            .map_err(from_status)?;
        Ok(response.into_inner().sandboxes)
    }

    /// Copies the host path `host` (absolute) into sandbox `id` at `guest`.
    pub async fn copy_in(
        &mut self,
        id: &str,
        host: &Path,
        guest: &Path,
    ) -> Result<(), DaemonError> {
        let request = pb::CopyInRequest {
            id: id.to_owned(),
            host_path: host.to_string_lossy().into_owned(),
            guest_path: guest.to_string_lossy().into_owned(),
        };
        self.client.copy_in(request).await.map_err(from_status)?;
        Ok(())
    }

    /// Copies `guest` out of sandbox `id` to the host path `host` (absolute).
    pub async fn copy_out(
        &mut self,
        id: &str,
        guest: &Path,
        host: &Path,
    ) -> Result<(), DaemonError> {
        let request = pb::CopyOutRequest {
            id: id.to_owned(),
            guest_path: guest.to_string_lossy().into_owned(),
            host_path: host.to_string_lossy().into_owned(),
        };
        self.client.copy_out(request).await.map_err(from_status)?;
        Ok(())
    }

    /// Pauses `id`; `to_disk` saves it to disk and ends its VM process.
    pub async fn pause(&mut self, id: &str, to_disk: bool) -> Result<(), DaemonError> {
        let id = id.to_owned();
        self.client
            .pause(pb::PauseRequest { id, to_disk })
            .await
            .map_err(from_status)?;
        Ok(())
    }

    /// Forks `id` into `count` new sandboxes; returns their ids.
    pub async fn fork(&mut self, id: &str, count: u32) -> Result<Vec<String>, DaemonError> {
        let request = pb::ForkRequest {
            id: id.to_owned(),
            count,
        };
        let answer = self.client.fork(request).await.map_err(from_status)?;
        Ok(answer.into_inner().ids)
    }

    pub async fn resume(&mut self, id: &str) -> Result<(), DaemonError> {
        let id = id.to_owned();
        self.client
            .resume(pb::ResumeRequest { id })
            .await
            .map_err(from_status)?;
        Ok(())
    }

    pub async fn kill(&mut self, id: &str) -> Result<(), DaemonError> {
        let id = id.to_owned();
        self.client
            .kill(pb::KillRequest { id })
            .await
            .map_err(from_status)?;
        Ok(())
    }

    /// The rules of `id`'s network policy.
    pub async fn network_policy(&mut self, id: &str) -> Result<Vec<String>, DaemonError> {
        let request = pb::NetworkPolicyRequest { id: id.to_owned() };
        let response = self
            .client
            .network_policy(request)
            .await
            .map_err(from_status)?;
        Ok(response.into_inner().rules)
    }

    /// Removes the `deny` rules from `id`'s network policy, then adds the
    /// `allow` rules; returns the rules in force.
    pub async fn change_network_policy(
        &mut self,
        id: &str,
        allow: Vec<String>,
        deny: Vec<String>,
    ) -> Result<Vec<String>, DaemonError> {
        let request = pb::ChangeNetworkPolicyRequest {
            id: id.to_owned(),
            allow,
            deny,
        };
        let response = self
            .client
            .change_network_policy(request)
            .await
            .map_err(from_status)?;
        Ok(response.into_inner().rules)
    }

    /// `id`'s network audit, oldest first.
    pub async fn network_audit(
        &mut self,
        id: &str,
    ) -> Result<Vec<pb::NetworkAuditRecord>, DaemonError> {
        let request = pb::NetworkAuditRequest { id: id.to_owned() };
        let response = self
            .client
            .network_audit(request)
            .await
            .map_err(from_status)?;
        Ok(response.into_inner().records)
    }

    /// Runs a cell; its events come from the stream (dropping it before
    /// `done` interrupts the cell).
    pub async fn run_code(
        &mut self,
        request: pb::RunCodeRequest,
    ) -> Result<Streaming<CodeEvent>, DaemonError> {
        let response = self.client.run_code(request).await.map_err(from_status)?;
        Ok(response.into_inner())
    }

    /// Starts a program and waits for it to start; then its events come
    /// from, and its input goes to, the [`ExecStream`].
    pub async fn exec(&mut self, start: pb::ExecStart) -> Result<ExecStream, DaemonError> {
        let (inputs, pending) = mpsc::channel(EXEC_QUEUE);
        let first = pb::ExecRequest {
            input: Some(pb::exec_request::Input::Start(start)),
        };
        inputs.send(first).await.map_err(|_| DaemonError::Closed)?;
        let response = self
            .client
            .exec(ReceiverStream::new(pending))
            .await
            .map_err(from_status)?;
        let mut events = response.into_inner();
        match events.next().await {
            Some(Ok(ProcessEvent {
                event: Some(process_event::Event::Started(started)),
                ..
            })) => tracing::debug!(pid = started.pid, "exec started"),
            Some(Ok(other)) => return Err(DaemonError::Unexpected(format!("{other:?}"))),
            Some(Err(status)) => return Err(from_status(status)),
            None => return Err(DaemonError::Closed),
        }
        Ok(ExecStream {
            events,
            inputs: ExecInputs(inputs),
        })
    }
}

/// How many messages may wait to go to the daemon.
const EXEC_QUEUE: usize = 4;

/// The client's end of a running exec. Holding it keeps the call open;
/// dropping it before the exit (the client hanging up) kills the program.
#[derive(Debug)]
pub struct ExecStream {
    events: Streaming<ProcessEvent>,
    inputs: ExecInputs,
}

impl ExecStream {
    /// The program's next event; its exit is the last. Cancel-safe. A
    /// hang-up before the exit is [`DaemonError::Closed`].
    pub async fn next_event(&mut self) -> Result<Event, DaemonError> {
        loop {
            let message = match self.events.next().await {
                Some(Ok(message)) => message,
                Some(Err(status)) => {
                    return Err(match wire::reason(&status) {
                        Some(_) => DaemonError::Remote(status.message().to_owned()),
                        None => DaemonError::Closed,
                    })
                }
                None => return Err(DaemonError::Closed),
            };
            return match message.event {
                Some(process_event::Event::Stdout(data)) => Ok(Event::Stdout(data)),
                Some(process_event::Event::Stderr(data)) => Ok(Event::Stderr(data)),
                Some(process_event::Event::Dropped(dropped)) => Ok(Event::Dropped(dropped.bytes)),
                Some(process_event::Event::Exited(exited)) => wire::exit(&exited)
                    .map(Event::Exited)
                    .ok_or(DaemonError::ExitWithoutStatus),
                Some(process_event::Event::Started(_)) | None => continue,
            };
        }
    }

    /// Where to send the program's input; sending fails once the call is
    /// over.
    pub fn inputs(&self) -> ExecInputs {
        self.inputs.clone()
    }
}

/// Sends a running exec's input (stdin, its end, signals).
#[derive(Debug, Clone)]
pub struct ExecInputs(mpsc::Sender<pb::ExecRequest>);

/// The exec's call is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallOver;

impl ExecInputs {
    async fn send(&self, input: pb::exec_request::Input) -> Result<(), CallOver> {
        let request = pb::ExecRequest { input: Some(input) };
        self.0.send(request).await.map_err(|_| CallOver)
    }

    /// Bytes for the program's stdin (split into chunks of at most 64 KiB).
    pub async fn stdin(&self, data: Bytes) -> Result<(), CallOver> {
        for chunk in data.chunks(wire::DATA_CHUNK) {
            let chunk = data.slice_ref(chunk);
            self.send(pb::exec_request::Input::Stdin(chunk)).await?;
        }
        Ok(())
    }

    /// Closes the program's stdin after what was sent.
    pub async fn close_stdin(&self) -> Result<(), CallOver> {
        self.send(pb::exec_request::Input::CloseStdin(pb::CloseStdin {}))
            .await
    }

    /// Sends signal number `signal` to the program's process tree.
    pub async fn signal(&self, signal: i32) -> Result<(), CallOver> {
        self.send(pb::exec_request::Input::Signal(signal)).await
    }
}

fn spawn_daemon(
    socket: &Path,
    program: &Path,
    log: &Path,
) -> Result<std::process::Child, DaemonError> {
    let failed = |source| DaemonError::Spawn {
        program: program.to_owned(),
        source,
    };
    if let Some(parent) = log.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(failed)?;
    }
    let log_file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(log)
        .map_err(failed)?;
    let log_err = log_file.try_clone().map_err(failed)?;
    std::process::Command::new(program)
        .arg("--verbose")
        .arg("serve")
        .arg("--socket")
        .arg(socket)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(log_file)
        .stderr(log_err)
        .spawn()
        .map_err(failed)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::pin::Pin;

    use airlock_proto::daemon::v1::sandboxes_server::{self, SandboxesServer};
    use airlock_proto::v1::{Exited, Started};
    use futures::Stream;
    use tokio::net::UnixListener;
    use tokio_stream::wrappers::UnixListenerStream;
    use tonic::{Request, Response};

    use super::*;

    /// A daemon whose Exec checks its input and plays a fixed program:
    /// started, "hi" on stdout, exit 3 (OOM-killed). Everything else is
    /// unimplemented.
    struct Fake;

    type Events = Pin<Box<dyn Stream<Item = Result<ProcessEvent, Status>> + Send>>;

    fn event(event: process_event::Event) -> Result<ProcessEvent, Status> {
        Ok(ProcessEvent {
            event: Some(event),
            offset: 0,
        })
    }

    #[tonic::async_trait]
    impl sandboxes_server::Sandboxes for Fake {
        async fn ping(
            &self,
            _: Request<pb::PingRequest>,
        ) -> Result<Response<pb::PingResponse>, Status> {
            Ok(Response::new(pb::PingResponse { pid: 1 }))
        }
        async fn create(
            &self,
            _: Request<pb::CreateRequest>,
        ) -> Result<Response<pb::CreateResponse>, Status> {
            Err(Status::unimplemented(""))
        }
        async fn list(
            &self,
            _: Request<pb::ListRequest>,
        ) -> Result<Response<pb::ListResponse>, Status> {
            Err(Status::unimplemented(""))
        }
        type ExecStream = Events;
        async fn exec(
            &self,
            request: Request<Streaming<pb::ExecRequest>>,
        ) -> Result<Response<Events>, Status> {
            use pb::exec_request::Input;
            let mut inputs = request.into_inner();
            let Some(Input::Start(start)) = inputs.message().await?.and_then(|m| m.input) else {
                return Err(Status::invalid_argument("no start"));
            };
            assert_eq!(start.argv, ["cat"]);
            if start.id != "sb" {
                return Err(wire::status(
                    tonic::Code::NotFound,
                    pb::ErrorReason::NoSuchSandbox,
                    format!("no sandbox {}", start.id),
                ));
            }
            let events = play(inputs);
            Ok(Response::new(events))
        }
        async fn copy_in(
            &self,
            _: Request<pb::CopyInRequest>,
        ) -> Result<Response<pb::CopyInResponse>, Status> {
            Err(Status::unimplemented(""))
        }
        async fn copy_out(
            &self,
            _: Request<pb::CopyOutRequest>,
        ) -> Result<Response<pb::CopyOutResponse>, Status> {
            Err(Status::unimplemented(""))
        }
        async fn pause(
            &self,
            _: Request<pb::PauseRequest>,
        ) -> Result<Response<pb::PauseResponse>, Status> {
            Err(Status::unimplemented("no pause here"))
        }
        async fn resume(
            &self,
            _: Request<pb::ResumeRequest>,
        ) -> Result<Response<pb::ResumeResponse>, Status> {
            Err(Status::unimplemented(""))
        }
        async fn kill(
            &self,
            _: Request<pb::KillRequest>,
        ) -> Result<Response<pb::KillResponse>, Status> {
            Err(Status::unimplemented(""))
        }
        async fn fork(
            &self,
            _: Request<pb::ForkRequest>,
        ) -> Result<Response<pb::ForkResponse>, Status> {
            Err(Status::unimplemented(""))
        }
        async fn network_policy(
            &self,
            _: Request<pb::NetworkPolicyRequest>,
        ) -> Result<Response<pb::NetworkPolicyResponse>, Status> {
            Err(Status::unimplemented(""))
        }
        async fn change_network_policy(
            &self,
            _: Request<pb::ChangeNetworkPolicyRequest>,
        ) -> Result<Response<pb::NetworkPolicyResponse>, Status> {
            Err(Status::unimplemented(""))
        }
        async fn network_audit(
            &self,
            _: Request<pb::NetworkAuditRequest>,
        ) -> Result<Response<pb::NetworkAuditResponse>, Status> {
            Err(Status::unimplemented(""))
        }
        type RunCodeStream = Pin<Box<dyn Stream<Item = Result<CodeEvent, Status>> + Send>>;
        async fn run_code(
            &self,
            request: Request<pb::RunCodeRequest>,
        ) -> Result<Response<Self::RunCodeStream>, Status> {
            let request = request.into_inner();
            assert_eq!(
                (request.code.as_str(), request.language.as_str()),
                ("1 + 1", "python")
            );
            let result = airlock::MimeBundle::from_items([(
                "text/plain".to_owned(),
                Bytes::from_static(b"2"),
            )]);
            let done = airlock::CellDone {
                status: airlock::CellStatus::Ok,
                execution_count: 1,
                timed_out: false,
                context_restarted: false,
                duration: Duration::from_millis(5),
            };
            let events: Vec<Result<CodeEvent, Status>> = [
                airlock::CellEvent::Stdout(Bytes::from_static(b"out")),
                airlock::CellEvent::Result(result),
                airlock::CellEvent::Done(done),
            ]
            .into_iter()
            .flat_map(wire::cell_messages)
            .map(Ok)
            .collect();
            Ok(Response::new(Box::pin(futures::stream::iter(events))))
        }
    }

    /// Started; then, once the client sent stdin "in", SIGINT and the end
    /// of stdin, "hi" and the exit.
    fn play(mut inputs: Streaming<pb::ExecRequest>) -> Events {
        use pb::exec_request::Input;
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(async move {
            let started = Started {
                pid: 7,
                ..Started::default()
            };
            tx.send(event(process_event::Event::Started(started)))
                .await
                .unwrap();
            let mut got = Vec::new();
            for _ in 0..3 {
                got.push(inputs.message().await.unwrap().unwrap().input.unwrap());
            }
            assert_eq!(
                got,
                [
                    Input::Stdin(Bytes::from_static(b"in")),
                    Input::Signal(2),
                    Input::CloseStdin(pb::CloseStdin {})
                ]
            );
            let out = process_event::Event::Stdout(Bytes::from_static(b"hi"));
            tx.send(event(out)).await.unwrap();
            let mut exit = airlock::Exit::from_status(airlock::ExitStatus::Code(3));
            exit.oom_killed = true;
            let exited: Exited = wire::exited(&exit);
            tx.send(event(process_event::Event::Exited(exited)))
                .await
                .unwrap();
        });
        Box::pin(ReceiverStream::new(rx))
    }

    async fn fake_daemon(path: &Path) {
        let listener = UnixListener::bind(path).unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(SandboxesServer::new(Fake))
                .serve_with_incoming(UnixListenerStream::new(listener)),
        );
    }

    fn start(id: &str) -> pb::ExecStart {
        pb::ExecStart {
            id: id.into(),
            argv: vec!["cat".into()],
            options: Some(pb::ProgramOptions::default()),
            stdin: true,
        }
    }

    #[tokio::test]
    async fn an_exec_stream_yields_events_and_sends_input() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.sock");
        fake_daemon(&path).await;
        let mut connection = Connection::connect(&path).await.unwrap();
        assert_eq!(connection.ping().await.unwrap(), 1);
        let mut stream = connection.exec(start("sb")).await.unwrap();
        let inputs = stream.inputs();
        inputs.stdin(Bytes::from_static(b"in")).await.unwrap();
        inputs.signal(2).await.unwrap();
        inputs.close_stdin().await.unwrap();
        let Event::Stdout(data) = stream.next_event().await.unwrap() else {
            panic!("not stdout")
        };
        assert_eq!(&data[..], b"hi");
        let Event::Exited(exit) = stream.next_event().await.unwrap() else {
            panic!("not exited")
        };
        assert_eq!(exit.status, airlock::ExitStatus::Code(3));
        assert!(exit.oom_killed);
        let after = stream.next_event().await.unwrap_err();
        assert!(matches!(after, DaemonError::Closed), "{after}");
    }

    #[tokio::test]
    async fn a_cell_streams_its_events() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.sock");
        fake_daemon(&path).await;
        let mut connection = Connection::connect(&path).await.unwrap();
        let request = pb::RunCodeRequest {
            id: "sb".into(),
            language: "python".into(),
            code: "1 + 1".into(),
            ..Default::default()
        };
        let mut stream = connection.run_code(request).await.unwrap();
        let mut kinds = Vec::new();
        while let Some(message) = stream.message().await.unwrap() {
            match airlock::CellEvent::from_proto(message).unwrap() {
                airlock::CellEvent::Stdout(data) => kinds.push(format!("out {data:?}")),
                airlock::CellEvent::Result(result) => {
                    kinds.push(format!("result {}", result.text().unwrap()))
                }
                airlock::CellEvent::Done(done) => kinds.push(format!("done {:?}", done.status)),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(kinds, ["out b\"out\"", "result 2", "done Ok"]);
    }

    #[tokio::test]
    async fn refusals_are_the_daemons_message_or_the_calls_failure() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.sock");
        fake_daemon(&path).await;
        let mut connection = Connection::connect(&path).await.unwrap();
        let error = connection.exec(start("other")).await.unwrap_err();
        assert_eq!(error.to_string(), "no sandbox other");
        // No reason: not the daemon's refusal.
        let error = connection.pause("sb", false).await.unwrap_err();
        assert!(matches!(error, DaemonError::Call(_)), "{error}");
        assert!(error.to_string().contains("no pause here"), "{error}");
    }

    #[tokio::test]
    async fn nobody_on_the_socket_is_a_connect_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.sock");
        let error = Connection::connect(&path).await.unwrap_err();
        let DaemonError::Connect { source, .. } = error else {
            panic!("{error}")
        };
        assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
    }
}
