//! The daemon's messages (`airlock.daemon.v1`, see
//! `proto/airlock/daemon/v1/daemon.proto`) mapped to and from the
//! library's and the CLI's types, each mapping in one place: program
//! options, network options, exits, sandbox entries, the idle policy, a
//! cell and its events, network audit records, and errors as gRPC
//! statuses.

use std::time::Duration;

use airlock_proto::daemon::v1 as pb;
use airlock_proto::v1::{
    code_event, exited, process_event, CellDone, CellStatus as ProtoCellStatus,
    CodeError as ProtoCodeError, CodeEvent, Exited, MimeData, ProcessEvent, RichOutput,
};
use tonic::metadata::MetadataValue;
use tonic::{Code, Status};

use crate::commands::{NetOptions, ProgramOptions, ProgramOptionsError, SecretArg, SecretValue};
use airlock::{
    error_chain, AuditRecord, Cell, CellEvent, CellStatus, Event, Exit, ExitStatus, MimeBundle,
    NetRule,
};

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
        Error::ForkedDuringCall { .. } => (Code::Unavailable, R::ForkedDuringCall),
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

/// A failure of a sandbox's network call: the library refuses one on a
/// sandbox without network with a configuration error, which is no bad
/// argument of this call.
pub fn network_status(id: &str, error: &airlock::Error) -> Status {
    match error {
        airlock::Error::Config(_) => status(
            Code::FailedPrecondition,
            pb::ErrorReason::NoNetwork,
            format!(
                "sandbox {id} was created without network, and cannot get one now; create a \
                 sandbox with --allow-net RULE or --secret"
            ),
        ),
        other => error_status(other),
    }
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

impl From<&SecretArg> for pb::Secret {
    fn from(secret: &SecretArg) -> pb::Secret {
        pb::Secret {
            name: secret.name.clone(),
            value: secret.value.expose().to_owned(),
            hosts: secret.hosts.clone(),
        }
    }
}

impl From<pb::Secret> for SecretArg {
    fn from(secret: pb::Secret) -> SecretArg {
        SecretArg {
            name: secret.name,
            value: SecretValue::new(secret.value),
            hosts: secret.hosts,
        }
    }
}

/// Rules as the wire carries them (`--allow-net`'s text), parsed; a rule
/// that does not parse is the client's mistake.
pub fn rules(texts: &[String]) -> Result<Vec<NetRule>, Status> {
    texts
        .iter()
        .map(|text| {
            text.parse()
                .map_err(|error: airlock::network::policy::ParseRuleError| {
                    status(
                        Code::InvalidArgument,
                        pb::ErrorReason::InvalidArgument,
                        error.to_string(),
                    )
                })
        })
        .collect()
}

/// The network options of a create request.
pub fn net_options(create: &pb::CreateRequest) -> Result<NetOptions, Status> {
    Ok(NetOptions {
        allow_net: rules(&create.allow_net)?,
        secrets: create
            .secrets
            .iter()
            .cloned()
            .map(SecretArg::from)
            .collect(),
    })
}

/// The rules of a policy, as `--allow-net` takes them back.
pub fn rule_texts(policy: &airlock::NetworkPolicy) -> Vec<String> {
    policy.rules().iter().map(ToString::to_string).collect()
}

/// An audit record for the wire.
pub fn audit_record(record: &AuditRecord) -> pb::NetworkAuditRecord {
    let since = record
        .at
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    pb::NetworkAuditRecord {
        seq: record.seq,
        at_unix_ms: millis(since),
        protocol: record.protocol.to_string(),
        name: record.name.clone(),
        addr: record.addr.map(|addr| addr.to_string()),
        port: u32::from(record.port),
        allowed: record.verdict.is_allowed(),
        verdict: record.verdict.to_string(),
    }
}

/// A record's line, as the library's `Display` writes an
/// [`AuditRecord`]: `#SEQ SECONDS.MILLIS PROTOCOL DESTINATION VERDICT`.
pub fn audit_line(record: &pb::NetworkAuditRecord) -> String {
    let port = record.port;
    let destination = match (&record.name, &record.addr) {
        (Some(name), Some(addr)) => format!("{name}:{port} ({addr})"),
        (Some(name), None) => format!("{name}:{port}"),
        (None, Some(addr)) if addr.contains(':') => format!("[{addr}]:{port}"),
        (None, Some(addr)) => format!("{addr}:{port}"),
        (None, None) => format!("?:{port}"),
    };
    format!(
        "#{} {}.{:03} {} {destination} {}",
        record.seq,
        record.at_unix_ms / 1000,
        record.at_unix_ms % 1000,
        record.protocol,
        record.verdict
    )
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
    fn network_options_survive_the_wire_and_debug_hides_the_value() {
        let options = NetOptions {
            allow_net: vec!["pypi.org".parse().unwrap(), "[::1]:443".parse().unwrap()],
            secrets: vec![SecretArg {
                name: "API_KEY".into(),
                value: SecretValue::new("sk-never-shown"),
                hosts: vec!["api.test".into()],
            }],
        };
        let create = pb::CreateRequest {
            allow_net: options.allow_net.iter().map(ToString::to_string).collect(),
            secrets: options.secrets.iter().map(pb::Secret::from).collect(),
            ..pb::CreateRequest::default()
        };
        assert_eq!(create.allow_net, ["pypi.org", "[::1]:443"]);
        assert_eq!(net_options(&create).unwrap(), options);
        assert!(
            !format!("{create:?}").contains("sk-never-shown"),
            "{create:?}"
        );
        assert!(format!("{create:?}").contains("API_KEY"), "{create:?}");

        let bad = pb::CreateRequest {
            allow_net: vec!["10.0.0.1/8".into()],
            ..pb::CreateRequest::default()
        };
        let status = net_options(&bad).unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);
        assert!(status.message().contains("\"10.0.0.1/8\""), "{status:?}");
    }

    #[test]
    fn audit_lines_are_the_librarys_display() {
        use airlock::{NetProtocol, Refusal, Verdict};
        let at = std::time::UNIX_EPOCH + Duration::from_millis(1_754_000_000_042);
        let record = |protocol, name: Option<&str>, addr: Option<&str>, verdict| AuditRecord {
            seq: 7,
            at,
            protocol,
            name: name.map(str::to_owned),
            addr: addr.map(|a| a.parse().unwrap()),
            port: 443,
            verdict,
        };
        let records = [
            record(
                NetProtocol::Tls,
                Some("pypi.org"),
                Some("151.101.0.223"),
                Verdict::Allowed,
            ),
            record(
                NetProtocol::Dns,
                Some("refused.test"),
                None,
                Verdict::Refused(Refusal::NotAllowed),
            ),
            record(
                NetProtocol::Tcp,
                None,
                Some("192.0.2.9"),
                Verdict::Refused(Refusal::NotAllowed),
            ),
            record(
                NetProtocol::Tcp,
                None,
                Some("2001:db8::1"),
                Verdict::Refused(Refusal::TimedOut),
            ),
            record(
                NetProtocol::Proxy,
                None,
                None,
                Verdict::Refused(Refusal::TimedOut),
            ),
        ];
        for record in records {
            let wire = audit_record(&record);
            assert_eq!(wire.allowed, record.verdict.is_allowed());
            assert_eq!(audit_line(&wire), record.to_string());
        }
    }

    #[test]
    fn a_sandbox_without_network_is_a_failed_precondition() {
        let status = network_status("sb", &airlock::Error::Config("no network".into()));
        assert_eq!(status.code(), Code::FailedPrecondition);
        assert_eq!(reason(&status), Some(pb::ErrorReason::NoNetwork));
        assert!(status.message().contains("--allow-net"), "{status:?}");
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
