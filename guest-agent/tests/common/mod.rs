//! Runs the real `airlock-agent` binary on a Unix socket in a temporary
//! directory and connects the generated gRPC clients to it, as the host
//! bridge would over vsock.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use airlock_proto::v1::health_client::HealthClient;
use airlock_proto::v1::process_client::ProcessClient;
use airlock_proto::v1::system_client::SystemClient;
use airlock_proto::v1::{exited, process_event, ProcessEvent, StartRequest};
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

/// Everything a program's stream carried.
#[derive(Debug)]
pub struct Outcome {
    pub pid: u32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit: exited::Status,
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
    let mut exit = None;
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
            process_event::Event::Exited(e) => exit = Some(e.status.expect("exit status")),
        }
    }
    Ok(Outcome {
        pid: pid.expect("no started event"),
        stdout,
        stderr,
        exit: exit.expect("stream ended without exited"),
    })
}
