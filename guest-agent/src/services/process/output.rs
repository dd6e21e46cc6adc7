//! Following a running program: its output, its deadline and its exit.
//!
//! [`follow`] owns the program's output ([`Outputs`]: its stdout and
//! stderr pipes, or the master side of its terminal, whose output is all
//! `stdout`) and runs two tasks. The exit watcher waits for the reaper's report; if the request
//! had a deadline and it passes first, it kills the whole tree and marks
//! the exit `timed_out`. It then closes the program's stdin, reads the OOM
//! count from its cgroup, and hands over an [`ExitReport`].
//!
//! The reader (this task) feeds the process table entry in three phases:
//!
//! 1. Running: read both pipes concurrently, delivering each chunk (up to
//!    [`CHUNK`] bytes) as it arrives, until the exit report comes.
//! 2. Exited: keep reading until both pipes reach EOF (a terminal: `EIO`,
//!    no slave open), but for at most [`DRAIN_AFTER_EXIT`]: a background
//!    grandchild that inherited the pipes (`sh -c 'sleep 30 & echo done'`)
//!    must not hold the end back.
//! 3. Final drain: read whatever is still buffered in a pipe with plain
//!    non-blocking reads until it is empty (at most [`FINAL_DRAIN_LIMIT`]).
//!    Everything the program wrote before it exited is in the pipe buffer
//!    by then, so no byte it wrote is lost whatever the timing. (A
//!    terminal hands out what its slave side wrote before `EIO`, so phase 2
//!    loses nothing either, unless a descendant keeps the terminal open.)
//!
//! A transient program (`StartRequest.transient`) has what is left of its
//! tree killed when its exit report comes, and is taken out of the table
//! just before its end is recorded.
//!
//! Then the end is recorded on the entry. Delivery waits while an attached
//! client is behind (see `entry`), which stops the reads and, through the
//! full pipe, the program. With no client attached it never waits.

use std::fs::File;
use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe::Receiver;
use tokio::sync::oneshot;
use tokio::time::{sleep_until, Instant};

use super::buffer::{Chunk, Stream};
use super::cgroup::Cgroups;
use super::entry::{End, Entry, ExitReport};
use super::pty::Master;
use super::table::ProcessTable;
use crate::reaper::Exit;

/// The largest chunk sent in one event.
pub const CHUNK: usize = 128 * 1024;

/// How long to keep reading after the exit before giving up on EOF.
pub const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(250);

/// The most the final drain reads from one pipe; bounds the work when a
/// grandchild keeps writing.
pub const FINAL_DRAIN_LIMIT: usize = 4 * 1024 * 1024;

/// Where a program's output comes from.
#[derive(Debug)]
pub enum Outputs {
    /// Its stdout and stderr pipes.
    Pipes {
        /// stdout's read end.
        stdout: Receiver,
        /// stderr's read end.
        stderr: Receiver,
    },
    /// Its terminal: one stream, delivered as stdout.
    Terminal(Master),
}

/// A readable end of the program's output.
#[derive(Debug)]
enum Source {
    Pipe(Receiver),
    Terminal(Master),
}

/// One output stream; `rx` is `None` once it reached EOF or failed.
#[derive(Debug)]
struct Pipe {
    stream: Stream,
    rx: Option<Source>,
    buf: Vec<u8>,
}

/// What the request asked of the program's end.
#[derive(Debug, Clone, Copy, Default)]
pub struct Policy {
    /// The agent-enforced deadline, if any.
    pub timeout: Option<Duration>,
    /// Kill what is left of the tree at the exit, and forget the program
    /// once its end is recorded (`StartRequest.transient`).
    pub transient: bool,
}

/// Follows `entry`'s program to its end; see the module docs.
pub async fn follow(
    table: Arc<ProcessTable>,
    entry: Arc<Entry>,
    outputs: Outputs,
    exit_rx: oneshot::Receiver<Exit>,
    policy: Policy,
    cgroups: Option<Arc<Cgroups>>,
) {
    let pid = entry.pid();
    let (report_tx, mut report_rx) = oneshot::channel();
    tokio::spawn(watch_exit(
        Arc::clone(&entry),
        exit_rx,
        policy.timeout,
        report_tx,
    ));

    let (mut out, mut err) = match outputs {
        Outputs::Pipes { stdout, stderr } => (
            Pipe::new(Stream::Stdout, Source::Pipe(stdout)),
            Pipe::new(Stream::Stderr, Source::Pipe(stderr)),
        ),
        Outputs::Terminal(master) => (
            Pipe::new(Stream::Stdout, Source::Terminal(master)),
            Pipe::closed(Stream::Stderr),
        ),
    };
    let report = loop {
        tokio::select! {
            r = out.read() => out.handle(r, &entry).await,
            r = err.read() => err.handle(r, &entry).await,
            report = &mut report_rx => break report,
        }
    };
    if policy.transient {
        // Nothing it started outlives it (where the agent has cgroups; a
        // process group is not trusted once its leader is reaped), and
        // its descendants no longer hold its pipes open.
        entry.tree().kill();
    }

    let deadline = Instant::now() + DRAIN_AFTER_EXIT;
    while out.is_open() || err.is_open() {
        tokio::select! {
            biased;
            () = sleep_until(deadline) => {
                tracing::debug!(pid, "output still open after exit; a descendant holds it");
                break;
            }
            r = out.read() => out.handle(r, &entry).await,
            r = err.read() => err.handle(r, &entry).await,
        }
    }
    out.drain_now(&entry).await;
    err.drain_now(&entry).await;

    let end = match report {
        Ok(report) => {
            tracing::debug!(pid, exit = ?report.exit, timed_out = report.timed_out, oom_killed = report.oom_killed, "process exited");
            End::Exited(report)
        }
        Err(_) => {
            tracing::error!(pid, "no exit status");
            End::Lost
        }
    };
    if policy.transient {
        // Before the end is recorded, so that a client who saw the exit
        // finds it gone; the stream holds the entry itself.
        tracing::debug!(pid, "transient process forgotten");
        table.forget_entry(&entry);
    }
    entry.finish(end);
    if let Some(cgroups) = cgroups {
        // After the report: the client is woken first.
        let finished = Arc::clone(&entry);
        cgroups.in_background(move || finished.tree().try_release_cgroup());
    }
    if !policy.transient && !table.contains(&entry) {
        // A recycled pid replaced the entry while its output drained.
        if let Some(cgroup) = entry.tree().take_cgroup() {
            table.linger(cgroup);
        }
    }
}

/// Waits for the exit, enforcing the deadline; see the module docs.
async fn watch_exit(
    entry: Arc<Entry>,
    mut exit_rx: oneshot::Receiver<Exit>,
    timeout: Option<Duration>,
    report_tx: oneshot::Sender<ExitReport>,
) {
    let pid = entry.pid();
    let mut timed_out = false;
    let exit = match timeout {
        None => exit_rx.await,
        Some(limit) => {
            let deadline = Instant::from_std(entry.started()) + limit;
            tokio::select! {
                exit = &mut exit_rx => exit,
                () = sleep_until(deadline) => {
                    tracing::info!(pid, ?limit, "deadline passed; killing the process tree");
                    timed_out = true;
                    entry.tree().kill();
                    exit_rx.await
                }
            }
        }
    };
    let duration = entry.started().elapsed();
    let Ok(exit) = exit else {
        // The reaper is gone; dropping `report_tx` reports the loss.
        return;
    };
    let oom_killed = entry.tree().oom_kills().is_some_and(|n| n > 0);
    let _ = report_tx.send(ExitReport {
        exit,
        timed_out,
        oom_killed,
        duration,
        usage: entry.tree().usage(),
    });
    if let Ok(stdin) = entry.stdin() {
        stdin.process_exited().await;
    }
}

impl Pipe {
    fn new(stream: Stream, rx: Source) -> Self {
        Self {
            stream,
            rx: Some(rx),
            buf: vec![0; CHUNK],
        }
    }

    /// A stream that never carries anything (a terminal's stderr).
    fn closed(stream: Stream) -> Self {
        Self {
            stream,
            rx: None,
            buf: Vec::new(),
        }
    }

    fn is_open(&self) -> bool {
        self.rx.is_some()
    }

    /// Reads one chunk; never completes once the pipe is closed. Cancel-safe.
    async fn read(&mut self) -> std::io::Result<usize> {
        match &mut self.rx {
            Some(Source::Pipe(rx)) => rx.read(&mut self.buf).await,
            Some(Source::Terminal(master)) => master.read(&mut self.buf).await,
            None => std::future::pending().await,
        }
    }

    /// Acts on a read: deliver the chunk, or close the pipe on EOF or error.
    async fn handle(&mut self, read: std::io::Result<usize>, entry: &Entry) {
        match read {
            Ok(0) => self.rx = None,
            Ok(n) => entry.deliver(self.chunk(n)).await,
            Err(e) => {
                tracing::warn!(pid = entry.pid(), stream = ?self.stream, error = %e, "output read failed");
                self.rx = None;
            }
        }
    }

    /// Sends what the pipe holds right now, with real non-blocking reads
    /// (not the reactor's possibly stale readiness), then closes it.
    async fn drain_now(&mut self, entry: &Entry) {
        let mut reader = match self.rx.take() {
            None => return,
            Some(Source::Terminal(master)) => NowReader::Terminal(master),
            Some(Source::Pipe(rx)) => match rx.into_nonblocking_fd() {
                Ok(fd) => NowReader::Pipe(File::from(fd)),
                Err(e) => {
                    tracing::warn!(pid = entry.pid(), error = %e, "cannot drain output");
                    return;
                }
            },
        };
        let mut total = 0;
        while total < FINAL_DRAIN_LIMIT {
            match reader.read(&mut self.buf) {
                Ok(0) => break,
                Ok(n) => {
                    total += n;
                    entry.deliver(self.chunk(n)).await;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    tracing::warn!(pid = entry.pid(), error = %e, "output drain failed");
                    break;
                }
            }
        }
    }

    fn chunk(&self, n: usize) -> Chunk {
        Chunk {
            stream: self.stream,
            data: Bytes::copy_from_slice(&self.buf[..n]),
        }
    }
}

/// Non-blocking reads of a drained source.
enum NowReader {
    Pipe(File),
    Terminal(Master),
}

impl NowReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            NowReader::Pipe(file) => file.read(buf),
            NowReader::Terminal(master) => master.read_now(buf),
        }
    }
}
