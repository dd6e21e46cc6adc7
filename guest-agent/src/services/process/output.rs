//! Following a running program: its output chunks, then its exit.
//!
//! [`pump`] owns the program's stdout and stderr pipes and its exit
//! receiver from the reaper, and feeds the response channel in three phases:
//!
//! 1. Running: read both pipes concurrently, sending each chunk (up to
//!    [`CHUNK`] bytes) as it arrives, until the reaper reports the exit.
//! 2. Exited: keep reading until both pipes reach EOF, but for at most
//!    [`DRAIN_AFTER_EXIT`]: a background grandchild that inherited the
//!    pipes (`sh -c 'sleep 30 & echo done'`) must not hold the stream open.
//! 3. Final drain: read whatever is still buffered in a pipe with plain
//!    non-blocking reads until it is empty (at most [`FINAL_DRAIN_LIMIT`]).
//!    Everything the program wrote before it exited is in the pipe buffer
//!    by then, so no byte it wrote is lost whatever the timing.
//!
//! Then `exited` is sent and the stream ends. The channel is bounded, so a
//! slow client slows the reads and, through the full pipe, the program. If
//! the client goes away, output is read and dropped so the program still
//! runs to completion and is reaped.

use std::fs::File;
use std::io::Read;
use std::time::Duration;

use airlock_proto::v1::{exited, process_event, Exited, ProcessEvent};
use bytes::Bytes;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe::Receiver;
use tokio::sync::{mpsc, oneshot};
use tokio::time::{sleep_until, Instant};
use tonic::Status;

use super::ProcessError;
use crate::reaper::Exit;

/// The largest chunk sent in one event.
pub const CHUNK: usize = 64 * 1024;

/// How long to keep reading after the exit before giving up on EOF.
pub const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(250);

/// The most the final drain reads from one pipe; bounds the work when a
/// grandchild keeps writing.
pub const FINAL_DRAIN_LIMIT: usize = 4 * 1024 * 1024;

/// Events as the response stream carries them.
pub type EventSender = mpsc::Sender<Result<ProcessEvent, Status>>;

#[derive(Debug, Clone, Copy)]
enum Stream {
    Stdout,
    Stderr,
}

/// One output pipe; `rx` is `None` once it reached EOF or failed.
#[derive(Debug)]
struct Pipe {
    stream: Stream,
    rx: Option<Receiver>,
    buf: Vec<u8>,
}

/// The response channel, remembering whether the client still listens.
#[derive(Debug)]
struct Sink {
    pid: u32,
    tx: EventSender,
    client_gone: bool,
}

/// Streams the program's output and exit into `tx`, then returns.
pub async fn pump(
    pid: u32,
    stdout: Receiver,
    stderr: Receiver,
    mut exit_rx: oneshot::Receiver<Exit>,
    tx: EventSender,
) {
    let mut out = Pipe::new(Stream::Stdout, stdout);
    let mut err = Pipe::new(Stream::Stderr, stderr);
    let mut sink = Sink {
        pid,
        tx,
        client_gone: false,
    };

    let exit = loop {
        tokio::select! {
            r = out.read() => out.handle(r, &mut sink).await,
            r = err.read() => err.handle(r, &mut sink).await,
            exit = &mut exit_rx => break exit,
        }
    };

    let deadline = Instant::now() + DRAIN_AFTER_EXIT;
    while out.is_open() || err.is_open() {
        tokio::select! {
            biased;
            () = sleep_until(deadline) => {
                tracing::debug!(pid, "output still open after exit; a descendant holds it");
                break;
            }
            r = out.read() => out.handle(r, &mut sink).await,
            r = err.read() => err.handle(r, &mut sink).await,
        }
    }
    out.drain_now(&mut sink).await;
    err.drain_now(&mut sink).await;

    match exit {
        Ok(exit) => {
            tracing::info!(pid, ?exit, "process exited");
            sink.send(Ok(exited_event(exit))).await;
        }
        Err(_) => {
            let e = ProcessError::Lost { pid };
            tracing::error!(pid, error = %e, "no exit status");
            sink.send(Err(e.into())).await;
        }
    }
}

impl Pipe {
    fn new(stream: Stream, rx: Receiver) -> Self {
        Self {
            stream,
            rx: Some(rx),
            buf: vec![0; CHUNK],
        }
    }

    fn is_open(&self) -> bool {
        self.rx.is_some()
    }

    /// Reads one chunk; never completes once the pipe is closed. Cancel-safe.
    async fn read(&mut self) -> std::io::Result<usize> {
        match &mut self.rx {
            Some(rx) => rx.read(&mut self.buf).await,
            None => std::future::pending().await,
        }
    }

    /// Acts on a read: send the chunk, or close the pipe on EOF or error.
    async fn handle(&mut self, read: std::io::Result<usize>, sink: &mut Sink) {
        match read {
            Ok(0) => self.rx = None,
            Ok(n) => {
                let chunk = Bytes::copy_from_slice(&self.buf[..n]);
                sink.send(Ok(self.event(chunk))).await;
            }
            Err(e) => {
                tracing::warn!(pid = sink.pid, stream = ?self.stream, error = %e, "output read failed");
                self.rx = None;
            }
        }
    }

    /// Sends what the pipe holds right now, with real non-blocking reads
    /// (not the reactor's possibly stale readiness), then closes it.
    async fn drain_now(&mut self, sink: &mut Sink) {
        let Some(rx) = self.rx.take() else {
            return;
        };
        let mut file = match rx.into_nonblocking_fd() {
            Ok(fd) => File::from(fd),
            Err(e) => {
                tracing::warn!(pid = sink.pid, error = %e, "cannot drain output");
                return;
            }
        };
        let mut total = 0;
        while total < FINAL_DRAIN_LIMIT {
            match file.read(&mut self.buf) {
                Ok(0) => break,
                Ok(n) => {
                    total += n;
                    let chunk = Bytes::copy_from_slice(&self.buf[..n]);
                    sink.send(Ok(self.event(chunk))).await;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    tracing::warn!(pid = sink.pid, error = %e, "output drain failed");
                    break;
                }
            }
        }
    }

    fn event(&self, chunk: Bytes) -> ProcessEvent {
        let event = match self.stream {
            Stream::Stdout => process_event::Event::Stdout(chunk),
            Stream::Stderr => process_event::Event::Stderr(chunk),
        };
        ProcessEvent { event: Some(event) }
    }
}

impl Sink {
    /// Sends an event, waiting for room (backpressure). Once the client is
    /// gone, events are dropped.
    async fn send(&mut self, event: Result<ProcessEvent, Status>) {
        if self.client_gone {
            return;
        }
        if self.tx.send(event).await.is_err() {
            tracing::debug!(
                pid = self.pid,
                "client went away; output is discarded until exit"
            );
            self.client_gone = true;
        }
    }
}

fn exited_event(exit: Exit) -> ProcessEvent {
    let status = match exit {
        Exit::Code(code) => exited::Status::Code(code),
        Exit::Signal(signal) => exited::Status::Signal(signal),
    };
    ProcessEvent {
        event: Some(process_event::Event::Exited(Exited {
            status: Some(status),
        })),
    }
}
