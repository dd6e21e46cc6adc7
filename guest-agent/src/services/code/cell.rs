//! One cell on one driver: send the code, then turn the driver's messages
//! into `CodeEvent`s for the client until its `execute_reply`, or its
//! death.
//!
//! Order: the driver forwards the cell's stdout and stderr (its fds 1 and
//! 2, pipes it reads from the other end) as `stream` messages, draining
//! them before every other message, so output and rich outputs arrive in
//! the order they happened. The agent reads those pipes only once the
//! driver is gone, for what it could not send. Events wait in a small
//! outbox while the client is slow, and no message is taken meanwhile, so
//! a slow client slows the cell (the socket, then the pipes fill) instead
//! of growing the agent. The deadline, the kill that follows it and the
//! driver's death are watched whatever the client does.
//!
//! At the deadline the cell is interrupted (SIGINT: variables kept); a cell
//! still running [`KILL_GRACE`] later has its interpreter killed. A client
//! that goes away interrupts its cell the same way.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use airlock_proto::contract::code::STREAM_CHUNK;
use airlock_proto::v1::{code_event, CellStatus, CodeError as ProtoError, CodeEvent};
use bytes::Bytes;
use tokio::net::unix::pipe::Receiver;
use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant};
use tonic::Status;

use super::driver::{self, Driver};
use super::wire::{self, DriverMessage};
use super::CodeError;

/// How long an interrupted cell (deadline, or client gone) may take to
/// stop before its interpreter is killed.
pub const KILL_GRACE: Duration = Duration::from_secs(5);

/// Where a cell's events go.
pub type Events = mpsc::Sender<Result<CodeEvent, Status>>;

/// How a cell ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    /// OK, error or interrupted.
    pub status: CellStatus,
    /// The cell's number in its interpreter (0 if it never replied).
    pub execution_count: u32,
    /// Its deadline passed.
    pub timed_out: bool,
    /// The interpreter died or was killed: it cannot run another cell.
    pub lost: bool,
    /// The driver replaced its interpreter during the cell (bash's `exit`).
    pub restarted: bool,
}

/// An event carrying an error the agent, not the code, raised.
pub fn agent_error(name: &str, value: String) -> CodeEvent {
    CodeEvent {
        event: Some(code_event::Event::Error(ProtoError {
            name: name.to_owned(),
            value,
            traceback: Vec::new(),
        })),
    }
}

fn event(event: code_event::Event) -> CodeEvent {
    CodeEvent { event: Some(event) }
}

/// The state of one cell's loop.
struct Cell<'a> {
    events: &'a Events,
    outbox: VecDeque<CodeEvent>,
    client_gone: bool,
    /// The reply arrived, or the driver is gone.
    finished: bool,
    reply_ok: bool,
    restarted: bool,
    execution_count: u32,
    timed_out: bool,
    lost: bool,
    killed_after: Option<&'static str>,
    kill_at: Option<Instant>,
}

/// Runs `code` on `driver`; `interrupted` is set by whoever interrupts the
/// context while the cell runs. Every event but `done` is sent (or the
/// client is gone) when this returns.
pub async fn run(
    driver: &mut Driver,
    code: String,
    deadline: Option<Instant>,
    interrupted: &AtomicBool,
    events: &Events,
) -> Ended {
    let mut cell = Cell {
        events,
        outbox: VecDeque::new(),
        client_gone: false,
        finished: false,
        reply_ok: false,
        restarted: false,
        execution_count: 0,
        timed_out: false,
        lost: false,
        killed_after: None,
        kill_at: None,
    };
    let tree = driver.tree();
    let mut exited = driver.exited();
    if let Err(e) = driver.execute(code).await {
        tracing::warn!(error = %airlock_report::chain(&e), "cannot send the cell");
        tree.kill();
    }
    let pid = driver.pid();
    let mut deadline = deadline;
    let mut messages_open = true;
    let mut out_buf = vec![0u8; STREAM_CHUNK];
    let mut err_buf = vec![0u8; STREAM_CHUNK];
    loop {
        if cell.finished && (cell.outbox.is_empty() || cell.client_gone) {
            break;
        }
        let reading = cell.outbox.is_empty() && !cell.finished;
        let Driver {
            messages,
            stdout,
            stderr,
            ..
        } = &mut *driver;
        tokio::select! {
            biased;
            () = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() && !cell.finished => {
                deadline = None;
                cell.timed_out = true;
                tracing::info!(pid, "cell deadline passed; interrupting");
                Driver::interrupt(&tree);
                cell.arm_kill("its deadline");
            }
            () = sleep_until(cell.kill_at.unwrap_or_else(Instant::now)), if cell.kill_at.is_some() && !cell.finished => {
                cell.kill_at = None;
                tracing::warn!(pid, "cell did not stop after an interrupt; killing its interpreter");
                tree.kill();
            }
            changed = exited.wait_for(Option::is_some), if !cell.lost => {
                let exit = changed.map(|exit| *exit).unwrap_or(None);
                cell.lost = true;
                drain(stdout, &mut out_buf, &mut cell, code_event::Event::Stdout);
                drain(stderr, &mut err_buf, &mut cell, code_event::Event::Stderr);
                if !cell.finished {
                    cell.finished = true;
                    let value = match cell.killed_after {
                        Some(why) => format!(
                            "the cell did not stop within {KILL_GRACE:?} after {why}: its interpreter was killed"
                        ),
                        None => format!("the interpreter ended ({})", driver::describe(exit)),
                    };
                    cell.outbox.push_back(agent_error("InterpreterDied", value));
                }
            }
            permit = cell.events.reserve(), if !cell.outbox.is_empty() && !cell.client_gone => {
                match (permit, cell.outbox.pop_front()) {
                    (Ok(permit), Some(next)) => permit.send(Ok(next)),
                    (Err(_), _) => cell.gone(&tree),
                    (Ok(_), None) => {}
                }
            }
            () = cell.events.closed(), if !cell.client_gone && cell.outbox.is_empty() => {
                cell.gone(&tree);
            }
            message = messages.recv(), if reading && messages_open => {
                match message {
                    Some(Ok(message)) => cell.message(message),
                    Some(Err(e)) => {
                        tracing::warn!(error = %airlock_report::chain(&e), "interpreter broke the wire format; killing it");
                        cell.outbox.push_back(agent_error("InterpreterDied", airlock_report::chain(&e)));
                        cell.finished = true;
                        // Killed: it runs no other cell, whenever its exit
                        // is reported.
                        cell.lost = true;
                        tree.kill();
                    }
                    None => {
                        // The socket closed: the driver is gone, or broken.
                        // Nothing more will come; the exit arm reports it.
                        messages_open = false;
                        tree.kill();
                    }
                }
            }
        }
    }
    let interrupted = interrupted.load(Ordering::SeqCst) || cell.timed_out || cell.client_gone;
    let status = match (cell.lost, cell.reply_ok) {
        (false, true) => CellStatus::Ok,
        _ if interrupted => CellStatus::Interrupted,
        _ => CellStatus::Error,
    };
    Ended {
        status,
        execution_count: cell.execution_count,
        timed_out: cell.timed_out,
        lost: cell.lost,
        restarted: cell.restarted,
    }
}

impl Cell<'_> {
    /// Kills the interpreter [`KILL_GRACE`] from now unless the cell ends.
    fn arm_kill(&mut self, why: &'static str) {
        if self.kill_at.is_none() && self.killed_after.is_none() {
            self.kill_at = Some(Instant::now() + KILL_GRACE);
            self.killed_after = Some(why);
        }
    }

    /// The client went away: interrupt the cell, drop what it would have
    /// got.
    fn gone(&mut self, tree: &crate::services::process::signal::Tree) {
        tracing::info!("client gone; interrupting its cell");
        self.client_gone = true;
        self.outbox.clear();
        if !self.finished {
            Driver::interrupt(tree);
            self.arm_kill("its client went away");
        }
    }

    fn push(&mut self, next: CodeEvent) {
        if !self.client_gone {
            self.outbox.push_back(next);
        }
    }

    fn message(&mut self, message: DriverMessage) {
        match message {
            DriverMessage::Stream { name, text } => {
                let data = Bytes::from(text);
                self.push(event(match name.as_str() {
                    "stderr" => code_event::Event::Stderr(data),
                    _ => code_event::Event::Stdout(data),
                }));
            }
            DriverMessage::ExecuteResult { data } => {
                self.push(event(code_event::Event::Result(wire::rich_output(data))))
            }
            DriverMessage::DisplayData { data } => {
                self.push(event(code_event::Event::Display(wire::rich_output(data))))
            }
            DriverMessage::Error {
                ename,
                evalue,
                traceback,
            } => self.push(event(code_event::Event::Error(ProtoError {
                name: ename,
                value: evalue,
                traceback,
            }))),
            DriverMessage::ExecuteReply {
                status,
                execution_count,
                restarted,
            } => {
                self.finished = true;
                self.restarted = restarted;
                self.reply_ok = status == "ok";
                self.execution_count = execution_count;
                self.kill_at = None;
            }
            DriverMessage::Ready { .. }
            | DriverMessage::Unavailable { .. }
            | DriverMessage::Unknown => {
                tracing::debug!("unexpected message during a cell; ignored");
            }
        }
    }
}

/// Reads whatever a pipe holds now, without waiting (what a dead driver
/// left unsent).
fn drain(
    pipe: &mut Option<Receiver>,
    buf: &mut [u8],
    cell: &mut Cell<'_>,
    wrap: fn(Bytes) -> code_event::Event,
) {
    while let Some(p) = pipe {
        match p.try_read(buf) {
            Ok(0) => *pipe = None,
            Ok(n) => cell.push(event(wrap(Bytes::copy_from_slice(&buf[..n])))),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
            Err(_) => *pipe = None,
        }
    }
}

/// Keeps [`CodeError`] in this module's vocabulary for the context.
pub fn start_failed(e: &CodeError) -> CodeEvent {
    agent_error("InterpreterUnavailable", airlock_report::chain(e))
}
