//! One program in the process table: what it is, its output log, who is
//! attached and where they are in the log, how it ended, and the handles to
//! its stdin, its terminal (if it has one) and tree.
//!
//! Two sides meet here under one mutex:
//!
//! - the reader (`output::follow`) calls [`Entry::deliver`] for each chunk
//!   and [`Entry::finish`] once the output is complete;
//! - at most one attached client (`attach`) calls [`Entry::next_for`],
//!   which hands out the log from the client's cursor on.
//!
//! While a client is attached, `deliver` waits when the client is
//! [`ATTACHED_LIMIT`] bytes behind: that wait is the backpressure that stops
//! the reader reading and so blocks the program on its full pipe, and the
//! log never drops what the client has not received. While none is
//! attached, `deliver` never waits and the log keeps only the newest bytes
//! (see `buffer`). Attaching takes over from the previous client, which is
//! told it was displaced.
//!
//! [`ATTACHED_LIMIT`]: super::buffer::ATTACHED_LIMIT

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use airlock_proto::v1::{exited, Exited, ProcessInfo, ProcessState, Usage};
use tokio::sync::Notify;

use super::buffer::{Chunk, OutputLog, ATTACHED_LIMIT};
use super::pty::{Master, WindowSize};
use super::signal::Tree;
use super::stdin::StdinPipe;
use super::ProcessError;
use crate::reaper::Exit;

/// How a program ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitReport {
    /// Exit code or signal.
    pub exit: Exit,
    /// The agent killed the tree at the deadline.
    pub timed_out: bool,
    /// The OOM killer killed a process of the tree.
    pub oom_killed: bool,
    /// From spawn to exit.
    pub duration: Duration,
    /// What the tree used, where it has a cgroup.
    pub usage: Option<Usage>,
}

/// The end of a program's stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// It exited and all its output was read.
    Exited(ExitReport),
    /// The reaper never reported its exit.
    Lost,
}

/// What an attached client gets next.
#[derive(Debug)]
pub enum Next {
    /// Output from the requested offset on is no longer held.
    Dropped(u64),
    /// A chunk of output, at its offset.
    Chunk(u64, Chunk),
    /// The end; nothing follows.
    End(End),
    /// Another client attached; this one is done.
    Displaced,
}

/// What a program is, fixed at start.
#[derive(Debug)]
pub struct Identity {
    /// Its pid.
    pub pid: u32,
    /// Its tag, if it was given one.
    pub tag: Option<String>,
    /// Its argv.
    pub argv: Vec<String>,
    /// When it was spawned.
    pub started: Instant,
    /// When the request that started it arrived and when it was spawned,
    /// on the guest's boot clock (microseconds), for the host's breakdown.
    pub received_us: u64,
    pub spawned_us: u64,
}

/// When things happened to a program, on the guest's boot clock
/// (microseconds); 0 for what has not happened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stamps {
    pub received_us: u64,
    pub spawned_us: u64,
    pub first_output_us: u64,
    pub exited_us: u64,
}

/// The attached client.
#[derive(Debug, Clone, Copy)]
struct Client {
    id: u64,
    /// Offset of the next byte to hand it.
    cursor: u64,
    /// Bytes it asked for that were no longer held, still to report.
    dropped: u64,
}

#[derive(Debug, Default)]
struct State {
    output: OutputLog,
    attached: Option<Client>,
    next_client: u64,
    end: Option<End>,
    finished_at: Option<Instant>,
    /// When the first output arrived and when the end was recorded.
    first_output_us: u64,
    exited_us: u64,
    /// The terminal's master side, until the end is recorded.
    terminal: Option<Master>,
}

impl State {
    fn client(&mut self, id: u64) -> Option<&mut Client> {
        self.attached.as_mut().filter(|c| c.id == id)
    }
}

/// One program in the table.
#[derive(Debug)]
pub struct Entry {
    id: Identity,
    state: Mutex<State>,
    /// Wakes the attached client: output, the end, or displacement.
    changed: Notify,
    /// Wakes the reader: room in the buffer, or the client went away.
    room: Notify,
    stdin: Option<StdinPipe>,
    has_terminal: bool,
    tree: Tree,
}

impl Entry {
    /// A running program, on `terminal` if it has one.
    pub fn new(
        id: Identity,
        stdin: Option<StdinPipe>,
        terminal: Option<Master>,
        tree: Tree,
    ) -> Self {
        Self {
            id,
            has_terminal: terminal.is_some(),
            state: Mutex::new(State {
                terminal,
                ..State::default()
            }),
            changed: Notify::new(),
            room: Notify::new(),
            stdin,
            tree,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.id.pid
    }

    /// Its tag.
    pub fn tag(&self) -> Option<&str> {
        self.id.tag.as_deref()
    }

    /// When it was spawned.
    pub fn started(&self) -> Instant {
        self.id.started
    }

    /// Its process tree.
    pub fn tree(&self) -> &Tree {
        &self.tree
    }

    /// Its stdin pipe, if it was started with one.
    pub fn stdin(&self) -> Result<&StdinPipe, ProcessError> {
        self.stdin
            .as_ref()
            .ok_or(ProcessError::StdinNotPiped(self.id.pid))
    }

    /// Sets the window size of the program's terminal.
    pub fn resize(&self, size: WindowSize) -> Result<(), ProcessError> {
        let pid = self.id.pid;
        if !self.has_terminal {
            return Err(ProcessError::NotATerminal(pid));
        }
        let master = self.lock().terminal.clone();
        let master = master.ok_or(ProcessError::Exited(pid))?;
        master
            .resize(size)
            .map_err(|source| ProcessError::Resize { pid, source })
    }

    /// Adds a chunk to the log, first waiting while the attached client (if
    /// any) is [`ATTACHED_LIMIT`] bytes behind.
    pub async fn deliver(&self, chunk: Chunk) {
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            {
                let mut state = self.lock();
                let cursor = state.attached.map(|c| c.cursor);
                let behind = cursor.map_or(0, |c| state.output.end().saturating_sub(c));
                if behind < ATTACHED_LIMIT as u64 {
                    if state.first_output_us == 0 {
                        state.first_output_us = crate::clock::boottime_us();
                    }
                    state.output.push(chunk, cursor);
                    let attached = cursor.is_some();
                    drop(state);
                    if attached {
                        self.changed.notify_waiters();
                    }
                    return;
                }
            }
            room.await;
        }
    }

    /// Records the end; the attached client gets it after the output.
    pub fn finish(&self, end: End) {
        {
            let mut state = self.lock();
            state.end = Some(end);
            state.finished_at = Some(Instant::now());
            state.exited_us = crate::clock::boottime_us();
            // The terminal is of no more use; its descriptor goes.
            state.terminal = None;
        }
        self.changed.notify_waiters();
    }

    /// Attaches a new client that reads from `from_offset` (clamped to the
    /// output so far), displacing the previous one; returns its id.
    pub fn attach(&self, from_offset: u64) -> u64 {
        let (id, displaced) = {
            let mut state = self.lock();
            let id = state.next_client;
            state.next_client += 1;
            let from = from_offset.min(state.output.end());
            let client = Client {
                id,
                cursor: from.max(state.output.start()),
                dropped: state.output.start().saturating_sub(from),
            };
            (id, state.attached.replace(client))
        };
        if let Some(previous) = displaced {
            tracing::info!(
                pid = self.id.pid,
                previous = previous.id,
                "client attached; displacing the previous one"
            );
            self.changed.notify_waiters();
        }
        self.room.notify_waiters();
        id
    }

    /// Detaches client `id` if it is still the attached one.
    pub fn detach(&self, id: u64) {
        let detached = {
            let mut state = self.lock();
            let current = state.client(id).is_some();
            if current {
                state.attached = None;
            }
            current
        };
        if detached {
            tracing::debug!(pid = self.id.pid, "client detached");
            self.room.notify_waiters();
        }
    }

    /// The next thing for client `id`, waiting until there is one.
    pub async fn next_for(&self, id: u64) -> Next {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let mut state = self.lock();
                let Some(client) = state.client(id).copied() else {
                    return Next::Displaced;
                };
                if client.dropped > 0 {
                    if let Some(c) = state.client(id) {
                        c.dropped = 0;
                    }
                    return Next::Dropped(client.dropped);
                }
                if let Some((offset, chunk)) = state.output.read_at(client.cursor) {
                    if let Some(c) = state.client(id) {
                        c.cursor = offset + chunk.data.len() as u64;
                    }
                    drop(state);
                    self.room.notify_waiters();
                    return Next::Chunk(offset, chunk);
                }
                if let Some(end) = state.end.clone() {
                    return Next::End(end);
                }
            }
            changed.await;
        }
    }

    /// When the end was recorded, if it was.
    pub fn finished_at(&self) -> Option<Instant> {
        self.lock().finished_at
    }

    /// When things happened to it, for the host's breakdown.
    pub fn stamps(&self) -> Stamps {
        let state = self.lock();
        Stamps {
            received_us: self.id.received_us,
            spawned_us: self.id.spawned_us,
            first_output_us: state.first_output_us,
            exited_us: state.exited_us,
        }
    }

    /// Output bytes held for replay.
    pub fn held(&self) -> usize {
        self.lock().output.held()
    }

    /// The entry as `List` shows it.
    pub fn info(&self) -> ProcessInfo {
        let state = self.lock();
        let (state_code, exit) = match state.end {
            None => (ProcessState::Running, None),
            Some(End::Exited(ref report)) => {
                let stamps = Stamps {
                    received_us: self.id.received_us,
                    spawned_us: self.id.spawned_us,
                    first_output_us: state.first_output_us,
                    exited_us: state.exited_us,
                };
                (ProcessState::Exited, Some(exited_message(report, stamps)))
            }
            Some(End::Lost) => (ProcessState::Exited, None),
        };
        ProcessInfo {
            pid: self.id.pid,
            tag: self.id.tag.clone().unwrap_or_default(),
            argv: self.id.argv.clone(),
            state: state_code as i32,
            exit,
            attached: state.attached.is_some(),
            output_bytes: state.output.end(),
            held_from: state.output.start(),
        }
    }
}

/// The protocol's `Exited` for a report, with the program's `stamps`.
pub fn exited_message(report: &ExitReport, stamps: Stamps) -> Exited {
    let status = match report.exit {
        Exit::Code(code) => exited::Status::Code(code),
        Exit::Signal(signal) => exited::Status::Signal(signal),
    };
    Exited {
        status: Some(status),
        timed_out: report.timed_out,
        oom_killed: report.oom_killed,
        duration_us: u64::try_from(report.duration.as_micros()).unwrap_or(u64::MAX),
        usage: report.usage,
        first_output_us: stamps.first_output_us,
        exited_us: stamps.exited_us,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;

    use super::*;
    use crate::services::process::buffer::{Stream, REPLAY_LIMIT};

    fn entry() -> Arc<Entry> {
        let reaper_table = crate::reaper::Reaper::for_tests();
        Arc::new(Entry::new(
            Identity {
                pid: 42,
                tag: Some("t".into()),
                argv: vec!["prog".into()],
                started: Instant::now(),
                received_us: 0,
                spawned_us: 0,
            },
            None,
            None,
            Tree::new(42, reaper_table, None),
        ))
    }

    fn chunk(n: usize) -> Chunk {
        Chunk {
            stream: Stream::Stdout,
            data: Bytes::from(vec![b'x'; n]),
        }
    }

    /// Reads client `id` to the end; returns the bytes, the dropped count
    /// and whether the chunks' offsets were contiguous.
    async fn read_all(e: &Entry, id: u64) -> (Vec<u8>, u64) {
        let mut got = Vec::new();
        let mut dropped = 0;
        let mut next_offset = None;
        loop {
            match e.next_for(id).await {
                Next::Dropped(n) => dropped += n,
                Next::Chunk(offset, c) => {
                    if let Some(want) = next_offset {
                        assert_eq!(offset, want, "offsets are contiguous");
                    }
                    next_offset = Some(offset + c.data.len() as u64);
                    got.extend_from_slice(&c.data);
                }
                Next::End(_) => return (got, dropped),
                Next::Displaced => panic!("displaced"),
            }
        }
    }

    #[tokio::test]
    async fn detached_output_is_replayed_with_a_drop_marker() {
        let e = entry();
        let chunks = REPLAY_LIMIT / 1000 + 10;
        for _ in 0..chunks {
            e.deliver(chunk(1000)).await;
        }
        e.finish(End::Lost);
        let id = e.attach(0);
        let (got, dropped) = read_all(&e, id).await;
        assert_eq!(got.len(), REPLAY_LIMIT);
        assert_eq!(dropped as usize, chunks * 1000 - REPLAY_LIMIT);

        // Resuming from an offset replays from there; past the end, nothing.
        let id = e.attach(chunks as u64 * 1000 - 10);
        assert_eq!(read_all(&e, id).await, (vec![b'x'; 10], 0));
        let id = e.attach(u64::MAX);
        assert_eq!(read_all(&e, id).await, (vec![], 0));
    }

    #[tokio::test]
    async fn an_attached_client_gets_backpressure_not_loss() {
        let e = entry();
        let id = e.attach(0);
        let total = 4 * REPLAY_LIMIT / 1000;
        let reader = {
            let e = e.clone();
            tokio::spawn(async move {
                for _ in 0..total {
                    e.deliver(chunk(1000)).await;
                }
                e.finish(End::Lost);
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!reader.is_finished(), "the reader must wait for the client");
        assert!(e.info().output_bytes <= (ATTACHED_LIMIT + 1000) as u64);
        let (got, dropped) = read_all(&e, id).await;
        assert_eq!((got.len(), dropped), (total * 1000, 0));
        reader.await.unwrap();
        assert!(e.held() <= REPLAY_LIMIT);
    }

    #[tokio::test]
    async fn detaching_releases_a_waiting_reader_and_attaching_displaces() {
        let e = entry();
        let first = e.attach(0);
        let reader = {
            let e = e.clone();
            tokio::spawn(async move {
                for _ in 0..(2 * ATTACHED_LIMIT / 1000) {
                    e.deliver(chunk(1000)).await;
                }
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!reader.is_finished());
        let second = e.attach(0);
        assert!(matches!(e.next_for(first).await, Next::Displaced));
        e.detach(first); // a displaced client detaching changes nothing
        assert!(matches!(e.next_for(second).await, Next::Chunk(0, _)));
        e.detach(second);
        reader.await.unwrap();
        assert!(!e.info().attached);
    }
}
