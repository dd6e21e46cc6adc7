//! The agent reaps everything it spawns, including orphans, and keeps
//! programs running when their client goes away.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use airlock_proto::v1::exited::Status as ExitStatus;
use airlock_proto::v1::{process_event, CheckRequest};
use common::{assert_gone, proc_state, request, Agent};

#[tokio::test]
async fn orphans_are_adopted_and_reaped() {
    let agent = Agent::start().await;
    let out = agent
        .run_argv(&["sh", "-c", "sleep 1 >/dev/null 2>&1 & echo $!"])
        .await
        .unwrap();
    assert_eq!(out.exit, ExitStatus::Code(0));
    let orphan: u32 = out.stdout_text().trim().parse().unwrap();
    if let Some((state, ppid)) = proc_state(orphan) {
        assert_eq!(
            ppid,
            agent.pid(),
            "orphan (state {state}) not adopted by the agent"
        );
    }
    assert_gone(orphan).await;
    assert_gone(out.pid).await;
}

#[tokio::test]
async fn dropped_client_leaves_program_running_to_completion() {
    let agent = Agent::start().await;
    let marker = agent.dir().join("finished");
    // More output than a pipe holds: if nobody read it, the program would
    // block forever and never write the marker.
    let script = format!(
        "sleep 0.3; seq 1 300000; seq 1 300000 >&2; echo ok > {}",
        marker.display()
    );
    let mut stream = agent
        .process()
        .start(request(&["sh", "-c", &script]))
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap();
    let Some(process_event::Event::Started(started)) = first.event else {
        panic!("first event is not started: {first:?}");
    };
    drop(stream);

    let deadline = Instant::now() + Duration::from_secs(20);
    while !Path::new(&marker).exists() {
        assert!(
            Instant::now() < deadline,
            "program stopped when its client left"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_gone(started.pid).await;

    agent.health().check(CheckRequest {}).await.unwrap();
    let out = agent.run_argv(&["echo", "after"]).await.unwrap();
    assert_eq!(out.stdout_text(), "after\n");
}
