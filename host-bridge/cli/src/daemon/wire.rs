//! The daemon's messages (`airlock.daemon.v1`, see
//! `proto/airlock/daemon/v1/daemon.proto`) mapped to and from the
//! library's and the CLI's types, each mapping in one place: program
//! options, exits, sandbox entries, the idle policy, a cell and its events,
//! and errors as gRPC statuses.

use std::time::Duration;

use airlock_proto::daemon::v1 as pb;
use airlock_proto::v1::{
    code_event, exited, process_event, CellDone, CellStatus as ProtoCellStatus,
    CodeError as ProtoCodeError, CodeEvent, Exited, MimeData, ProcessEvent, RichOutput,
};
use tonic::metadata::MetadataValue;
use tonic::{Code, Status};

use crate::commands::{ProgramOptions, ProgramOptionsError};
use airlock::{error_chain, Cell, CellEvent, CellStatus, Event, Exit, ExitStatus, MimeBundle};

/// The largest message either side sends or accepts.
pub const MAX_MESSAGE_BYTES: usize = 4 << 20;

/// The most bytes of program output or stdin in one message.
pub const DATA_CHUNK: usize = 64 * 1024;

/// The metadata key whose value names the failure
/// ([`pb::ErrorReason`]'s value name).
pub const ERROR_REASON_KEY: &str = "airlock-error";

/// A status with a code, a message for the user, and the reason for programs.
pub fn status(code: Code, reason: pb::ErrorReason, message: impl Into<String>) -> Status {
    let mut status = Status::new(code, message);
    status.metadata_mut().insert(
        ERROR_REASON_KEY,
        MetadataValue::from_static(reason.as_str_name()),
    );
    status
}

/// The one mapping of the library's errors to statuses; the message is the
/// error's `Display` chain, as the CLI prints it.
pub fn error_status(error: &airlock::Error) -> Status {
    use airlock::Error;
    use pb::ErrorReason as R;
    let (code, reason) = match error {
        Error::NoSuchSandbox { .. } => (Code::NotFound, R::NoSuchSandbox),
        Error::TooManySandboxes { .. } => (Code::ResourceExhausted, R::TooManySandboxes),
        Error::Config(_) => (Code::InvalidArgument, R::InvalidArgument),
        Error::Paused => (Code::FailedPrecondition, R::Paused),
        Error::SandboxEnded { .. } | Error::VmGone { .. } => (Code::FailedPrecondition, R::Ended),
        Error::CannotSave { .. } => (Code::FailedPrecondition, R::InvalidArgument),
        Error::SavedDuringCall { .. } => (Code::Unavailable, R::SavedDuringCall),
        Error::Saved(airlock::saved::SavedError::NotSaved { .. }) => {
            (Code::NotFound, R::NoSuchSandbox)
        }
        Error::Pool(airlock::PoolError::TooLarge { .. }) => {
            (Code::InvalidArgument, R::InvalidArgument)
        }
        _ => (Code::Internal, R::Internal),
    };
    status(code, reason, error_chain(error))
}

/// Options that make no command are the client's mistake.
pub fn options_status(error: &ProgramOptionsError) -> Status {
    status(
        Code::InvalidArgument,
        pb::ErrorReason::InvalidArgument,
        error.to_string(),
    )
}

/// The reason a status carries, if the daemon set one.
pub fn reason(status: &Status) -> Option<pb::ErrorReason> {
    let value = status.metadata().get(ERROR_REASON_KEY)?.to_str().ok()?;
    pb::ErrorReason::from_str_name(value)
}

impl From<&ProgramOptions> for pb::ProgramOptions {
    fn from(options: &ProgramOptions) -> pb::ProgramOptions {
        pb::ProgramOptions {
            timeout_secs: options.timeout,
            env: options
                .env
                .iter()
                .map(|(key, value)| pb::EnvVar {
                    key: key.clone(),
                    value: value.clone(),
                })
                .collect(),
            cwd: options.cwd.clone(),
            user: options.user.clone(),
            limit_memory_bytes: options.limit_memory,
            limit_pids: options.limit_pids,
            limit_cpu_millis: options.limit_cpus,
            privileged: options.privileged,
        }
    }
}

impl From<pb::ProgramOptions> for ProgramOptions {
    fn from(options: pb::ProgramOptions) -> ProgramOptions {
        ProgramOptions {
            timeout: options.timeout_secs,
            env: options
                .env
                .into_iter()
                .map(|var| (var.key, var.value))
                .collect(),
            cwd: options.cwd,
            user: options.user,
            limit_memory: options.limit_memory_bytes,
            limit_pids: options.limit_pids,
            limit_cpus: options.limit_cpu_millis,
            privileged: options.privileged,
        }
    }
}

/// The idle policy of a create request.
pub fn idle_policy(policy: pb::IdlePolicy) -> Result<airlock::IdlePolicy, Status> {
    match policy {
        pb::IdlePolicy::Pause => Ok(airlock::IdlePolicy::Pause),
        pb::IdlePolicy::Stop => Ok(airlock::IdlePolicy::Stop),
        pb::IdlePolicy::PauseToDisk => Ok(airlock::IdlePolicy::PauseToDisk),
        pb::IdlePolicy::Unspecified => Err(status(
            Code::InvalidArgument,
            pb::ErrorReason::InvalidArgument,
            "an idle timeout needs an idle policy (pause, pause-to-disk or stop)",
        )),
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The manager's view of a sandbox, for the wire.
pub fn sandbox_info(info: &airlock::SandboxInfo) -> pb::SandboxInfo {
    use airlock::SandboxState;
    let (state, ended) = match &info.state {
        SandboxState::Running => (pb::SandboxState::Running, None),
        SandboxState::Paused => (pb::SandboxState::Paused, None),
        SandboxState::OnDisk => (pb::SandboxState::OnDisk, None),
        SandboxState::Ended(reason) => (pb::SandboxState::Ended, Some(reason.to_string())),
    };
    pb::SandboxInfo {
        id: info.id.clone(),
        state: state.into(),
        ended,
        wall_ms: millis(info.usage.wall),
        running_ms: millis(info.usage.running),
        guest_cpu_ms: millis(info.usage.guest_cpu),
    }
}

/// A sandbox saved to disk that the daemon does not hold, for the wire.
pub fn saved_info(record: &airlock::saved::SavedRecord) -> pb::SandboxInfo {
    pb::SandboxInfo {
        id: record.id.clone(),
        state: pb::SandboxState::OnDisk.into(),
        ended: None,
        wall_ms: record.usage.wall_ms,
        running_ms: record.usage.running_ms,
        guest_cpu_ms: record.usage.guest_cpu_ms,
    }
}

/// `running`, `paused`, `on-disk` or `ended`, as `sandbox ls` prints a state.
pub fn state_name(state: pb::SandboxState) -> &'static str {
    match state {
        pb::SandboxState::Running => "running",
        pb::SandboxState::Paused => "paused",
        pb::SandboxState::OnDisk => "on-disk",
        pb::SandboxState::Ended => "ended",
        pb::SandboxState::Unspecified => "unknown",
    }
}

/// A program event as messages (output split into [`DATA_CHUNK`]s).
pub fn event_messages(event: Event) -> Vec<ProcessEvent> {
    let message = |event| ProcessEvent {
        event: Some(event),
        offset: 0,
    };
    match event {
        Event::Stdout(data) => data
            .chunks(DATA_CHUNK)
            .map(|chunk| message(process_event::Event::Stdout(data.slice_ref(chunk))))
            .collect(),
        Event::Stderr(data) => data
            .chunks(DATA_CHUNK)
            .map(|chunk| message(process_event::Event::Stderr(data.slice_ref(chunk))))
            .collect(),
        Event::Dropped(bytes) => vec![message(process_event::Event::Dropped(
            airlock_proto::v1::OutputDropped { bytes },
        ))],
        Event::Exited(exit) => vec![message(process_event::Event::Exited(exited(&exit)))],
    }
}

/// The cell a run-code request asks for (not its context's creation).
pub fn cell(request: &pb::RunCodeRequest) -> Result<Cell, Status> {
    let invalid = |message: String| {
        status(
            Code::InvalidArgument,
            pb::ErrorReason::InvalidArgument,
            message,
        )
    };
    let mut cell = Cell::new(request.code.clone());
    if !request.language.is_empty() {
        cell = cell.language(request.language.parse().map_err(invalid)?);
    }
    if let Some(context) = &request.context {
        cell = cell.context(context.clone());
    }
    if let Some(secs) = request.timeout_secs {
        let timeout = Duration::try_from_secs_f64(secs)
            .ok()
            .filter(|t| !t.is_zero())
            .ok_or_else(|| invalid(format!("a timeout of {secs} seconds")))?;
        cell = cell.timeout(timeout);
    }
    Ok(cell)
}

/// A cell's event as messages (output split into [`DATA_CHUNK`]s).
pub fn cell_messages(event: CellEvent) -> Vec<CodeEvent> {
    let message = |event| CodeEvent { event: Some(event) };
    let bundle = |bundle: MimeBundle| RichOutput {
        data: bundle
            .iter()
            .map(|(mime, data)| MimeData {
                mime_type: mime.to_owned(),
                data: data.clone(),
            })
            .collect(),
    };
    match event {
        CellEvent::Stdout(data) => data
            .chunks(DATA_CHUNK)
            .map(|chunk| message(code_event::Event::Stdout(data.slice_ref(chunk))))
            .collect(),
        CellEvent::Stderr(data) => data
            .chunks(DATA_CHUNK)
            .map(|chunk| message(code_event::Event::Stderr(data.slice_ref(chunk))))
            .collect(),
        CellEvent::Result(result) => vec![message(code_event::Event::Result(bundle(result)))],
        CellEvent::Display(display) => vec![message(code_event::Event::Display(bundle(display)))],
        CellEvent::Error(error) => vec![message(code_event::Event::Error(ProtoCodeError {
            name: error.name,
            value: error.value,
            traceback: error.traceback,
        }))],
        CellEvent::Done(done) => vec![message(code_event::Event::Done(CellDone {
            status: match done.status {
                CellStatus::Ok => ProtoCellStatus::Ok,
                CellStatus::Error => ProtoCellStatus::Error,
                CellStatus::Interrupted => ProtoCellStatus::Interrupted,
            }
            .into(),
            execution_count: done.execution_count,
            timed_out: done.timed_out,
            context_restarted: done.context_restarted,
            duration_us: u64::try_from(done.duration.as_micros()).unwrap_or(u64::MAX),
        }))],
    }
}

/// `exit` on the wire.
pub fn exited(exit: &Exit) -> Exited {
    let status = match exit.status {
        ExitStatus::Code(code) => exited::Status::Code(code),
        ExitStatus::Signal(signal) => exited::Status::Signal(signal),
    };
    Exited {
        status: Some(status),
        timed_out: exit.timed_out,
        oom_killed: exit.oom_killed,
        duration_us: u64::try_from(exit.duration.as_micros()).unwrap_or(u64::MAX),
        usage: None,
        ..Exited::default()
    }
}

/// The exit on the wire; `None` when it has no status.
pub fn exit(exited: &Exited) -> Option<Exit> {
    let status = match exited.status? {
        exited::Status::Code(code) => ExitStatus::Code(code),
        exited::Status::Signal(signal) => ExitStatus::Signal(signal),
    };
    let mut exit = Exit::from_status(status);
    exit.timed_out = exited.timed_out;
    exit.oom_killed = exited.oom_killed;
    exit.duration = Duration::from_micros(exited.duration_us);
    Some(exit)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn program_options_survive_the_wire() {
        let options = ProgramOptions {
            timeout: Some(2.5),
            env: vec![("B".into(), "2".into()), ("A".into(), "1".into())],
            cwd: Some("/tmp".into()),
            user: Some("1000:1000".into()),
            limit_memory: Some(64 << 20),
            limit_pids: Some(8),
            limit_cpus: Some(500),
            privileged: true,
        };
        let back = ProgramOptions::from(pb::ProgramOptions::from(&options));
        assert_eq!(back, options);
        let none = ProgramOptions::from(pb::ProgramOptions::default());
        assert_eq!(none, ProgramOptions::default());
    }

    #[test]
    fn exits_survive_the_wire() {
        let mut exit = Exit::from_status(ExitStatus::Signal(9));
        exit.timed_out = true;
        exit.oom_killed = true;
        exit.duration = Duration::from_millis(1500);
        assert_eq!(super::exit(&exited(&exit)), Some(exit));
        let exit = Exit::from_status(ExitStatus::Code(3));
        assert_eq!(super::exit(&exited(&exit)), Some(exit));
        assert_eq!(super::exit(&Exited::default()), None);
    }

    #[test]
    fn output_is_chunked() {
        let data = airlock::Bytes::from(vec![7u8; DATA_CHUNK + 1]);
        let messages = event_messages(Event::Stderr(data));
        let sizes: Vec<_> = messages
            .iter()
            .map(|m| match &m.event {
                Some(process_event::Event::Stderr(chunk)) => chunk.len(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(sizes, [DATA_CHUNK, 1]);
    }

    #[test]
    fn cells_and_their_events_survive_the_wire() {
        let request = pb::RunCodeRequest {
            id: "sb".into(),
            language: "bash".into(),
            context: Some("work".into()),
            code: "echo hi".into(),
            timeout_secs: Some(2.5),
        };
        let cell = cell(&request).unwrap();
        let expected = Cell::new("echo hi")
            .language(airlock::Language::Bash)
            .context("work")
            .timeout(Duration::from_millis(2500));
        assert_eq!(cell, expected);
        let bad = pb::RunCodeRequest {
            timeout_secs: Some(-1.0),
            ..request.clone()
        };
        assert_eq!(super::cell(&bad).unwrap_err().code(), Code::InvalidArgument);
        let bad = pb::RunCodeRequest {
            language: "cobol".into(),
            ..request
        };
        assert_eq!(super::cell(&bad).unwrap_err().code(), Code::InvalidArgument);

        let result = MimeBundle::from_items([
            ("text/plain".to_owned(), airlock::Bytes::from_static(b"2")),
            (
                "application/json".to_owned(),
                airlock::Bytes::from_static(b"2"),
            ),
        ]);
        let done = airlock::CellDone {
            status: CellStatus::Interrupted,
            execution_count: 4,
            timed_out: true,
            context_restarted: false,
            duration: Duration::from_millis(30),
        };
        for event in [
            CellEvent::Result(result),
            CellEvent::Done(done),
            CellEvent::Error(airlock::CellError {
                name: "E".into(),
                value: "v".into(),
                traceback: vec!["t".into()],
            }),
        ] {
            let messages = cell_messages(event.clone());
            assert_eq!(messages.len(), 1);
            let back = CellEvent::from_proto(messages[0].clone()).unwrap();
            assert_eq!(back, event);
        }
    }

    #[test]
    fn errors_become_statuses_with_codes_and_reasons() {
        let cases = [
            (
                airlock::Error::NoSuchSandbox { id: "x".into() },
                Code::NotFound,
                pb::ErrorReason::NoSuchSandbox,
            ),
            (
                airlock::Error::TooManySandboxes { max: 2 },
                Code::ResourceExhausted,
                pb::ErrorReason::TooManySandboxes,
            ),
            (
                airlock::Error::Config("bad".into()),
                Code::InvalidArgument,
                pb::ErrorReason::InvalidArgument,
            ),
            (
                airlock::Error::Paused,
                Code::FailedPrecondition,
                pb::ErrorReason::Paused,
            ),
            (
                airlock::Error::Protocol("x".into()),
                Code::Internal,
                pb::ErrorReason::Internal,
            ),
        ];
        for (error, code, why) in cases {
            let status = error_status(&error);
            assert_eq!(status.code(), code, "{error}");
            assert_eq!(reason(&status), Some(why), "{error}");
            assert_eq!(status.message(), error.to_string());
        }
        let status = options_status(&ProgramOptionsError::NoProgram);
        assert_eq!(status.code(), Code::InvalidArgument);
        assert_eq!(status.message(), "no program to run");
    }
}
