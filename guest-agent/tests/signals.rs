//! SendSignal and the agent-enforced deadline: whole trees die, nothing is
//! left behind, and the output so far is delivered.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use airlock_proto::v1::exited::Status as ExitStatus;
use airlock_proto::v1::{process_event, SendSignalRequest};
use common::{assert_gone, by_pid, collect_after_started, request, started_pid, Agent};
use tonic::Code;

fn signal(pid: u32, signal: i32, leader_only: bool) -> SendSignalRequest {
    SendSignalRequest {
        process: by_pid(pid),
        signal,
        leader_only,
    }
}

/// Starts `script`, reads its first stdout line (pids it prints), and
/// returns the stream positioned after it.
async fn start_and_read_line(
    agent: &Agent,
    script: &str,
) -> (
    u32,
    String,
    tonic::Streaming<airlock_proto::v1::ProcessEvent>,
) {
    let mut stream = agent
        .process()
        .start(request(&["sh", "-c", script]))
        .await
        .unwrap()
        .into_inner();
    let pid = started_pid(&mut stream).await;
    let mut line = Vec::new();
    while !line.ends_with(b"\n") {
        match stream.message().await.unwrap().unwrap().event.unwrap() {
            process_event::Event::Stdout(b) => line.extend_from_slice(&b),
            other => panic!("unexpected {other:?}"),
        }
    }
    (pid, String::from_utf8(line).unwrap(), stream)
}

#[tokio::test]
async fn sigterm_kills_the_whole_tree_and_leaves_nothing_behind() {
    let agent = Agent::start().await;
    let (pid, line, stream) =
        start_and_read_line(&agent, "sleep 1000 & a=$!; sleep 1000 & echo $a $!; wait").await;
    let children: Vec<u32> = line
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(children.len(), 2);

    agent
        .process()
        .send_signal(signal(pid, 15, false))
        .await
        .unwrap();
    let out = tokio::time::timeout(Duration::from_secs(20), collect_after_started(stream))
        .await
        .expect("the tree did not die");
    assert_eq!(out.exit, ExitStatus::Signal(15));
    assert!(!out.exited.timed_out);
    for child in children {
        assert_gone(child).await;
    }

    // Nothing left to signal.
    let err = agent
        .process()
        .send_signal(signal(pid, 15, false))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
}

#[tokio::test]
async fn leader_only_spares_the_children() {
    let agent = Agent::start().await;
    let (pid, line, stream) =
        start_and_read_line(&agent, "sleep 1000 >/dev/null 2>&1 & echo $!; wait").await;
    let child: u32 = line.trim().parse().unwrap();
    agent
        .process()
        .send_signal(signal(pid, 9, true))
        .await
        .unwrap();
    let out = collect_after_started(stream).await;
    assert_eq!(out.exit, ExitStatus::Signal(9));
    assert!(
        common::proc_state(child).is_some(),
        "the child was killed too"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert_gone(child).await;
}

#[tokio::test]
async fn any_signal_reaches_the_program() {
    let agent = Agent::start().await;
    let (pid, _, stream) = start_and_read_line(
        &agent,
        "trap 'echo got-usr1; exit 7' USR1; echo ready; while :; do sleep 0.05; done",
    )
    .await;
    agent
        .process()
        .send_signal(signal(pid, 10, false))
        .await
        .unwrap();
    let out = collect_after_started(stream).await;
    assert_eq!(out.stdout_text(), "got-usr1\n");
    assert_eq!(out.exit, ExitStatus::Code(7));
}

#[tokio::test]
async fn bad_signals_and_unknown_processes_are_refused() {
    let agent = Agent::start().await;
    let (pid, _, _stream) = start_and_read_line(&agent, "echo up; sleep 5").await;
    for bad in [0, -3, 99] {
        let err = agent
            .process()
            .send_signal(signal(pid, bad, false))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{bad}: {err:?}");
    }
    let err = agent
        .process()
        .send_signal(signal(999_999_999, 15, false))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    agent
        .process()
        .send_signal(signal(pid, 9, false))
        .await
        .unwrap();
}

#[tokio::test]
async fn the_deadline_kills_the_tree_and_delivers_the_output_so_far() {
    let agent = Agent::start().await;
    let mut req = request(&[
        "sh",
        "-c",
        "echo before; echo err >&2; sleep 1000 & echo $!; wait; echo after",
    ]);
    req.timeout_ms = 700;
    let begun = Instant::now();
    let out = agent.run(req).await.unwrap();
    let elapsed = begun.elapsed();
    let lines: Vec<&str> = out
        .stdout
        .split(|b| *b == b'\n')
        .map(|l| std::str::from_utf8(l).unwrap())
        .collect();
    assert_eq!(lines[0], "before");
    assert_eq!(out.stderr_text(), "err\n");
    assert!(!out.stdout_text().contains("after"));
    assert!(out.exited.timed_out, "{:?}", out.exited);
    assert_eq!(out.exit, ExitStatus::Signal(9));
    assert!(out.exited.duration_us >= 700_000, "{:?}", out.exited);
    assert!(elapsed < Duration::from_secs(20), "took {elapsed:?}");
    let grandchild: u32 = lines[1].parse().unwrap();
    assert_gone(grandchild).await;

    // A program that finishes in time is not marked.
    let mut req = request(&["true"]);
    req.timeout_ms = 60_000;
    let out = agent.run(req).await.unwrap();
    assert!(!out.exited.timed_out);
    assert_eq!(out.exit, ExitStatus::Code(0));
}
