//! The sandbox lifecycle on the process backend: the agent runs as a plain
//! host process on a Unix socket (`SandboxBuilder::process_backend`), so
//! the lifetime ceiling, the idle policy, the unresponsive-agent watchdog,
//! a VMM that exits by itself and reconnects are checked in milliseconds,
//! without QEMU. `controls.rs`, `lifecycle.rs` and `reconnect.rs` check the
//! same on real VMs.
//!
//! Needs `target/debug/airlock-agent` (`cargo build -p airlock-agent`;
//! `scripts/test` builds it).

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use airlock::transport::AgentTransport;
use airlock::{Command, EndReason, Error, IdlePolicy, Sandbox, SandboxBuilder, SandboxState};
use airlock_proto::v1::health_client::HealthClient;
use airlock_proto::v1::process_client::ProcessClient;
use airlock_proto::v1::{CheckRequest, StartRequest};
use airlock_tests::{process_builder, stdout_of};
use tokio::sync::watch;

/// How long anything here may take to happen before the test fails.
const PATIENCE: Duration = Duration::from_secs(10);

async fn start(builder: SandboxBuilder) -> Sandbox {
    builder
        .start()
        .await
        .expect("the agent process did not start")
}

/// The agent's pid: the one process whose command line names the state
/// directory (its `--listen unix:` socket).
fn agent_pid(sandbox: &Sandbox) -> u32 {
    let pids = airlock_tests::processes_mentioning(sandbox.state_dir());
    assert_eq!(pids.len(), 1, "agent processes: {pids:?}");
    pids[0]
}

/// The one-letter state of process `pid` (`T` when stopped).
fn process_state(pid: u32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit(')')
        .next()
        .and_then(|rest| rest.trim_start().chars().next())
        .unwrap_or('?')
}

fn send_signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{signal} {pid}");
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_lifetime_ceiling_ends_the_sandbox_and_fails_open_calls() {
    const CEILING: Duration = Duration::from_millis(800);
    let sandbox = start(process_builder().max_lifetime(Some(CEILING))).await;
    let mut sleeper = sandbox
        .exec(Command::new("sleep").arg("30"))
        .await
        .expect("sleep starts");
    let error = tokio::time::timeout(PATIENCE, async {
        loop {
            match sleeper.next_event().await {
                Ok(Some(_)) => {}
                Ok(None) => panic!("sleep 30 ended by itself"),
                Err(error) => break error,
            }
        }
    })
    .await
    .expect("the open call failed");
    match &error {
        Error::VmGone {
            reason: EndReason::LifetimeExceeded { limit },
            ..
        } => assert_eq!(*limit, CEILING),
        other => panic!("unexpected error: {other}"),
    }
    assert_eq!(
        sandbox.state(),
        SandboxState::Ended(EndReason::LifetimeExceeded { limit: CEILING })
    );
    let again = sandbox.exec(Command::new("true")).await.unwrap_err();
    assert!(
        matches!(again, Error::SandboxEnded { .. }),
        "a call after the end: {again}"
    );
    assert!(airlock_tests::processes_mentioning(sandbox.state_dir()).is_empty());
}

#[tokio::test]
async fn an_idle_sandbox_is_paused_and_the_next_call_resumes_it() {
    const IDLE: Duration = Duration::from_millis(300);
    let sandbox = start(process_builder().idle_timeout(IDLE, IdlePolicy::Pause)).await;
    let agent = agent_pid(&sandbox);
    // A call in flight (an open output stream) keeps it awake.
    let sleeper = sandbox
        .exec(Command::new("sleep").arg("1"))
        .await
        .expect("sleep starts");
    tokio::time::sleep(IDLE * 2).await;
    assert_eq!(sandbox.state(), SandboxState::Running);
    sleeper.wait().await.expect("sleep ends");

    until("paused after going idle", || {
        sandbox.state() == SandboxState::Paused
    })
    .await;
    // SIGSTOP takes effect when the agent next enters the kernel; /proc
    // shows it stopped once it has (a busy machine may take a moment).
    until("the paused agent is stopped", || {
        process_state(agent) == 'T'
    })
    .await;
    // The default policy resumes on the next call.
    assert_eq!(stdout_of(&sandbox, "echo awake").await, "awake\n");
    assert_eq!(sandbox.state(), SandboxState::Running);
    assert_ne!(process_state(agent), 'T', "the resumed agent runs");
}

#[tokio::test]
async fn an_idle_sandbox_can_be_stopped_instead() {
    const IDLE: Duration = Duration::from_millis(300);
    let sandbox = start(process_builder().idle_timeout(IDLE, IdlePolicy::Stop)).await;
    until("stopped after going idle", || {
        sandbox.end_reason().is_some()
    })
    .await;
    assert_eq!(sandbox.end_reason(), Some(EndReason::Idle { after: IDLE }));
    assert!(airlock_tests::processes_mentioning(sandbox.state_dir()).is_empty());
}

#[tokio::test]
async fn an_unresponsive_agent_is_killed_and_calls_say_why() {
    const AFTER: Duration = Duration::from_secs(1);
    let sandbox = start(process_builder().unresponsive_after(Some(AFTER))).await;
    // Frozen from outside: the sandbox still thinks it runs.
    send_signal(agent_pid(&sandbox), "STOP");
    until("killed as unresponsive", || sandbox.end_reason().is_some()).await;
    assert_eq!(
        sandbox.end_reason(),
        Some(EndReason::Unresponsive { after: AFTER })
    );
    let error = sandbox.health().await.unwrap_err();
    assert!(
        matches!(
            error,
            Error::SandboxEnded {
                reason: EndReason::Unresponsive { .. }
            }
        ),
        "{error}"
    );
    assert!(airlock_tests::processes_mentioning(sandbox.state_dir()).is_empty());
}

#[tokio::test]
async fn an_agent_that_exits_by_itself_ends_the_sandbox() {
    let sandbox = start(process_builder()).await;
    send_signal(agent_pid(&sandbox), "KILL");
    until("noticed the exit", || sandbox.end_reason().is_some()).await;
    assert!(
        matches!(sandbox.end_reason(), Some(EndReason::VmExited { .. })),
        "{:?}",
        sandbox.end_reason()
    );
}

#[tokio::test]
async fn shutdown_stops_the_agent_gracefully() {
    let sandbox = start(process_builder()).await;
    let state_dir = sandbox.state_dir().to_owned();
    sandbox
        .shutdown(Duration::from_secs(5))
        .await
        .expect("shutdown");
    assert!(airlock_tests::processes_mentioning(&state_dir).is_empty());
}

#[tokio::test]
async fn a_broken_connection_fails_open_calls_and_redials_for_new_ones() {
    let sandbox = start(process_builder()).await;
    let dir = tempfile::tempdir().unwrap();
    let front = dir.path().join("relay.sock");
    let (cut, cut_rx) = watch::channel(0u32);
    airlock_tests::relay(
        front.clone(),
        sandbox.state_dir().join("agent.sock"),
        cut_rx,
    );
    let channel = AgentTransport::Unix(front)
        .channel()
        .await
        .expect("channel through the relay");
    let mut health = HealthClient::new(channel.clone());
    health.check(CheckRequest {}).await.expect("first call");

    let mut events = ProcessClient::new(channel.clone())
        .start(StartRequest {
            argv: vec!["sleep".into(), "30".into()],
            ..Default::default()
        })
        .await
        .expect("start")
        .into_inner();
    events.message().await.expect("started event");

    cut.send_modify(|g| *g += 1);
    let error = tokio::time::timeout(PATIENCE, events.message())
        .await
        .expect("the open stream noticed the break")
        .expect_err("the open stream fails");
    assert!(!error.message().is_empty(), "{error:?}");

    health
        .check(CheckRequest {})
        .await
        .expect("a new call after the break");
    sandbox.health().await.expect("the sandbox's own channel");
}
