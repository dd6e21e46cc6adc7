//! `airlock.api.v1.Processes`: programs in a sandbox.
//!
//! A stream (`Start`, `Connect`) is pumped by a task of the server's: it
//! forwards the program's events as they come (output split into chunks of
//! at most [`OUTPUT_CHUNK`], each with its offset) and applies the client's
//! inputs from a task of their own, so a program that does not read its
//! stdin never holds its output back. A client that goes away detaches; the
//! program runs on unless the start asked for `kill_on_disconnect`.

use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use futures::Stream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use airlock::{
    Command, Event, Execution, Limits, ProcessHandle, Sandbox, Signal, Stdin, Target, TerminalSize,
};
use airlock_api::limits;
use airlock_api::reason::invalid;
use airlock_api::v1::{self as api, process_event, process_input, processes_server};

use super::call::Call;
use super::Services;
use crate::convert;
use crate::metrics::{FirstOutput, FirstOutputClaim};
use crate::state::State;
use crate::status::error_status;
use crate::validate;

/// The most output bytes in one event.
pub const OUTPUT_CHUNK: usize = 64 * 1024;
/// Events that may wait for a slow client.
const QUEUE: usize = 8;

type Events = Pin<Box<dyn Stream<Item = Result<api::ProcessEvent, Status>> + Send>>;

/// The program `start` asks for, with the sandbox's environment under its
/// own.
fn command(
    start: &api::StartProcess,
    envs: &std::collections::BTreeMap<String, String>,
) -> Result<Command, Status> {
    let Some((program, args)) = start.argv.split_first() else {
        return Err(invalid("start.argv", "no program to run"));
    };
    if program.is_empty() {
        return Err(invalid("start.argv", "an empty program name"));
    }
    if start.argv.len() > limits::MAX_ARGS {
        return Err(invalid(
            "start.argv",
            format!("more than {} arguments", limits::MAX_ARGS),
        ));
    }
    let bytes: usize = start.argv.iter().map(String::len).sum();
    if bytes > limits::MAX_ARGV_BYTES || start.argv.iter().any(|a| a.contains('\0')) {
        return Err(invalid(
            "start.argv",
            format!(
                "NUL in an argument, or more than {} bytes in all",
                limits::MAX_ARGV_BYTES
            ),
        ));
    }
    let own = validate::envs("start.envs", &start.envs)?;
    let mut command = Command::new(program.clone())
        .args(args.iter().cloned())
        .envs(envs.iter().map(|(k, v)| (k.clone(), v.clone())))
        .envs(own);
    if !start.cwd.is_empty() {
        validate::guest_path("start.cwd", &start.cwd)?;
        command = command.cwd(start.cwd.clone());
    }
    if !start.user.is_empty() {
        validate::user("start.user", &start.user)?;
        command = command.user(start.user.clone());
    }
    if let Some(secs) = start.timeout_secs {
        command = command.timeout(validate::seconds(
            "start.timeout_secs",
            secs,
            limits::MAX_TIMEOUT_SECS,
        )?);
    }
    if let Some(asked) = &start.limits {
        let own = program_limits(asked)?;
        if !own.is_empty() {
            command = command.limits(own);
        }
    }
    if start.privileged {
        command = command.privileged(true);
    }
    if !start.tag.is_empty() {
        if start.tag.len() > limits::MAX_NAME_BYTES || start.tag.contains('\0') {
            return Err(invalid(
                "start.tag",
                format!("1 to {} bytes, no NUL", limits::MAX_NAME_BYTES),
            ));
        }
        command = command.tag(start.tag.clone());
    }
    if let Some(size) = &start.pty {
        command = command.pty(terminal_size("start.pty", size)?);
    } else if start.stdin {
        command = command.stdin(Stdin::Piped);
    }
    Ok(command)
}

/// A program's own limits (the cgroup of its tree), each within
/// [`limits`]; INVALID_ARGUMENT naming `start.limits.FIELD` past one.
fn program_limits(asked: &api::Limits) -> Result<Limits, Status> {
    let mut own = Limits::new();
    if let Some(bytes) = asked.memory_bytes {
        own = own.memory_bytes(validate::within(
            "start.limits.memory_bytes",
            bytes,
            limits::MIN_PROGRAM_MEMORY_BYTES,
            limits::MAX_PROGRAM_MEMORY_BYTES,
        )?);
    }
    if let Some(pids) = asked.pids {
        own = own.pids(validate::within(
            "start.limits.pids",
            pids,
            limits::MIN_PROGRAM_PIDS,
            limits::MAX_PROGRAM_PIDS,
        )?);
    }
    if let Some(millis) = asked.cpu_millis {
        own = own.cpu_millis(validate::within(
            "start.limits.cpu_millis",
            millis,
            limits::MIN_PROGRAM_CPU_MILLIS,
            limits::MAX_PROGRAM_CPU_MILLIS,
        )?);
    }
    Ok(own)
}

fn terminal_size(field: &str, size: &api::TerminalSize) -> Result<TerminalSize, Status> {
    let rows = validate::within(&format!("{field}.rows"), size.rows, 1, limits::MAX_TERMINAL)?;
    let cols = validate::within(&format!("{field}.cols"), size.cols, 1, limits::MAX_TERMINAL)?;
    Ok(TerminalSize::new(
        u16::try_from(rows).unwrap_or(u16::MAX),
        u16::try_from(cols).unwrap_or(u16::MAX),
    ))
}

/// The program a selector names.
fn target(field: &str, selector: Option<&api::ProcessSelector>) -> Result<Target, Status> {
    use api::process_selector::Selector;
    match selector.and_then(|s| s.selector.as_ref()) {
        Some(Selector::Pid(pid)) if *pid > 0 => Ok(Target::Pid(*pid)),
        Some(Selector::Tag(tag)) if !tag.is_empty() && tag.len() <= limits::MAX_NAME_BYTES => {
            Ok(Target::Tag(tag.clone()))
        }
        _ => Err(invalid(field, "a pid or a tag")),
    }
}

fn signal(field: &str, number: i32) -> Result<Signal, Status> {
    validate::within(field, number, limits::MIN_SIGNAL, limits::MAX_SIGNAL).map(Signal::from_raw)
}

/// How a pump ends its program when its client goes away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnDisconnect {
    Detach,
    Kill,
}

/// Forwards `execution`'s events to `events` until the program exits or
/// the client goes; applies `inputs` meanwhile.
#[allow(clippy::too_many_arguments)]
async fn pump(
    state: Arc<State>,
    sandbox: String,
    mut execution: Execution,
    tag: String,
    inputs: Option<Streaming<api::ProcessInput>>,
    events: mpsc::Sender<Result<api::ProcessEvent, Status>>,
    on_disconnect: OnDisconnect,
    _call: Call,
    mut first_output: Option<FirstOutputClaim>,
) {
    let pid = execution.pid();
    let handle = execution.handle();
    state.relays.attached(&sandbox, pid);
    let started = api::ProcessEvent {
        event: Some(process_event::Event::Started(api::Started { pid, tag })),
    };
    let mut exit = None;
    let mut refused = false;
    let mut applying = inputs.map(|inputs| tokio::spawn(apply_inputs(inputs, handle.clone())));
    if events.send(Ok(started)).await.is_ok() {
        let applied = async {
            match applying.as_mut() {
                Some(task) => match task.await {
                    Ok(Err(status)) => status,
                    // Inputs ended well (or the task died): output goes on.
                    _ => std::future::pending().await,
                },
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            ended = forward(&mut execution, &events, &mut first_output) => exit = ended,
            status = applied => {
                // A refused input ends the stream with its status; the
                // program then goes as on a disconnect.
                tracing::debug!(%sandbox, pid, status = %status.message(), "input refused");
                let _ = events.send(Err(status)).await;
                refused = true;
            }
        }
    }
    if let Some(task) = applying.take() {
        task.abort();
    }
    if exit.is_none() && on_disconnect == OnDisconnect::Kill && (refused || events.is_closed()) {
        tracing::debug!(%sandbox, pid, "client gone; killing the program as it asked");
        if let Err(error) = handle.kill().await {
            tracing::debug!(error = %airlock::error_chain(&error), "kill");
        }
    }
    state.relays.detached(&sandbox, pid, exit);
}

/// Forwards events until the exit (returned), the client's going, or a
/// failure (sent as the stream's status). The first output is timed for
/// the metrics when this is its sandbox's first program.
async fn forward(
    execution: &mut Execution,
    events: &mpsc::Sender<Result<api::ProcessEvent, Status>>,
    first_output: &mut Option<FirstOutputClaim>,
) -> Option<api::ProcessExit> {
    loop {
        let next = tokio::select! {
            next = execution.next_event() => next,
            () = events.closed() => return None,
        };
        let (messages, exit) = match next {
            Ok(Some(Event::Exited(exit))) => {
                let exit = convert::exit(&exit);
                let message = api::ProcessEvent {
                    event: Some(process_event::Event::Exited(exit)),
                };
                (vec![Ok(message)], Some(exit))
            }
            Ok(Some(event)) => {
                if matches!(event, Event::Stdout(_) | Event::Stderr(_)) {
                    if let Some(claim) = first_output.take() {
                        claim.observe();
                    }
                }
                (output_messages(event, execution.offset()), None)
            }
            Ok(None) => return None,
            Err(error) => (vec![Err(error_status(&error))], None),
        };
        let failed = messages.iter().any(Result::is_err);
        for message in messages {
            if events.send(message).await.is_err() {
                return None;
            }
        }
        if exit.is_some() || failed {
            return exit;
        }
    }
}

/// An output event as messages of at most [`OUTPUT_CHUNK`] bytes, each
/// with the offset of its first byte (`end` is the offset after the event).
fn output_messages(event: Event, end: u64) -> Vec<Result<api::ProcessEvent, Status>> {
    let (data, stdout) = match event {
        Event::Stdout(data) => (data, true),
        Event::Stderr(data) => (data, false),
        Event::Dropped(bytes) => {
            return vec![Ok(api::ProcessEvent {
                event: Some(process_event::Event::Dropped(bytes)),
            })]
        }
        Event::Exited(_) => return Vec::new(),
    };
    let mut offset = end.saturating_sub(data.len() as u64);
    let mut messages = Vec::with_capacity(data.len() / OUTPUT_CHUNK + 1);
    let mut rest: Bytes = data;
    while !rest.is_empty() {
        let piece = rest.split_to(rest.len().min(OUTPUT_CHUNK));
        let len = piece.len() as u64;
        let output = convert::output(piece, offset);
        offset += len;
        let event = if stdout {
            process_event::Event::Stdout(output)
        } else {
            process_event::Event::Stderr(output)
        };
        messages.push(Ok(api::ProcessEvent { event: Some(event) }));
    }
    messages
}

/// Applies the client's inputs, in order, until it ends its side. An
/// input the API refuses (stdin past [`limits::MAX_CHUNK_BYTES`], a signal
/// out of 1 to 64, a size out of bounds, a second start) ends it with
/// INVALID_ARGUMENT naming the field, which the pump sends as the stream's
/// status. A program that has closed its stdin or exited is not a refusal.
async fn apply_inputs(
    mut inputs: Streaming<api::ProcessInput>,
    handle: ProcessHandle,
) -> Result<(), Status> {
    use process_input::Input;
    loop {
        let input = match inputs.message().await {
            Ok(Some(api::ProcessInput { input: Some(input) })) => input,
            Ok(Some(api::ProcessInput { input: None })) => continue,
            Ok(None) => return Ok(()),
            Err(status) => {
                tracing::debug!(?status, "process input ended");
                return Ok(());
            }
        };
        let applied = match input {
            Input::Stdin(data) => {
                validate::chunk("stdin", &data)?;
                handle.write_stdin(data).await
            }
            Input::CloseStdin(true) => handle.close_stdin().await,
            Input::CloseStdin(false) => Ok(()),
            Input::Signal(number) => handle.signal(signal("signal", number)?).await,
            Input::Resize(size) => handle.resize(terminal_size("resize", &size)?).await,
            Input::Start(_) => {
                return Err(invalid(
                    "start",
                    "a process's stream has one start, its first message",
                ))
            }
        };
        if let Err(error) = applied {
            tracing::debug!(error = %airlock::error_chain(&error), "input not applied");
        }
    }
}

impl Services {
    /// `Start`: the program the stream's first message asks for, started,
    /// and the task that pumps its events.
    async fn start_process(
        &self,
        request: Request<Streaming<api::ProcessInput>>,
    ) -> Result<Response<Events>, Status> {
        let call = self.admit(&request)?;
        let mut inputs = request.into_inner();
        let start = match inputs.message().await? {
            Some(api::ProcessInput {
                input: Some(process_input::Input::Start(start)),
            }) => start,
            _ => return Err(invalid("start", "a process's stream begins with its start")),
        };
        let (entry, handle) = call.sandbox(&start.sandbox_id).await?;
        // The sandbox's first program times its first output.
        let first_output = entry.first_output.as_ref().and_then(FirstOutput::claim);
        let command = command(&start, &entry.record.envs)?;
        let execution = handle
            .exec(&command)
            .await
            .map_err(|error| error_status(&error))?;
        tracing::debug!(id = start.sandbox_id, pid = execution.pid(), principal = %call.principal, "started");
        let (events, stream) = mpsc::channel(QUEUE);
        let on_disconnect = match start.kill_on_disconnect {
            true => OnDisconnect::Kill,
            false => OnDisconnect::Detach,
        };
        self.state.spawn(pump(
            Arc::clone(&self.state),
            start.sandbox_id,
            execution,
            start.tag,
            Some(inputs),
            events,
            on_disconnect,
            call,
            first_output,
        ));
        Ok(Response::new(Box::pin(ReceiverStream::new(stream))))
    }
}

#[tonic::async_trait]
impl processes_server::Processes for Services {
    type StartStream = Events;

    async fn start(
        &self,
        request: Request<Streaming<api::ProcessInput>>,
    ) -> Result<Response<Self::StartStream>, Status> {
        let started = self.start_process(request).await;
        if let Some(metrics) = &self.state.metrics {
            metrics.exec(&started);
        }
        started
    }

    type ConnectStream = Events;

    async fn connect(
        &self,
        request: Request<api::ConnectProcessRequest>,
    ) -> Result<Response<Self::ConnectStream>, Status> {
        let call = self.admit(&request)?;
        let request = request.into_inner();
        let target = target("process", request.process.as_ref())?;
        let (_, handle) = call.sandbox(&request.sandbox_id).await?;
        let tag = match &target {
            Target::Tag(tag) => tag.clone(),
            Target::Pid(_) => String::new(),
        };
        let execution = handle
            .attach_from(target, request.offset)
            .await
            .map_err(|error| error_status(&error))?;
        let (events, stream) = mpsc::channel(QUEUE);
        self.state.spawn(pump(
            Arc::clone(&self.state),
            request.sandbox_id,
            execution,
            tag,
            None,
            events,
            OnDisconnect::Detach,
            call,
            None,
        ));
        Ok(Response::new(Box::pin(ReceiverStream::new(stream))))
    }
    async fn list(
        &self,
        request: Request<api::ListProcessesRequest>,
    ) -> Result<Response<api::ListProcessesResponse>, Status> {
        let call = self.admit(&request)?;
        let (_, handle) = call.sandbox(&request.get_ref().sandbox_id).await?;
        let processes = handle
            .list()
            .await
            .map_err(|error| error_status(&error))?
            .iter()
            .map(convert::process_info)
            .collect();
        Ok(Response::new(api::ListProcessesResponse { processes }))
    }

    async fn send_stdin(
        &self,
        request: Request<api::SendStdinRequest>,
    ) -> Result<Response<api::SendStdinResponse>, Status> {
        let call = self.admit(&request)?;
        let request = request.into_inner();
        let target = target("process", request.process.as_ref())?;
        validate::chunk("data", &request.data)?;
        let (_, handle) = call.sandbox(&request.sandbox_id).await?;
        let process = handle.process(target);
        if !request.data.is_empty() {
            process
                .write_stdin(request.data)
                .await
                .map_err(|error| error_status(&error))?;
        }
        if request.close {
            process
                .close_stdin()
                .await
                .map_err(|error| error_status(&error))?;
        }
        Ok(Response::new(api::SendStdinResponse {}))
    }

    async fn send_signal(
        &self,
        request: Request<api::SendSignalRequest>,
    ) -> Result<Response<api::SendSignalResponse>, Status> {
        let call = self.admit(&request)?;
        let request = request.into_inner();
        let target = target("process", request.process.as_ref())?;
        let signal = signal("signal", request.signal)?;
        let (_, handle) = call.sandbox(&request.sandbox_id).await?;
        handle
            .process(target)
            .signal(signal)
            .await
            .map_err(|error| error_status(&error))?;
        Ok(Response::new(api::SendSignalResponse {}))
    }

    async fn resize(
        &self,
        request: Request<api::ResizeRequest>,
    ) -> Result<Response<api::ResizeResponse>, Status> {
        let call = self.admit(&request)?;
        let request = request.into_inner();
        let target = target("process", request.process.as_ref())?;
        let size = terminal_size("size", &request.size.unwrap_or_default())?;
        let (_, handle) = call.sandbox(&request.sandbox_id).await?;
        handle
            .process(target)
            .resize(size)
            .await
            .map_err(|error| error_status(&error))?;
        Ok(Response::new(api::ResizeResponse {}))
    }

    async fn wait(
        &self,
        request: Request<api::WaitRequest>,
    ) -> Result<Response<api::ProcessExit>, Status> {
        let call = self.admit(&request)?;
        let request = request.into_inner();
        let target = target("process", request.process.as_ref())?;
        let (_, handle) = call.sandbox(&request.sandbox_id).await?;
        wait(&self.state, &request.sandbox_id, &handle, target)
            .await
            .map(Response::new)
    }
}

/// Waits for the end of `target`: at once if it has ended; else through
/// the server's stream attached to it, if any; else through an attachment
/// of its own (live output only), which a later client may take over, so
/// the wait looks again when its watch ends without an exit.
async fn wait(
    state: &State,
    sandbox: &str,
    handle: &Sandbox,
    target: Target,
) -> Result<api::ProcessExit, Status> {
    loop {
        let listed = handle.list().await.map_err(|error| error_status(&error))?;
        let found = listed.iter().find(|info| match &target {
            Target::Pid(pid) => info.pid == *pid,
            Target::Tag(tag) => info.tag.as_deref() == Some(tag.as_str()),
        });
        let Some(info) = found else {
            return Err(airlock_api::reason::status(
                airlock_api::v1::ErrorReason::NotFound,
                format!("no process {target:?} in sandbox {sandbox}"),
            ));
        };
        match &info.state {
            airlock::ProcessState::Exited(exit) => return Ok(convert::exit(exit)),
            airlock::ProcessState::Unknown => {
                return Ok(api::ProcessExit {
                    exit_code: -1,
                    ..api::ProcessExit::default()
                })
            }
            airlock::ProcessState::Running => {}
        }
        let pid = info.pid;
        if let Some(mut watch) = state.relays.watch(sandbox, pid) {
            // Ends with the exit, or with the sender gone (look again).
            while watch.changed().await.is_ok() {
                if let Some(exit) = *watch.borrow() {
                    return Ok(exit);
                }
            }
            if let Some(exit) = *watch.borrow() {
                return Ok(exit);
            }
            continue;
        }
        let mut execution = handle
            .attach_from(Target::Pid(pid), u64::MAX)
            .await
            .map_err(|error| error_status(&error))?;
        state.relays.attached(sandbox, pid);
        let mut exit = None;
        loop {
            match execution.next_event().await {
                Ok(Some(Event::Exited(ended))) => {
                    exit = Some(convert::exit(&ended));
                    break;
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
        state.relays.detached(sandbox, pid, exit);
        if let Some(exit) = exit {
            return Ok(exit);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use airlock_api::reason::field_of;

    #[test]
    fn a_programs_limits_are_bounded_as_the_api_says() {
        let within = api::Limits {
            memory_bytes: Some(limits::MIN_PROGRAM_MEMORY_BYTES),
            pids: Some(limits::MAX_PROGRAM_PIDS),
            cpu_millis: Some(limits::MAX_PROGRAM_CPU_MILLIS),
        };
        assert!(!program_limits(&within).unwrap().is_empty());
        assert!(program_limits(&api::Limits::default()).unwrap().is_empty());
        let cases = [
            (
                api::Limits {
                    memory_bytes: Some(limits::MIN_PROGRAM_MEMORY_BYTES - 1),
                    ..api::Limits::default()
                },
                "start.limits.memory_bytes",
            ),
            (
                api::Limits {
                    pids: Some(limits::MAX_PROGRAM_PIDS + 1),
                    ..api::Limits::default()
                },
                "start.limits.pids",
            ),
            (
                api::Limits {
                    cpu_millis: Some(0),
                    ..api::Limits::default()
                },
                "start.limits.cpu_millis",
            ),
        ];
        for (asked, field) in cases {
            assert_eq!(field_of(&program_limits(&asked).unwrap_err()), Some(field));
        }
    }

    #[test]
    fn signals_are_one_to_sixty_four() {
        assert!(signal("signal", limits::MIN_SIGNAL).is_ok());
        assert!(signal("signal", limits::MAX_SIGNAL).is_ok());
        assert_eq!(field_of(&signal("signal", 0).unwrap_err()), Some("signal"));
        assert!(signal("signal", limits::MAX_SIGNAL + 1).is_err());
    }
}
