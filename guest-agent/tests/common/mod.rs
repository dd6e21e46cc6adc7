//! Runs the real `airlock-agent` binary on a Unix socket in a temporary
//! directory and connects the generated gRPC clients to it, as the host
//! bridge would over vsock.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use airlock_proto::v1::code_client::CodeClient;
use airlock_proto::v1::files_client::FilesClient;
use airlock_proto::v1::health_client::HealthClient;
use airlock_proto::v1::network_client::NetworkClient;
use airlock_proto::v1::process_client::ProcessClient;
use airlock_proto::v1::system_client::SystemClient;
use airlock_proto::v1::{
    exited, process_event, process_selector, Exited, ProcessEvent, ProcessSelector, StartRequest,
    StdinMode,
};
use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint};
use tonic::{Status, Streaming};

/// A variable set in the agent's own environment, which programs it runs
/// must not see.
pub const AGENT_ONLY_VAR: &str = "AIRLOCK_TEST_AGENT_ONLY";

/// A running agent; killed when dropped.
pub struct Agent {
    child: Child,
    dir: tempfile::TempDir,
    channel: Option<Channel>,
}

impl Agent {
    /// Starts the agent and waits until it answers.
    pub async fn start() -> Agent {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("agent.sock");
        let log = std::fs::File::create(dir.path().join("agent.log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_airlock-agent"))
            .arg("--listen")
            .arg(format!("unix:{}", socket.display()))
            .env(AGENT_ONLY_VAR, "leaked")
            .env("RUST_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut agent = Agent {
            child,
            dir,
            channel: None,
        };
        agent.channel = Some(agent.connect(&socket).await);
        agent
    }

    async fn connect(&mut self, socket: &Path) -> Channel {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("agent exited early ({status}):\n{}", self.log());
            }
            if socket.exists() {
                let path = socket.to_owned();
                let connected = Endpoint::from_static("http://agent")
                    .connect_with_connector(tower::service_fn(move |_| {
                        let path = path.clone();
                        async move {
                            Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?))
                        }
                    }))
                    .await;
                if let Ok(channel) = connected {
                    return channel;
                }
            }
            assert!(
                Instant::now() < deadline,
                "agent did not listen on {}:\n{}",
                socket.display(),
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("agent.sock")
    }

    /// The agent's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("agent.log")).unwrap_or_default()
    }

    fn channel(&self) -> Channel {
        self.channel.clone().expect("connected in start")
    }

    pub fn code(&self) -> CodeClient<Channel> {
        CodeClient::new(self.channel())
    }

    pub fn files(&self) -> FilesClient<Channel> {
        FilesClient::new(self.channel())
    }

    pub fn network(&self) -> NetworkClient<Channel> {
        NetworkClient::new(self.channel())
    }

    pub fn health(&self) -> HealthClient<Channel> {
        HealthClient::new(self.channel())
    }

    pub fn process(&self) -> ProcessClient<Channel> {
        ProcessClient::new(self.channel())
    }

    pub fn system(&self) -> SystemClient<Channel> {
        SystemClient::new(self.channel())
    }

    /// Waits up to `limit` for the agent to exit on its own.
    pub async fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    /// Runs a program to completion and collects what a user would see.
    pub async fn run(&self, req: StartRequest) -> Result<Outcome, Status> {
        let stream = self.process().start(req).await?.into_inner();
        collect(stream).await
    }

    /// Runs `argv` with no env or cwd.
    pub async fn run_argv(&self, argv: &[&str]) -> Result<Outcome, Status> {
        self.run(request(argv)).await
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A request for `argv` with no env and the default cwd.
pub fn request(argv: &[&str]) -> StartRequest {
    StartRequest {
        argv: argv.iter().map(|s| (*s).to_owned()).collect(),
        ..Default::default()
    }
}

/// A request for `argv` with a stdin pipe.
pub fn piped(argv: &[&str]) -> StartRequest {
    StartRequest {
        stdin: StdinMode::Pipe as i32,
        ..request(argv)
    }
}

/// Names a process by pid.
pub fn by_pid(pid: u32) -> Option<ProcessSelector> {
    Some(ProcessSelector {
        selector: Some(process_selector::Selector::Pid(pid)),
    })
}

/// Names a process by tag.
pub fn by_tag(tag: &str) -> Option<ProcessSelector> {
    Some(ProcessSelector {
        selector: Some(process_selector::Selector::Tag(tag.into())),
    })
}

/// Everything a program's stream carried.
#[derive(Debug)]
pub struct Outcome {
    pub pid: u32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit: exited::Status,
    /// The whole `exited` event (timed_out, oom_killed, duration).
    pub exited: Exited,
    /// Bytes the agent reported dropped (`dropped` events).
    pub dropped: u64,
}

impl Outcome {
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// Reads a stream to its end, checking the event order the protocol
/// promises: one `started` first, one `exited` last.
pub async fn collect(mut stream: Streaming<ProcessEvent>) -> Result<Outcome, Status> {
    let mut pid = None;
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let mut exit: Option<Exited> = None;
    let mut dropped = 0;
    while let Some(event) = stream.message().await? {
        assert!(exit.is_none(), "event after exited: {event:?}");
        match event.event.expect("event without a body") {
            process_event::Event::Started(s) => {
                assert!(pid.is_none(), "second started");
                pid = Some(s.pid);
            }
            process_event::Event::Stdout(b) => {
                assert!(pid.is_some(), "output before started");
                stdout.extend_from_slice(&b);
            }
            process_event::Event::Stderr(b) => {
                assert!(pid.is_some(), "output before started");
                stderr.extend_from_slice(&b);
            }
            process_event::Event::Dropped(d) => {
                assert!(pid.is_some(), "dropped before started");
                assert!(
                    stdout.is_empty() && stderr.is_empty(),
                    "dropped after output"
                );
                dropped += d.bytes;
            }
            process_event::Event::Exited(e) => exit = Some(e),
        }
    }
    let exited = exit.expect("stream ended without exited");
    Ok(Outcome {
        pid: pid.expect("no started event"),
        stdout,
        stderr,
        exit: exited.status.expect("exit status"),
        exited,
        dropped,
    })
}

/// Reads the `started` event a stream must begin with; returns the pid.
pub async fn started_pid(stream: &mut Streaming<ProcessEvent>) -> u32 {
    let first = stream
        .message()
        .await
        .unwrap()
        .expect("stream ended at once");
    match first.event {
        Some(process_event::Event::Started(s)) => s.pid,
        other => panic!("first event is not started: {other:?}"),
    }
}

/// Collects a stream whose `started` event was already read (the outcome's
/// pid is 0).
pub async fn collect_after_started(mut stream: Streaming<ProcessEvent>) -> Outcome {
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let mut dropped = 0;
    loop {
        let event = stream.message().await.unwrap().expect("stream ended early");
        match event.event.expect("event without a body") {
            process_event::Event::Stdout(b) => stdout.extend_from_slice(&b),
            process_event::Event::Stderr(b) => stderr.extend_from_slice(&b),
            process_event::Event::Dropped(d) => dropped += d.bytes,
            process_event::Event::Exited(e) => {
                assert!(
                    stream.message().await.unwrap().is_none(),
                    "event after exited"
                );
                return Outcome {
                    pid: 0,
                    stdout,
                    stderr,
                    exit: e.status.expect("exit status"),
                    exited: e,
                    dropped,
                };
            }
            process_event::Event::Started(_) => panic!("second started"),
        }
    }
}

/// The process state letter and parent pid from `/proc/PID/stat`, if the
/// pid still exists.
pub fn proc_state(pid: u32) -> Option<(char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_comm = &stat[stat.rfind(')')? + 2..];
    let mut fields = after_comm.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Waits until `pid` no longer exists, failing if it lingers (as a zombie
/// it would, if nobody reaped it).
pub async fn assert_gone(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while let Some(state) = proc_state(pid) {
        assert!(
            Instant::now() < deadline,
            "pid {pid} still exists: {state:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A process's resident memory in KiB, from `/proc/PID/status` (`VmRSS` or
/// `VmHWM`, the peak).
pub fn memory_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}
