//! A program's stdin, fed by SendInput and StreamInput and closed by
//! CloseStdin: a pipe, or the master side of its terminal (`pty`).
//!
//! Writers queue on a fair (FIFO) async mutex around the writer, so input
//! is applied in the order the calls arrived and CloseStdin takes effect
//! after the input queued before it. A write waits while the pipe (or the
//! terminal's input queue) is full (the program reads slowly); when the
//! program exits, waiting writers give up and the pipe is closed, so a
//! grandchild that inherited it reads EOF. A terminal's input is never
//! closed: CloseStdin on it fails, and ^D is how a user says end-of-file.

use std::fmt;

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{watch, Mutex};

use super::ProcessError;

type Writer = Box<dyn AsyncWrite + Send + Unpin>;

/// The write end of a program's stdin.
pub struct StdinPipe {
    pid: u32,
    terminal: bool,
    writer: Mutex<Option<Writer>>,
    exited: watch::Sender<bool>,
}

impl fmt::Debug for StdinPipe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StdinPipe")
            .field("pid", &self.pid)
            .field("terminal", &self.terminal)
            .finish_non_exhaustive()
    }
}

impl StdinPipe {
    /// Wraps the write end of `pid`'s stdin pipe.
    pub fn new(pid: u32, writer: impl AsyncWrite + Send + Unpin + 'static) -> Self {
        Self::with_writer(pid, false, Box::new(writer))
    }

    /// Wraps the input of `pid`'s terminal.
    pub fn terminal(pid: u32, writer: impl AsyncWrite + Send + Unpin + 'static) -> Self {
        Self::with_writer(pid, true, Box::new(writer))
    }

    fn with_writer(pid: u32, terminal: bool, writer: Writer) -> Self {
        Self {
            pid,
            terminal,
            writer: Mutex::new(Some(writer)),
            exited: watch::channel(false).0,
        }
    }

    /// Writes all of `data`, after any input queued before it.
    pub async fn write(&self, data: &[u8]) -> Result<(), ProcessError> {
        let pid = self.pid;
        let mut exited = self.exited.subscribe();
        let write = async {
            let mut writer = self.writer.lock().await;
            let pipe = writer.as_mut().ok_or(ProcessError::StdinClosed(pid))?;
            pipe.write_all(data).await.map_err(|e| match e.kind() {
                std::io::ErrorKind::BrokenPipe => ProcessError::StdinGone(pid),
                // A terminal whose every slave descriptor is closed.
                _ if self.terminal && e.raw_os_error() == Some(nix::libc::EIO) => {
                    ProcessError::StdinGone(pid)
                }
                _ => ProcessError::StdinWrite { pid, source: e },
            })
        };
        tokio::select! {
            biased;
            _ = exited.wait_for(|exited| *exited) => Err(ProcessError::Exited(pid)),
            written = write => written,
        }
    }

    /// Closes stdin after the input queued before. Closing twice is fine;
    /// a terminal cannot be closed.
    pub async fn close(&self) -> Result<(), ProcessError> {
        if self.terminal {
            return Err(ProcessError::InputIsTerminal(self.pid));
        }
        let mut exited = self.exited.subscribe();
        tokio::select! {
            biased;
            _ = exited.wait_for(|exited| *exited) => Ok(()),
            mut writer = self.writer.lock() => {
                if writer.take().is_some() {
                    tracing::debug!(pid = self.pid, "stdin closed");
                }
                Ok(())
            }
        }
    }

    /// The program exited: abandon queued input and close the pipe.
    pub async fn process_exited(&self) {
        self.exited.send_replace(true);
        self.writer.lock().await.take();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn writes_arrive_in_order_then_close_gives_eof() {
        let (tx, mut rx) = tokio::net::unix::pipe::pipe().unwrap();
        let stdin = StdinPipe::new(7, tx);
        stdin.write(b"one ").await.unwrap();
        stdin.write(b"two").await.unwrap();
        stdin.close().await.unwrap();
        stdin.close().await.unwrap();
        let mut got = Vec::new();
        rx.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"one two");
        assert!(matches!(
            stdin.write(b"x").await,
            Err(ProcessError::StdinClosed(7))
        ));
    }

    #[tokio::test]
    async fn a_full_pipe_gives_up_when_the_process_exits() {
        let (tx, rx) = tokio::net::unix::pipe::pipe().unwrap();
        let stdin = std::sync::Arc::new(StdinPipe::new(8, tx));
        let writer = {
            let stdin = stdin.clone();
            tokio::spawn(async move { stdin.write(&vec![0; 4 << 20]).await })
        };
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        stdin.process_exited().await;
        assert!(matches!(
            writer.await.unwrap(),
            Err(ProcessError::Exited(8))
        ));
        assert!(matches!(
            stdin.write(b"x").await,
            Err(ProcessError::Exited(8))
        ));
        drop(rx);
    }

    #[tokio::test]
    async fn a_reader_gone_is_reported() {
        let (tx, rx) = tokio::net::unix::pipe::pipe().unwrap();
        drop(rx);
        let stdin = StdinPipe::new(9, tx);
        assert!(matches!(
            stdin.write(b"x").await,
            Err(ProcessError::StdinGone(9))
        ));
    }
}
