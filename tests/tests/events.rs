//! Lifecycle events of what needs a VM, through the API on real VMs: a
//! snapshot is `snapshotted` with its name, a fork is `forked` with its
//! children, each child is `created` from its parent, and a sandbox started
//! from the snapshot is `created` from it; each in order on the owner's
//! `Events.Watch`. (The rest of a sandbox's life, and webhooks, are tested
//! on the process backend: `server/tests/events.rs`.)

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use airlock_client::api;
use airlock_testkit::server::{Options, TestServer};

fn builder() -> airlock::SandboxBuilder {
    airlock_tests::builder().image(airlock_tests::default_image())
}

async fn next(stream: &mut tonic::Streaming<api::SandboxEvent>) -> api::SandboxEvent {
    tokio::time::timeout(Duration::from_secs(120), stream.message())
        .await
        .expect("an event within two minutes")
        .expect("the stream")
        .expect("the stream goes on")
}

#[tokio::test]
async fn snapshot_and_fork_are_events() {
    let server = TestServer::start_with(Options::default(), builder).await;
    let owner = server.owner().await;
    let mut events = owner
        .events()
        .watch(api::WatchEventsRequest::default())
        .await
        .unwrap()
        .into_inner();
    let mut sandboxes = owner.sandboxes();
    let parent = sandboxes
        .create(api::CreateSandboxRequest::default())
        .await
        .expect("create a sandbox")
        .into_inner()
        .sandbox_id;
    let created = next(&mut events).await;
    assert_eq!(
        (created.kind, created.sandbox_id.as_str()),
        (api::EventKind::Created as i32, parent.as_str())
    );

    sandboxes
        .snapshot(api::SnapshotSandboxRequest {
            sandbox_id: parent.clone(),
            name: "events-base".to_owned(),
        })
        .await
        .expect("snapshot");
    let snapshotted = next(&mut events).await;
    assert_eq!(snapshotted.kind, api::EventKind::Snapshotted as i32);
    assert_eq!(snapshotted.sandbox_id, parent);
    assert_eq!(snapshotted.snapshot, "events-base");

    let child = sandboxes
        .fork(api::ForkSandboxRequest {
            sandbox_id: parent.clone(),
            count: 1,
        })
        .await
        .expect("fork")
        .into_inner()
        .sandboxes
        .remove(0)
        .sandbox_id;
    let born = next(&mut events).await;
    assert_eq!(born.kind, api::EventKind::Created as i32);
    assert_eq!(born.sandbox_id, child);
    assert_eq!(
        (born.origin.as_str(), born.parent.as_str()),
        ("fork", parent.as_str())
    );
    let forked = next(&mut events).await;
    assert_eq!(forked.kind, api::EventKind::Forked as i32);
    assert_eq!(forked.sandbox_id, parent);
    assert_eq!(forked.children, std::slice::from_ref(&child));

    let clone = sandboxes
        .create(api::CreateSandboxRequest {
            snapshot: "events-base".to_owned(),
            ..api::CreateSandboxRequest::default()
        })
        .await
        .expect("create from the snapshot")
        .into_inner()
        .sandbox_id;
    let from_snapshot = next(&mut events).await;
    assert_eq!(from_snapshot.sandbox_id, clone);
    assert_eq!(from_snapshot.origin, "snapshot");
    assert_eq!(from_snapshot.snapshot, "events-base");
    server.stop().await;
}
