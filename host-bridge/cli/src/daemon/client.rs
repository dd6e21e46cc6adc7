//! The client's side: connect to the daemon (starting it when nobody
//! answers), send a request, read the answer; for an exec, an
//! [`ExecStream`] of the program's events with a way to send it input.

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;
use tokio::sync::mpsc;

use super::protocol::{read_frame, write_frame, ExecRequest, Input, Request, Response};
use super::DaemonError;
use airlock::{state_dir, Event};

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

/// One connection to the daemon.
#[derive(Debug)]
pub struct Connection {
    reader: OwnedReadHalf,
    writer: OwnedWriteHalf,
}

impl Connection {
    /// Connects to a running daemon.
    pub async fn connect(socket: &Path) -> Result<Connection, DaemonError> {
        let stream = UnixStream::connect(socket)
            .await
            .map_err(|source| DaemonError::Connect {
                socket: socket.to_owned(),
                source,
            })?;
        let (reader, writer) = stream.into_split();
        Ok(Connection { reader, writer })
    }

    /// Connects, starting a daemon first when none answers on `socket`:
    /// `program -v serve --socket SOCKET` in its own process group, its
    /// output appended to `daemon.log` beside the socket. Waits up to
    /// [`START_TIMEOUT`] for it to listen.
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
            if let Ok(connection) = Connection::connect(socket).await {
                return Ok(connection);
            }
            // A daemon that exited at once (say, it lost a race with
            // another one) gets one more look, then its log is the answer.
            let exited = matches!(child.try_wait(), Ok(Some(_)));
            if exited || began.elapsed() >= START_TIMEOUT {
                tokio::time::sleep(pause).await;
                return Connection::connect(socket)
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

    /// Sends one frame.
    pub async fn send(&mut self, message: &impl Serialize) -> Result<(), DaemonError> {
        write_frame(&mut self.writer, message).await
    }

    /// Reads the daemon's next frame; a hang-up is [`DaemonError::Closed`].
    pub async fn recv(&mut self) -> Result<Response, DaemonError> {
        read_frame(&mut self.reader)
            .await?
            .ok_or(DaemonError::Closed)
    }

    /// Sends `request` and reads its one answer; [`Response::Error`] is
    /// [`DaemonError::Remote`].
    pub async fn call(mut self, request: &Request) -> Result<Response, DaemonError> {
        self.send(request).await?;
        match self.recv().await? {
            Response::Error { message } => Err(DaemonError::Remote(message)),
            response => Ok(response),
        }
    }

    /// Sends an exec `request` and waits for the program to start; then
    /// its events come from, and its input goes to, the [`ExecStream`].
    pub async fn exec(mut self, request: &ExecRequest) -> Result<ExecStream, DaemonError> {
        self.send(&Request::Exec(request.clone())).await?;
        match self.recv().await? {
            Response::Started { pid } => tracing::debug!(pid, "exec started"),
            Response::Error { message } => return Err(DaemonError::Remote(message)),
            other => return Err(DaemonError::Unexpected(format!("{other:?}"))),
        }
        let Connection { reader, writer } = self;
        let (frames_tx, frames) = mpsc::channel(EXEC_QUEUE);
        tokio::spawn(read_frames(reader, frames_tx));
        let (inputs, pending) = mpsc::channel(EXEC_QUEUE);
        tokio::spawn(write_inputs(writer, pending));
        Ok(ExecStream { frames, inputs })
    }
}

/// How many frames may wait on either side of an [`ExecStream`].
const EXEC_QUEUE: usize = 4;

/// The client's end of a running exec. Frames are read by a task of
/// their own, so [`ExecStream::next_event`] is cancel-safe (a frame is
/// never half read); another task writes the input frames and holds the
/// connection open until the client exits (a hang-up kills the program).
#[derive(Debug)]
pub struct ExecStream {
    frames: mpsc::Receiver<Result<Option<Response>, DaemonError>>,
    inputs: mpsc::Sender<Input>,
}

impl ExecStream {
    /// The program's next event; its exit is the last. A hang-up before
    /// it is [`DaemonError::Closed`].
    pub async fn next_event(&mut self) -> Result<Event, DaemonError> {
        let response = match self.frames.recv().await {
            Some(Ok(Some(response))) => response,
            Some(Ok(None)) | None => return Err(DaemonError::Closed),
            Some(Err(error)) => return Err(error),
        };
        match response {
            Response::Stdout { data } => Ok(Event::Stdout(data.into())),
            Response::Stderr { data } => Ok(Event::Stderr(data.into())),
            Response::Dropped { bytes } => Ok(Event::Dropped(bytes)),
            Response::Exited(report) => report
                .exit()
                .map(Event::Exited)
                .ok_or(DaemonError::ExitWithoutStatus),
            Response::Error { message } => Err(DaemonError::Remote(message)),
            other => Err(DaemonError::Unexpected(format!("{other:?}"))),
        }
    }

    /// Where to send input frames (stdin, its end, signals); sending fails
    /// once the connection is gone.
    pub fn inputs(&self) -> mpsc::Sender<Input> {
        self.inputs.clone()
    }
}

/// Hands the daemon's frames to the [`ExecStream`] until the connection
/// ends (or the stream is dropped).
async fn read_frames(
    mut reader: OwnedReadHalf,
    frames: mpsc::Sender<Result<Option<Response>, DaemonError>>,
) {
    loop {
        let frame = read_frame::<_, Response>(&mut reader).await;
        let last = !matches!(frame, Ok(Some(_)));
        if frames.send(frame).await.is_err() || last {
            return;
        }
    }
}

/// Writes every input frame; then holds the connection open until the
/// client is done.
async fn write_inputs(mut writer: OwnedWriteHalf, mut pending: mpsc::Receiver<Input>) {
    while let Some(input) = pending.recv().await {
        if let Err(error) = write_frame(&mut writer, &input).await {
            tracing::debug!(error = %airlock::error_chain(&error), "input not sent");
            break;
        }
    }
    std::future::pending::<()>().await;
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
    use tokio::net::UnixListener;

    use super::*;
    use crate::commands::ProgramOptions;
    use crate::daemon::protocol::ExitReport;

    fn request() -> ExecRequest {
        ExecRequest {
            id: "sb".into(),
            argv: vec!["cat".into()],
            options: ProgramOptions::default(),
            stdin: true,
        }
    }

    #[tokio::test]
    async fn an_exec_stream_yields_events_and_sends_input() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let daemon = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let (mut reader, mut writer) = stream.into_split();
            let got: Request = read_frame(&mut reader).await.unwrap().unwrap();
            assert_eq!(got, Request::Exec(request()));
            write_frame(&mut writer, &Response::Started { pid: 7 })
                .await
                .unwrap();
            let input: Input = read_frame(&mut reader).await.unwrap().unwrap();
            assert_eq!(input, Input::Signal { signal: 2 });
            let out = Response::Stdout {
                data: b"hi".to_vec(),
            };
            write_frame(&mut writer, &out).await.unwrap();
            let mut exit = airlock::Exit::from_status(airlock::ExitStatus::Code(3));
            exit.oom_killed = true;
            let exited = Response::Exited(ExitReport::new(&exit));
            write_frame(&mut writer, &exited).await.unwrap();
            exit
        });
        let connection = Connection::connect(&path).await.unwrap();
        let mut stream = connection.exec(&request()).await.unwrap();
        stream
            .inputs()
            .send(Input::Signal { signal: 2 })
            .await
            .unwrap();
        let Event::Stdout(data) = stream.next_event().await.unwrap() else {
            panic!("not stdout")
        };
        assert_eq!(&data[..], b"hi");
        let Event::Exited(exit) = stream.next_event().await.unwrap() else {
            panic!("not exited")
        };
        assert_eq!(exit, daemon.await.unwrap());
        let after = stream.next_event().await.unwrap_err();
        assert!(matches!(after, DaemonError::Closed), "{after}");
    }

    #[tokio::test]
    async fn a_refused_exec_is_the_daemons_message() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.sock");
        let listener = UnixListener::bind(&path).unwrap();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let _: Option<Request> = read_frame(&mut stream).await.unwrap();
            let message = "no sandbox sb".to_owned();
            write_frame(&mut stream, &Response::Error { message })
                .await
                .unwrap();
        });
        let connection = Connection::connect(&path).await.unwrap();
        let error = connection.exec(&request()).await.unwrap_err();
        assert_eq!(error.to_string(), "no sandbox sb");
    }
}
