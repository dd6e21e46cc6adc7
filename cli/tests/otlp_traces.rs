//! `airlock serve --otlp-endpoint ... --log-format json` as an operator
//! runs it, on a real VM: a loopback OTLP/gRPC trace receiver (what an
//! OpenTelemetry Collector or Jaeger listens with) takes the spans the
//! server exports while a client creates a sandbox, runs a program in it
//! and kills it; then the server stops, flushing what is left.
//!
//! The receiver must have a server span per API call (named as
//! OpenTelemetry names gRPC calls, with its status and sandbox), the
//! create's span must hold the start of the sandbox in parts (same trace,
//! each part's parent the span before it), and every line of the server's
//! stderr must be a JSON object.
//!
//! It boots a VM under QEMU: the kernel and initramfs of `scripts/setup`
//! must be there (a failure says so).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::Value;

/// How long one client may take: a boot under TCG on a loaded host.
const CLIENT_LIMIT: Duration = Duration::from_secs(300);
/// How long the server may take to come up, and to stop.
const SERVER_LIMIT: Duration = Duration::from_secs(60);
/// The service name the server is given.
const SERVICE_NAME: &str = "airlock-otlp-test";
/// The parts of a start every way of starting a VM has.
const START_PARTS: [&str; 4] = ["launch_vmm", "connect_agent", "dial_agent", "personalize"];

/// What the receiver was sent: the spans, and each span's service name.
#[derive(Debug, Default)]
struct Received {
    spans: Vec<(String, Span)>,
}

/// A loopback OTLP/gRPC trace receiver.
#[derive(Debug, Clone, Default)]
struct Receiver {
    received: Arc<Mutex<Received>>,
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut received = self.received.lock().unwrap();
        for resource_spans in request.into_inner().resource_spans {
            let service = resource_spans
                .resource
                .as_ref()
                .and_then(|resource| text(&resource.attributes, "service.name"))
                .unwrap_or_default()
                .to_owned();
            for scope in resource_spans.scope_spans {
                for span in scope.spans {
                    received.spans.push((service.clone(), span));
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

impl Receiver {
    /// Serves on a loopback port of `runtime`; its address.
    fn start(&self, runtime: &tokio::runtime::Runtime) -> SocketAddr {
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind the receiver");
        let address = listener.local_addr().expect("the receiver's address");
        let service = TraceServiceServer::new(self.clone());
        runtime.spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        address
    }

    fn spans(&self) -> Vec<(String, Span)> {
        self.received.lock().unwrap().spans.clone()
    }
}

/// The string attribute `key`.
fn text<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a str> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
        .and_then(|value| match value {
            any_value::Value::StringValue(text) => Some(text.as_str()),
            _ => None,
        })
}

/// The integer attribute `key`.
fn int(attributes: &[KeyValue], key: &str) -> Option<i64> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
        .and_then(|value| match value {
            any_value::Value::IntValue(number) => Some(*number),
            _ => None,
        })
}

/// Fails the test when the guest's kernel or initramfs is missing.
fn require_guest() {
    for path in [
        airlock::artifacts::default_kernel(),
        airlock::artifacts::default_initramfs(),
    ] {
        assert!(
            path.is_file(),
            "{} is missing: run scripts/setup (or scripts/test) first",
            path.display()
        );
    }
}

/// A running `airlock serve` in a private state directory, its stderr
/// collected line by line.
struct Server {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// Starts it with `args`, and waits until it serves on its socket.
    fn start(home: &Path, args: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_airlock"))
            .args(["--verbose", "serve", "--socket"])
            .arg(home.join("daemon.sock"))
            .args(["--on-exit", "kill"])
            .args(args)
            .envs(environment(home))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("airlock serve");
        let stderr = child.stderr.take().expect("its stderr");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (ready, serving) = mpsc::channel();
        let reader = std::thread::spawn({
            let lines = Arc::clone(&lines);
            move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if line.contains("serving on the Unix socket") {
                        let _ = ready.send(());
                    }
                    lines.lock().unwrap().push(line);
                }
            }
        });
        let mut server = Server {
            child,
            lines,
            reader: Some(reader),
        };
        if serving.recv_timeout(SERVER_LIMIT).is_err() {
            server.kill();
            panic!("airlock serve did not serve; its log:\n{}", server.log());
        }
        server
    }

    /// Its stderr so far.
    fn log(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// Stops it with SIGTERM (as a service manager does) and waits for it
    /// to exit and its stderr to end; whether it exited 0.
    fn stop(&mut self) -> bool {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap());
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
        let began = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                break status;
            }
            if began.elapsed() > SERVER_LIMIT {
                self.kill();
                panic!("airlock serve did not stop; its log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        status.success()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.kill();
        }
    }
}

/// Where the server and its clients keep their state.
fn environment(home: &Path) -> Vec<(&'static str, PathBuf)> {
    vec![
        ("AIRLOCK_STATE_DIR", home.to_owned()),
        ("AIRLOCK_SAVED_DIR", home.join("saved")),
        ("AIRLOCK_SERVER_DIR", home.join("server")),
    ]
}

/// Runs `airlock ARGS` against the server of `home`, within
/// [`CLIENT_LIMIT`], and requires success; its stdout.
fn client(home: &Path, server: &Server, args: &[&str]) -> String {
    let child = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(args)
        .envs(environment(home))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("an airlock client");
    let pid = child.id();
    let (done, finished) = mpsc::channel::<std::io::Result<Output>>();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    let out = match finished.recv_timeout(CLIENT_LIMIT) {
        Ok(out) => out.expect("the client's output"),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!(
                "airlock {args:?} took over {CLIENT_LIMIT:?}; the server's log:\n{}",
                server.log()
            );
        }
    };
    assert!(
        out.status.success(),
        "airlock {args:?} failed ({:?}): {}\nthe server's log:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        server.log()
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// The server span of the call `name`, with `sandbox` as its sandbox.
fn call_span<'a>(spans: &'a [(String, Span)], name: &str, sandbox: &str) -> &'a Span {
    let found = spans
        .iter()
        .map(|(_, span)| span)
        .find(|span| span.name == name && text(&span.attributes, "sandbox") == Some(sandbox));
    found.unwrap_or_else(|| {
        let names: Vec<&str> = spans.iter().map(|(_, span)| span.name.as_str()).collect();
        panic!("no span {name} for {sandbox}; the spans: {names:?}")
    })
}

#[test]
fn a_create_exec_and_kill_are_traced_with_the_start_in_parts() {
    require_guest();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let receiver = Receiver::default();
    let address = receiver.start(&runtime);
    let home = tempfile::tempdir().expect("a state directory");
    let endpoint = format!("http://{address}");
    let mut server = Server::start(
        home.path(),
        &[
            "--log-format",
            "json",
            "--otlp-endpoint",
            &endpoint,
            "--otlp-service-name",
            SERVICE_NAME,
        ],
    );
    let created = client(
        home.path(),
        &server,
        &["sandbox", "create", "--no-image", "--memory", "256"],
    );
    let id = created.trim();
    let said = client(
        home.path(),
        &server,
        &["sandbox", "exec", id, "--", "echo", "traced"],
    );
    assert_eq!(said, "traced\n");
    client(home.path(), &server, &["sandbox", "kill", id]);
    assert!(server.stop(), "the server's log:\n{}", server.log());

    let spans = receiver.spans();
    assert!(
        spans.iter().all(|(service, _)| service == SERVICE_NAME),
        "every span is the server's"
    );
    for (name, method) in [
        ("airlock.api.v1.Sandboxes/Create", "Create"),
        ("airlock.api.v1.Processes/Start", "Start"),
        ("airlock.api.v1.Sandboxes/Kill", "Kill"),
    ] {
        let span = call_span(&spans, name, id);
        assert_eq!(span.kind, SpanKind::Server as i32, "{name}'s kind");
        let status = int(&span.attributes, "rpc.grpc.status_code");
        match method {
            // The CLI hangs up once it has the program's exit event: the
            // trailers may have gone out before that, or not.
            "Start" => assert!(
                matches!(status, Some(0 | 1)),
                "{name}'s status: OK, or CANCELLED by the client after the exit ({status:?})"
            ),
            _ => assert_eq!(status, Some(0), "{name}'s status"),
        }
        assert_eq!(text(&span.attributes, "rpc.system"), Some("grpc"));
        assert_eq!(
            text(&span.attributes, "rpc.service"),
            name.split('/').next()
        );
        assert_eq!(text(&span.attributes, "rpc.method"), Some(method));
        assert!(span.parent_span_id.is_empty(), "{name} is a trace's root");
    }

    // The create holds the start, and the start its parts: one trace.
    let create = call_span(&spans, "airlock.api.v1.Sandboxes/Create", id);
    let in_trace: Vec<&Span> = spans
        .iter()
        .map(|(_, span)| span)
        .filter(|span| span.trace_id == create.trace_id)
        .collect();
    let start = in_trace
        .iter()
        .find(|span| span.name == "sandbox_start")
        .unwrap_or_else(|| panic!("no sandbox_start in the create's trace: {in_trace:#?}"));
    assert_eq!(
        start.parent_span_id, create.span_id,
        "the start's parent is the create"
    );
    let by_id: HashMap<&[u8], &Span> = in_trace
        .iter()
        .map(|span| (span.span_id.as_slice(), *span))
        .collect();
    let under_start = |span: &Span| {
        let mut parent = span.parent_span_id.as_slice();
        while let Some(up) = by_id.get(parent) {
            if up.span_id == start.span_id {
                return true;
            }
            parent = up.parent_span_id.as_slice();
        }
        false
    };
    for part in START_PARTS {
        let found = in_trace
            .iter()
            .find(|span| span.name == part)
            .unwrap_or_else(|| panic!("no {part} in the create's trace"));
        assert!(under_start(found), "{part} is a part of the start");
        assert!(
            found.start_time_unix_nano >= start.start_time_unix_nano
                && found.end_time_unix_nano <= start.end_time_unix_nano,
            "{part} is within the start"
        );
    }
    assert!(
        start.end_time_unix_nano <= create.end_time_unix_nano,
        "the start is within the create"
    );

    // The log: JSON objects, one a line, the create's in its call's span.
    let log = server.log();
    let lines: Vec<Value> = log
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    for line in &lines {
        assert!(
            line.get("level").is_some_and(Value::is_string) && line["fields"].is_object(),
            "no level or fields: {line}"
        );
    }
    let created = lines
        .iter()
        .find(|line| line["fields"]["message"] == "created")
        .unwrap_or_else(|| panic!("no line for the create:\n{log}"));
    assert_eq!(created["span"]["name"], "rpc", "{created}");
    assert_eq!(
        created["span"]["otel.name"], "airlock.api.v1.Sandboxes/Create",
        "{created}"
    );
    assert_eq!(created["fields"]["id"], id, "{created}");
}
