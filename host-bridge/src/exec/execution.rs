//! [`Execution`]: one client's view of a running program, from `Start` or
//! `Connect`: one `started`, output chunks in arrival order, one `exited`.
//! The protocol guarantees that every byte the program wrote arrives
//! before `exited`.
//!
//! A stream that breaks because the sandbox was paused (the connection
//! dropped by a keepalive across a long pause) is re-attached from the
//! offset of the last byte received (`Process.Connect`), so the caller sees
//! no gap: the agent keeps a running program's output while no client reads
//! it. A break no pause explains (a guest that stopped answering) is the
//! caller's error at once.

use std::sync::Arc;
use std::time::Duration;

use crate::lifecycle::channel::AgentChannel;
use crate::lifecycle::PausedCalls;
use crate::transport::CapMessages;
use airlock_proto::v1::process_client::ProcessClient;
use airlock_proto::v1::{process_event, ConnectRequest, ProcessEvent};
use airlock_proto::Feature;
use bytes::Bytes;
use futures::Stream;
use tonic::Streaming;

use super::process::{ProcessHandle, Target};
use super::signal::Signal;
use super::status::{ExecStamps, Exit, ExitStatus};
use super::terminal::TerminalSize;
use crate::error::{Error, Result};
use crate::features::AgentFeatures;
use crate::lifecycle::vm::VmShared;

/// Something a running program produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A chunk of standard output.
    Stdout(Bytes),
    /// A chunk of standard error.
    Stderr(Bytes),
    /// Output the agent no longer held when this client attached (it was
    /// written while no client was attached and the replay buffer
    /// overflowed): this many bytes are missing before what follows.
    Dropped(u64),
    /// The program ended; no event follows.
    Exited(Exit),
}

/// Everything a finished program produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// Exit code or signal.
    pub status: ExitStatus,
    /// Its standard output.
    pub stdout: Vec<u8>,
    /// Its standard error.
    pub stderr: Vec<u8>,
    /// The agent killed it at its timeout (see `Command::timeout`); the
    /// output is what it wrote until then.
    pub timed_out: bool,
    /// The OOM killer killed a process of its tree.
    pub oom_killed: bool,
    /// From start to exit.
    pub duration: std::time::Duration,
    /// Bytes of output missing from the start of `stdout`/`stderr` (only
    /// after `Sandbox::attach` to a program whose replay buffer overflowed).
    pub dropped: u64,
    /// What its process tree used (see [`Exit::usage`]).
    pub usage: Option<super::Usage>,
}

/// A program running in the guest, as seen by this client.
///
/// Read its output with [`next_event`](Execution::next_event) (or collect
/// it with [`output`](Execution::output)); control it with
/// [`write_stdin`](Execution::write_stdin), [`signal`](Execution::signal)
/// or a [`ProcessHandle`] from [`handle`](Execution::handle), which other
/// tasks can use at the same time.
///
/// Dropping an `Execution` detaches from the program; it keeps running in
/// the guest. To stop it, [`signal`](Execution::signal) it or give the
/// command a timeout.
#[derive(Debug)]
pub struct Execution {
    call: &'static str,
    pid: u32,
    handle: ProcessHandle,
    events: Streaming<ProcessEvent>,
    exit: Option<Exit>,
    offset: u64,
    /// Names the VM's end when the stream breaks because it ended.
    vm: Option<Arc<VmShared>>,
    /// For re-attaching a broken stream (`None` without `Process.Connect`).
    reattach: Option<AgentChannel>,
    /// The VM's pause count when the last event arrived.
    pauses_seen: u64,
    /// The agent's `received_us` and `spawned_us` (0 from older agents).
    started_stamps: (u64, u64),
}

/// How many times in a row a broken stream is re-attached before its
/// error is the caller's.
const REATTACH_ATTEMPTS: u32 = 5;
/// The pause before the first re-attach, doubled for each next one.
const REATTACH_BACKOFF: Duration = Duration::from_millis(100);

impl Execution {
    /// Reads the mandatory `started` event of `call`'s stream.
    pub(crate) async fn begin(
        call: &'static str,
        channel: AgentChannel,
        mut events: Streaming<ProcessEvent>,
        features: AgentFeatures,
        vm: Option<Arc<VmShared>>,
    ) -> Result<Self> {
        match next_proto_event(call, &mut events, vm.as_ref()).await? {
            Some((process_event::Event::Started(started), _)) => Ok(Execution {
                call,
                pid: started.pid,
                // A re-attach waits out a pause rather than resuming the VM.
                reattach: features
                    .has(Feature::Attach)
                    .then(|| channel.with_paused_calls(PausedCalls::Wait)),
                handle: ProcessHandle::new(channel, Target::Pid(started.pid), features),
                events,
                exit: None,
                offset: 0,
                pauses_seen: vm.as_ref().map_or(0, |vm| vm.interruptions()),
                started_stamps: (started.received_us, started.spawned_us),
                vm,
            }),
            other => Err(Error::Protocol(format!(
                "expected a started event, got {other:?}"
            ))),
        }
    }

    /// The program's pid in the guest.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The program's controls, for use from other tasks.
    pub fn handle(&self) -> ProcessHandle {
        self.handle.clone()
    }

    /// The output offset after the last chunk received: where
    /// `Sandbox::attach_from` resumes if this stream breaks.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Writes to the program's stdin; see [`ProcessHandle::write_stdin`].
    pub async fn write_stdin(&self, data: impl Into<Bytes>) -> Result<()> {
        self.handle.write_stdin(data).await
    }

    /// Closes the program's stdin; see [`ProcessHandle::close_stdin`].
    pub async fn close_stdin(&self) -> Result<()> {
        self.handle.close_stdin().await
    }

    /// Signals the program's tree; see [`ProcessHandle::signal`].
    pub async fn signal(&self, signal: Signal) -> Result<()> {
        self.handle.signal(signal).await
    }

    /// Sets the window size of the program's terminal; see
    /// [`ProcessHandle::resize`].
    pub async fn resize(&self, size: TerminalSize) -> Result<()> {
        self.handle.resize(size).await
    }

    /// The next event, or `None` after [`Event::Exited`] was returned.
    /// Cancel-safe: dropping the future loses no event.
    pub async fn next_event(&mut self) -> Result<Option<Event>> {
        if self.exit.is_some() {
            return Ok(None);
        }
        let mut attempts = 0;
        let next = loop {
            match next_proto_event(self.call, &mut self.events, self.vm.as_ref()).await {
                Err(error)
                    if attempts < REATTACH_ATTEMPTS
                        && self.reattach.is_some()
                        && self.paused_since_last_event()
                        && breaks_the_stream(&error) =>
                {
                    tracing::debug!(pid = self.pid, offset = self.offset, %error, "output stream broke; re-attaching");
                    tokio::time::sleep(REATTACH_BACKOFF * 2u32.pow(attempts)).await;
                    attempts += 1;
                    if let Err(error) = self.reattach().await {
                        tracing::debug!(%error, "re-attach failed");
                    }
                }
                other => break other?,
            }
        };
        if let Some(vm) = &self.vm {
            self.pauses_seen = vm.interruptions();
        }
        let event = match next {
            Some((process_event::Event::Stdout(data), offset)) => {
                self.offset = offset + data.len() as u64;
                Event::Stdout(data)
            }
            Some((process_event::Event::Stderr(data), offset)) => {
                self.offset = offset + data.len() as u64;
                Event::Stderr(data)
            }
            Some((process_event::Event::Dropped(dropped), _)) => Event::Dropped(dropped.bytes),
            Some((process_event::Event::Exited(exited), _)) => {
                let mut exit = Exit::from_proto(&exited)?;
                let (received, spawned) = self.started_stamps;
                exit.stamps = ExecStamps::of(received, spawned, &exited);
                self.exit = Some(exit);
                Event::Exited(exit)
            }
            Some((process_event::Event::Started(_), _)) => {
                return Err(Error::Protocol("a second started event".into()))
            }
            None => {
                return Err(Error::Protocol(
                    "the output stream ended without an exit status".into(),
                ))
            }
        };
        Ok(Some(event))
    }

    /// Whether the sandbox is paused or was paused since the last event:
    /// what makes a broken stream worth re-attaching.
    fn paused_since_last_event(&self) -> bool {
        self.vm
            .as_ref()
            .is_some_and(|vm| vm.state().is_paused() || vm.interruptions() != self.pauses_seen)
    }

    /// Replaces the broken stream with `Process.Connect` from the offset
    /// after the last byte received.
    async fn reattach(&mut self) -> Result<()> {
        let Some(channel) = self.reattach.clone() else {
            return Ok(());
        };
        let mut events = ProcessClient::new(channel)
            .capped()
            .connect(ConnectRequest {
                process: Target::Pid(self.pid).selector(),
                from_offset: self.offset,
            })
            .await
            .map_err(|status| Error::agent("Process.Connect", status))?
            .into_inner();
        match next_proto_event("Process.Connect", &mut events, self.vm.as_ref()).await? {
            Some((process_event::Event::Started(_), _)) => {
                self.events = events;
                Ok(())
            }
            other => Err(Error::Protocol(format!(
                "expected a started event on re-attach, got {other:?}"
            ))),
        }
    }

    /// The remaining events as a stream, ending after [`Event::Exited`].
    pub fn into_events(self) -> impl Stream<Item = Result<Event>> + Send {
        futures::stream::unfold(Some(self), |execution| async move {
            let mut execution = execution?;
            match execution.next_event().await {
                Ok(Some(event)) => Some((Ok(event), Some(execution))),
                Ok(None) => None,
                Err(error) => Some((Err(error), None)),
            }
        })
    }

    /// Collects all remaining output and the exit.
    pub async fn output(mut self) -> Result<Output> {
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        let mut dropped = 0;
        while let Some(event) = self.next_event().await? {
            match event {
                Event::Stdout(data) => stdout.extend_from_slice(&data),
                Event::Stderr(data) => stderr.extend_from_slice(&data),
                Event::Dropped(bytes) => dropped += bytes,
                Event::Exited(exit) => {
                    return Ok(Output {
                        status: exit.status,
                        stdout,
                        stderr,
                        timed_out: exit.timed_out,
                        oom_killed: exit.oom_killed,
                        duration: exit.duration,
                        dropped,
                        usage: exit.usage,
                    })
                }
            }
        }
        Err(Error::Protocol("execution already finished".into()))
    }

    /// Discards remaining output and returns how the program ended.
    pub async fn wait(mut self) -> Result<Exit> {
        loop {
            match self.next_event().await? {
                Some(Event::Exited(exit)) => return Ok(exit),
                Some(_) => {}
                None => {
                    return self
                        .exit
                        .ok_or_else(|| Error::Protocol("execution already finished".into()))
                }
            }
        }
    }
}

/// Whether `status` is the connection breaking under a call (rather than
/// the agent's answer to it).
/// Whether `error` is a broken connection (a stream worth re-attaching
/// when a pause or a save explains it).
fn breaks_the_stream(error: &Error) -> bool {
    match error {
        Error::Agent { status, .. } => is_broken_connection(status),
        Error::SavedDuringCall { .. } | Error::ForkedDuringCall { .. } => true,
        _ => false,
    }
}

fn is_broken_connection(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::Unavailable
            | tonic::Code::Unknown
            | tonic::Code::Cancelled
            | tonic::Code::Internal
    )
}

/// How long a broken stream waits for the VM's end to be noticed before
/// blaming the connection instead.
const VM_EXIT_GRACE: Duration = Duration::from_secs(3);

async fn next_proto_event(
    call: &'static str,
    events: &mut Streaming<ProcessEvent>,
    vm: Option<&Arc<VmShared>>,
) -> Result<Option<(process_event::Event, u64)>> {
    match events.message().await {
        Ok(Some(ProcessEvent {
            event: Some(event),
            offset,
        })) => Ok(Some((event, offset))),
        Ok(Some(ProcessEvent { event: None, .. })) => {
            Err(Error::Protocol("empty process event".into()))
        }
        Ok(None) => Ok(None),
        Err(status) => {
            if let Some(vm) = vm {
                if let Some(reason) = vm.ended_within(VM_EXIT_GRACE).await {
                    return Err(Error::VmGone { call, reason });
                }
            }
            Err(Error::agent(call, status))
        }
    }
}
