//! `Templates.Build`'s parts, each testable without the RPC layer: the
//! header checked into a [`Build`] ([`check`]), the library's build run
//! with its events forwarded ([`run`]), and the library's build errors as
//! statuses ([`build_status`]).
//!
//! A build's events reach the client through an outbox: the library's
//! progress callback is synchronous, so it queues; a forwarder sends as
//! fast as the client reads. Steps and phases are always queued; a step's
//! output past [`MAX_QUEUED_OUTPUT`] waiting to be sent is dropped and the
//! client told how much, so a slow client cannot make the server hold a
//! build's whole output. A client that goes away ends its build.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, Notify};
use tonic::Status;

use airlock::template::build::OutputStream;
use airlock::template::{Base, BuildError, BuildEvent, BuildOptions, StepKind, TemplateSpec};
use airlock::{HostAccess, NetRule};
use airlock_api::limits;
use airlock_api::reason::{self, field_of, invalid};
use airlock_api::v1::{self as api, build_template_event::Event, ErrorReason};

use super::create::{host_rules, network, resources, Resources};
use crate::status::error_status;
use crate::validate;

/// A step's output waiting for a slow client, at most.
pub const MAX_QUEUED_OUTPUT: usize = 4 << 20;

/// A checked header.
#[derive(Debug)]
pub struct Build {
    pub name: String,
    pub spec: TemplateSpec,
    pub rules: Vec<NetRule>,
    pub resources: Resources,
    pub timeout: Duration,
    /// The context's size as the client announced it (0: unknown).
    pub context_bytes: u64,
}

/// `status` with its field as a field of the header (`header.memory_mib`).
fn in_header(status: Status) -> Status {
    match field_of(&status) {
        Some(field) => {
            let problem = status
                .message()
                .strip_prefix(&format!("{field}: "))
                .unwrap_or(status.message());
            invalid(&format!("header.{field}"), problem)
        }
        None => status,
    }
}

/// Checks a build's header, field by field, for a principal whose build
/// VMs have `host_access`: the name, the file (parsed with its build
/// arguments; a file that does not parse is refused naming its line), the
/// network rules, the guest's size and the timeout.
pub fn check(header: api::BuildTemplateHeader, host_access: HostAccess) -> Result<Build, Status> {
    validate::name("header.name", &header.name)?;
    if header.file.trim().is_empty() {
        return Err(invalid("header.file", "missing: the template file's text"));
    }
    if header.file.len() > limits::MAX_TEMPLATE_FILE_BYTES {
        return Err(invalid(
            "header.file",
            format!("longer than {} bytes", limits::MAX_TEMPLATE_FILE_BYTES),
        ));
    }
    if header.build_args.len() > limits::MAX_BUILD_ARGS {
        return Err(invalid(
            "header.build_args",
            format!("at most {}", limits::MAX_BUILD_ARGS),
        ));
    }
    let build_args: BTreeMap<String, String> =
        validate::envs("header.build_args", &header.build_args)?;
    let spec = TemplateSpec::parse(&header.file, &build_args)
        .map_err(|error| invalid("header.file", error))?;
    paths(&spec)?;
    let rules = network(&header.allow_net, &[]).map_err(in_header)?.rules;
    host_rules("header.allow_net", &rules, host_access)?;
    let resources = resources(header.memory_mib, header.vcpus).map_err(in_header)?;
    let timeout = match header.timeout_secs {
        0 => limits::DEFAULT_BUILD_TIMEOUT_SECS,
        secs => validate::within(
            "header.timeout_secs",
            secs,
            1,
            limits::MAX_BUILD_TIMEOUT_SECS,
        )?,
    };
    Ok(Build {
        name: header.name,
        spec,
        rules,
        resources,
        timeout: Duration::from_secs(u64::from(timeout)),
        context_bytes: header.context_bytes,
    })
}

/// Refuses what a file through the API may not read: a `COPY` source or a
/// `FROM` path outside the context the client sent (an absolute path
/// would be the server's own file). `..` the parser refuses itself.
fn paths(spec: &TemplateSpec) -> Result<(), Status> {
    let outside = |path: &str| {
        Path::new(path).components().any(|part| {
            matches!(
                part,
                std::path::Component::RootDir | std::path::Component::ParentDir
            )
        })
    };
    if let Base::Path(path) = spec.base() {
        if outside(&path.to_string_lossy()) {
            return Err(invalid(
                "header.file",
                format!(
                    "FROM {}: a path outside the build context; send the image in the \
                     context and name it relative to it (FROM ./root.ext4)",
                    path.display()
                ),
            ));
        }
    }
    for step in spec.steps() {
        let StepKind::Copy(copy) = &step.kind else {
            continue;
        };
        if let Some(source) = copy.sources.iter().find(|source| outside(source)) {
            let line = step.line.map(|l| format!("line {l}: ")).unwrap_or_default();
            return Err(invalid(
                "header.file",
                format!(
                    "{line}COPY {source}: a source outside the build context; name it \
                     relative to the context you send"
                ),
            ));
        }
    }
    Ok(())
}

/// What a build's events wait in.
#[derive(Debug, Default)]
struct Outbox {
    events: VecDeque<api::BuildTemplateEvent>,
    /// Output bytes waiting.
    output: usize,
    /// Output bytes dropped since the last told.
    dropped: u64,
    /// The step that output was dropped from.
    dropped_step: u32,
}

impl Outbox {
    fn push(&mut self, event: BuildEvent) {
        let event = match event {
            BuildEvent::Step {
                number,
                total,
                instruction,
                cached,
                ..
            } => Event::Step(api::BuildStep {
                number: count(number),
                steps: count(total),
                instruction,
                cached,
            }),
            BuildEvent::Output {
                number,
                stream,
                data,
            } => {
                if self.output + data.len() > MAX_QUEUED_OUTPUT {
                    self.dropped += data.len() as u64;
                    self.dropped_step = count(number);
                    return;
                }
                self.output += data.len();
                Event::Log(api::BuildLog {
                    step: count(number),
                    data,
                    stderr: stream == OutputStream::Stderr,
                })
            }
            BuildEvent::Phase(phase) => Event::Phase(api::BuildPhase { phase }),
        };
        self.tell_dropped();
        self.events
            .push_back(api::BuildTemplateEvent { event: Some(event) });
    }

    /// Queues a note of the output dropped, if any was.
    fn tell_dropped(&mut self) {
        if self.dropped == 0 {
            return;
        }
        let note = format!(
            "[airlock: {} bytes of this step's output were not sent: the client read slower \
             than the build wrote]\n",
            self.dropped
        );
        self.events.push_back(api::BuildTemplateEvent {
            event: Some(Event::Log(api::BuildLog {
                step: self.dropped_step,
                data: Bytes::from(note),
                stderr: true,
            })),
        });
        self.dropped = 0;
    }

    fn take(&mut self) -> VecDeque<api::BuildTemplateEvent> {
        self.output = 0;
        std::mem::take(&mut self.events)
    }
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// How a build ended.
#[derive(Debug)]
pub enum Ended {
    Built(Box<airlock::template::NamedTemplate>),
    Failed(Status),
    /// The client went away; the build was stopped.
    Abandoned,
}

/// Runs the library's build of `build.spec` with `options`, sending its
/// events to `events` as they happen, within `build.timeout`.
pub async fn run(
    build: &Build,
    options: &BuildOptions,
    events: &mpsc::Sender<Result<api::BuildTemplateEvent, Status>>,
) -> Ended {
    let outbox = Arc::new(Mutex::new(Outbox::default()));
    let ready = Arc::new(Notify::new());
    let progress = {
        let outbox = Arc::clone(&outbox);
        let ready = Arc::clone(&ready);
        move |event: BuildEvent| {
            outbox
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(event);
            ready.notify_one();
        }
    };
    let take = || outbox.lock().unwrap_or_else(PoisonError::into_inner).take();
    let forward = async {
        loop {
            let batch = take();
            if batch.is_empty() {
                ready.notified().await;
                continue;
            }
            for event in batch {
                if events.send(Ok(event)).await.is_err() {
                    return;
                }
            }
        }
    };
    let building = tokio::time::timeout(
        build.timeout,
        airlock::template::build(&build.spec, options, progress),
    );
    let result = tokio::select! {
        result = building => result,
        () = forward => return Ended::Abandoned,
    };
    {
        let mut outbox = outbox.lock().unwrap_or_else(PoisonError::into_inner);
        outbox.tell_dropped();
    }
    for event in take() {
        if events.send(Ok(event)).await.is_err() {
            return Ended::Abandoned;
        }
    }
    match result {
        Ok(Ok(template)) => Ended::Built(Box::new(template)),
        Ok(Err(error)) => Ended::Failed(build_status(&error, &options.context_dir)),
        Err(_) => Ended::Failed(reason::status(
            ErrorReason::Timeout,
            format!(
                "the build took longer than its {} s (header.timeout_secs, at most {}); \
                 its steps so far are cached",
                build.timeout.as_secs(),
                limits::MAX_BUILD_TIMEOUT_SECS
            ),
        )),
    }
}

/// The status of a failed build. Paths in the context directory are
/// shown relative to it: the client sent the context, and the server's
/// own directories are none of its business.
pub fn build_status(error: &BuildError, context_dir: &Path) -> Status {
    let message = airlock::error_chain(error);
    let context = context_dir.display().to_string();
    let message = message
        .replace(&format!("{context}/"), "")
        .replace(&context, ".");
    match error {
        BuildError::BaseImage { .. } => reason::status(ErrorReason::NotFound, message),
        BuildError::NoRootImage { .. }
        | BuildError::NoBaseResolver { .. }
        | BuildError::BaseResolve { .. } => invalid("header.file", message),
        BuildError::Context { .. } => invalid("context", message),
        BuildError::Rule(_) => invalid("header.allow_net", message),
        BuildError::Named(airlock::template::NamedError::BadName(_)) => {
            invalid("header.name", message)
        }
        BuildError::StepFailed { .. } | BuildError::Start(_) | BuildError::Host(_) => {
            reason::status(ErrorReason::GuestRefused, message)
        }
        BuildError::MissingTool { .. } => reason::status(ErrorReason::Unsupported, message),
        BuildError::Refused(_) => reason::status(ErrorReason::QuotaExceeded, message),
        BuildError::Sandbox(inner) => {
            let status = error_status(inner);
            Status::with_metadata(status.code(), message, status.metadata().clone())
        }
        _ => reason::status(ErrorReason::Internal, message),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use airlock_api::reason::reason_of;

    fn header(file: &str) -> api::BuildTemplateHeader {
        api::BuildTemplateHeader {
            name: "web".into(),
            file: file.into(),
            ..api::BuildTemplateHeader::default()
        }
    }

    const FILE: &str = "FROM default\nCOPY app/ /srv/\nRUN echo hi\n";

    #[test]
    fn a_good_header_gets_the_defaults() {
        let build = check(header(FILE), HostAccess::Denied).unwrap();
        assert_eq!(build.name, "web");
        assert_eq!(build.spec.steps().len(), 2);
        assert_eq!(build.timeout, Duration::from_secs(1800));
        assert_eq!(
            build.resources.memory_mib,
            crate::machine::DEFAULT_MEMORY_MIB
        );
        assert!(build.rules.is_empty());
    }

    #[test]
    fn each_bad_field_is_named() {
        let cases: Vec<(api::BuildTemplateHeader, &str)> = vec![
            (
                api::BuildTemplateHeader {
                    name: "a b".into(),
                    ..header(FILE)
                },
                "header.name",
            ),
            (header(""), "header.file"),
            (
                header(&"#".repeat(limits::MAX_TEMPLATE_FILE_BYTES + 1)),
                "header.file",
            ),
            (
                api::BuildTemplateHeader {
                    build_args: (0..65).map(|i| (format!("A{i}"), String::new())).collect(),
                    ..header(FILE)
                },
                "header.build_args",
            ),
            (
                api::BuildTemplateHeader {
                    allow_net: vec!["not a rule!".into()],
                    ..header(FILE)
                },
                "header.allow_net",
            ),
            (
                api::BuildTemplateHeader {
                    allow_net: vec!["127.0.0.1:5432".into()],
                    ..header(FILE)
                },
                "header.allow_net[0]",
            ),
            (
                api::BuildTemplateHeader {
                    memory_mib: 1,
                    ..header(FILE)
                },
                "header.memory_mib",
            ),
            (
                api::BuildTemplateHeader {
                    timeout_secs: limits::MAX_BUILD_TIMEOUT_SECS + 1,
                    ..header(FILE)
                },
                "header.timeout_secs",
            ),
        ];
        for (asked, field) in cases {
            let refused = check(asked, HostAccess::Denied).unwrap_err();
            assert_eq!(field_of(&refused), Some(field), "{refused:?}");
            assert!(refused.message().starts_with(field), "{refused:?}");
        }
    }

    #[test]
    fn a_malformed_file_is_refused_naming_its_line() {
        let refused = check(
            header("FROM default\nRUN true\nCMD [\"x\"]\n"),
            HostAccess::Denied,
        )
        .unwrap_err();
        assert_eq!(field_of(&refused), Some("header.file"));
        assert!(refused.message().contains("line 3"), "{refused:?}");
    }

    #[test]
    fn paths_outside_the_context_are_refused() {
        for file in [
            "FROM default\nCOPY /etc/shadow /x\n",
            "FROM /var/lib/root.ext4\n",
        ] {
            let refused = check(header(file), HostAccess::Denied).unwrap_err();
            assert_eq!(field_of(&refused), Some("header.file"), "{refused:?}");
            assert!(
                refused.message().contains("outside the build context"),
                "{refused:?}"
            );
        }
        let refused = check(
            header("FROM default\nCOPY /etc/shadow /x\n"),
            HostAccess::Denied,
        )
        .unwrap_err();
        assert!(refused.message().contains("line 2"), "{refused:?}");
        assert!(check(header("FROM ./root.ext4\n"), HostAccess::Denied).is_ok());
    }

    #[test]
    fn build_errors_keep_their_kind_and_hide_the_servers_paths() {
        let dir = Path::new("/srv/data/templates/contexts/context-x");
        let missing = BuildError::Context {
            path: dir.join("app/main.py"),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        };
        let status = build_status(&missing, dir);
        assert_eq!(field_of(&status), Some("context"));
        assert!(!status.message().contains("/srv/data"), "{status:?}");
        assert!(status.message().contains("app/main.py"), "{status:?}");
        let failed = BuildError::StepFailed {
            number: 2,
            line: Some(3),
            instruction: "RUN false".into(),
            status: "exit code 1".into(),
            tail: String::new(),
        };
        let status = build_status(&failed, dir);
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        assert_eq!(reason_of(&status), Some(ErrorReason::GuestRefused));
        assert!(status.message().contains("step 2 at line 3"), "{status:?}");
        let refused = build_status(&BuildError::Refused("too big".into()), dir);
        assert_eq!(reason_of(&refused), Some(ErrorReason::QuotaExceeded));
    }

    #[test]
    fn output_past_the_bound_is_dropped_and_told() {
        let mut outbox = Outbox::default();
        let chunk = Bytes::from(vec![b'x'; MAX_QUEUED_OUTPUT / 2 + 1]);
        for _ in 0..3 {
            outbox.push(BuildEvent::Output {
                number: 1,
                stream: OutputStream::Stdout,
                data: chunk.clone(),
            });
        }
        outbox.push(BuildEvent::Phase("packing".into()));
        let events: Vec<_> = outbox.take().into_iter().filter_map(|e| e.event).collect();
        assert_eq!(events.len(), 3, "{events:?}");
        let Event::Log(note) = &events[1] else {
            panic!("{events:?}");
        };
        assert!(String::from_utf8_lossy(&note.data).contains("were not sent"));
        assert!(matches!(events[2], Event::Phase(_)));
    }
}
