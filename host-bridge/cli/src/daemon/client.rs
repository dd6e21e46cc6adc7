//! The client's side: connect to the daemon (starting it when nobody
//! answers), send a request, read the answer.

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;

use super::protocol::{read_frame, write_frame, Request, Response};
use super::DaemonError;
use airlock::state_dir;

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

    /// The two halves, to read and write from different tasks.
    pub fn into_split(self) -> (OwnedReadHalf, OwnedWriteHalf) {
        (self.reader, self.writer)
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
