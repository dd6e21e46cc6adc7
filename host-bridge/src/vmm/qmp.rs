//! A minimal QMP (QEMU Machine Protocol) client: JSON lines over the VM's
//! private Unix socket. Used for the VMM-level controls the agent cannot
//! provide (stopping a guest that no longer answers).

use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Interest};
use tokio::net::UnixStream;

/// Longest QMP line accepted: QEMU's answers to our commands are small.
const MAX_LINE: usize = 1 << 20;
/// How long one QMP exchange may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Errors talking to QEMU's monitor.
#[derive(Debug, thiserror::Error)]
pub enum QmpError {
    #[error("qmp i/o")]
    Io(#[from] std::io::Error),
    #[error("qmp answer is not json")]
    Json(#[from] serde_json::Error),
    #[error("qmp timed out after {0:?}")]
    Timeout(Duration),
    #[error("qmp closed the connection")]
    Closed,
    #[error("qmp line longer than {MAX_LINE} bytes")]
    LineTooLong,
    #[error("qmp command {command} failed: {message}")]
    Command { command: String, message: String },
}

/// A negotiated QMP session.
#[derive(Debug)]
pub struct Qmp {
    stream: BufReader<UnixStream>,
}

impl Qmp {
    /// Connects, reads the greeting and leaves capabilities negotiation.
    pub async fn connect(socket: &Path) -> Result<Self, QmpError> {
        let stream = tokio::time::timeout(TIMEOUT, UnixStream::connect(socket))
            .await
            .map_err(|_| QmpError::Timeout(TIMEOUT))??;
        let mut qmp = Qmp {
            stream: BufReader::new(stream),
        };
        qmp.read_message().await?;
        qmp.execute("qmp_capabilities", None).await?;
        Ok(qmp)
    }

    /// Runs one command and returns its `return` value; events are skipped.
    pub async fn execute(
        &mut self,
        command: &str,
        arguments: Option<Value>,
    ) -> Result<Value, QmpError> {
        let mut request = json!({ "execute": command });
        if let Some(arguments) = arguments {
            request["arguments"] = arguments;
        }
        let mut line = serde_json::to_vec(&request)?;
        line.push(b'\n');
        self.stream.get_mut().write_all(&line).await?;
        self.read_return(command).await
    }

    /// Hands QEMU an open file under `name` (QMP `getfd`, the descriptor
    /// passed with SCM_RIGHTS), for `fd:NAME` migration URIs: QEMU's seccomp
    /// filter forbids the `exec:` ones.
    pub async fn send_fd(&mut self, name: &str, fd: BorrowedFd<'_>) -> Result<(), QmpError> {
        use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
        let request = json!({ "execute": "getfd", "arguments": { "fdname": name } });
        let mut line = serde_json::to_vec(&request)?;
        line.push(b'\n');
        let stream = self.stream.get_ref();
        let fds = [fd.as_raw_fd()];
        let mut written = None;
        while written.is_none() {
            stream.writable().await?;
            let attempt = stream.try_io(Interest::WRITABLE, || {
                let iov = [std::io::IoSlice::new(&line)];
                let cmsg = [ControlMessage::ScmRights(&fds)];
                sendmsg::<()>(stream.as_raw_fd(), &iov, &cmsg, MsgFlags::empty(), None)
                    .map_err(std::io::Error::from)
            });
            match attempt {
                Ok(n) => written = Some(n),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e.into()),
            }
        }
        if let Some(n) = written.filter(|n| *n < line.len()) {
            // The descriptor went with the first bytes; the rest of the
            // line follows as plain bytes.
            self.stream.get_mut().write_all(&line[n..]).await?;
        }
        self.read_return("getfd").await.map(drop)
    }

    /// Reads until the answer to `command`; events are skipped.
    async fn read_return(&mut self, command: &str) -> Result<Value, QmpError> {
        loop {
            let message = self.read_message().await?;
            if let Some(value) = message.get("return") {
                return Ok(value.clone());
            }
            if let Some(error) = message.get("error") {
                let message = error
                    .get("desc")
                    .and_then(Value::as_str)
                    .unwrap_or("unknown error")
                    .to_owned();
                return Err(QmpError::Command {
                    command: command.to_owned(),
                    message,
                });
            }
            tracing::debug!(%message, "qmp event");
        }
    }

    async fn read_message(&mut self) -> Result<Value, QmpError> {
        let mut line = Vec::new();
        let read = tokio::time::timeout(TIMEOUT, async {
            let mut limited = (&mut self.stream).take(MAX_LINE as u64 + 1);
            limited.read_until(b'\n', &mut line).await
        });
        let n = read.await.map_err(|_| QmpError::Timeout(TIMEOUT))??;
        if n == 0 {
            return Err(QmpError::Closed);
        }
        if line.len() > MAX_LINE {
            return Err(QmpError::LineTooLong);
        }
        Ok(serde_json::from_slice(&line)?)
    }
}
