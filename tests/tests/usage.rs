//! The usage ledger on real VMs, across a restart of the server (issue
//! #48): a key's sandbox runs, pauses in memory, runs again and is saved
//! to disk; the server stops, leaving another sandbox of the key running
//! for the next one to adopt; the next server on the same directory adopts
//! that one (which runs on, then pauses in memory) and restores the saved
//! one on a call (which runs on); both are killed. Then the ledger's
//! figures for the key, by sandbox and summed, match the durations the
//! test measured within a second each: running, paused in memory, on disk,
//! vCPU-seconds and memory GiB-seconds; nothing counted twice across the
//! adoption and the restore.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use airlock_client::{api, Client};
use airlock_server::OnExit;
use airlock_testkit::api::run;
use airlock_testkit::server::{Options, TestServer};

/// What a figure may differ by from what the test measured.
const SLACK_MS: u64 = 1_000;

fn builder() -> airlock::SandboxBuilder {
    airlock_tests::builder().image(airlock_tests::default_image())
}

async fn server(dir: &std::path::Path, on_exit: OnExit) -> TestServer {
    let options = Options {
        dir: Some(dir.to_owned()),
        on_exit: Some(on_exit),
        ..Options::default()
    };
    TestServer::start_with(options, builder).await
}

async fn create(client: &Client) -> String {
    client
        .sandboxes()
        .create(api::CreateSandboxRequest {
            memory_mib: 256,
            vcpus: 2,
            ..api::CreateSandboxRequest::default()
        })
        .await
        .expect("create")
        .into_inner()
        .sandbox_id
}

async fn pause(client: &Client, id: &str, to_disk: bool) {
    client
        .sandboxes()
        .pause(api::PauseSandboxRequest {
            sandbox_id: id.to_owned(),
            to_disk,
        })
        .await
        .expect("pause");
}

async fn kill(client: &Client, id: &str) {
    client
        .sandboxes()
        .kill(api::KillSandboxRequest {
            sandbox_id: id.to_owned(),
        })
        .await
        .expect("kill");
}

async fn sh(client: &Client, id: &str, script: &str) {
    let (_, err, exit) = run(client, id, &["sh", "-c", script]).await;
    assert_eq!(
        exit.exit_code,
        0,
        "{script}: {}",
        String::from_utf8_lossy(&err)
    );
}

/// What the test measured of one sandbox.
#[derive(Debug, Default)]
struct Measured {
    running: Duration,
    paused: Duration,
    on_disk: Duration,
}

fn near(id: &str, what: &str, got_ms: u64, want: Duration) {
    let want_ms = u64::try_from(want.as_millis()).unwrap();
    assert!(
        got_ms.abs_diff(want_ms) <= SLACK_MS,
        "{id}: the ledger has {got_ms} ms {what}, the test measured {want_ms} ms"
    );
}

fn check(row: &api::UsageRow, measured: &Measured) {
    let id = &row.sandbox_id;
    eprintln!("{id}: measured {measured:?}, ledger {row:?}");
    near(id, "running", row.running_ms, measured.running);
    near(id, "paused in memory", row.paused_ms, measured.paused);
    near(id, "on disk", row.on_disk_ms, measured.on_disk);
    assert_eq!((row.vcpus, row.memory_mib), (2, 256), "{row:?}");
    assert_eq!(row.vcpu_ms, 2 * row.running_ms, "{row:?}");
    assert_eq!(
        row.memory_mib_ms,
        256 * (row.running_ms + row.paused_ms),
        "memory is held running and paused in memory, not on disk: {row:?}"
    );
    assert!(
        row.on_disk_ms == 0 || row.disk_mib_ms > 0,
        "saved files held: {row:?}"
    );
    assert!(row.guest_cpu_ms > 0, "{row:?}");
    assert!(row.ended_at_ms > 0, "{row:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_keys_usage_matches_its_sandboxes_durations_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let first = server(dir.path(), OnExit::Leave).await;
    let key = first.key("alice", api::KeyQuota::default()).await;
    let alice = first.remote(Some(&key)).await;

    // `saved`: runs, pauses in memory, runs again, and goes to disk.
    let mut saved = Measured::default();
    let begun = Instant::now();
    let saved_id = create(&alice).await;
    // `adopted`: runs until after the restart.
    let adopted_begun = Instant::now();
    let adopted_id = create(&alice).await;
    sh(&alice, &saved_id, "sleep 3").await;
    pause(&alice, &saved_id, false).await;
    let paused_at = Instant::now();
    saved.running += paused_at - begun;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let resuming = Instant::now();
    alice
        .sandboxes()
        .resume(api::ResumeSandboxRequest {
            sandbox_id: saved_id.clone(),
        })
        .await
        .expect("resume");
    saved.paused += resuming - paused_at;
    sh(&alice, &saved_id, "sleep 2").await;
    pause(&alice, &saved_id, true).await;
    let on_disk_at = Instant::now();
    saved.running += on_disk_at - resuming;

    // The server stops (leaving `adopted` running), and the next one on
    // the same directory adopts it and lists `saved` on disk.
    first.stop().await;
    let second = server(dir.path(), OnExit::Kill).await;
    let alice = second.remote(Some(&key)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    pause(&alice, &adopted_id, false).await;
    let adopted_paused_at = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    kill(&alice, &adopted_id).await;
    let adopted = Measured {
        running: adopted_paused_at - adopted_begun,
        paused: adopted_paused_at.elapsed(),
        on_disk: Duration::ZERO,
    };

    // A call restores `saved`, which runs on.
    sh(&alice, &saved_id, "true").await;
    let restored_at = Instant::now();
    saved.on_disk = restored_at - on_disk_at;
    sh(&alice, &saved_id, "sleep 2").await;
    kill(&alice, &saved_id).await;
    saved.running += restored_at.elapsed();

    let rows = alice
        .usage()
        .query(api::UsageQueryRequest {
            by: api::UsageGrouping::Sandbox.into(),
            ..api::UsageQueryRequest::default()
        })
        .await
        .expect("query the ledger")
        .into_inner()
        .rows;
    assert_eq!(rows.len(), 2, "{rows:?}");
    let row = |id: &str| rows.iter().find(|row| row.sandbox_id == id).unwrap();
    check(row(&saved_id), &saved);
    check(row(&adopted_id), &adopted);

    // The key's total is the two sandboxes'.
    let keys = alice
        .usage()
        .query(api::UsageQueryRequest {
            by: api::UsageGrouping::Key.into(),
            ..api::UsageQueryRequest::default()
        })
        .await
        .expect("query the ledger by key")
        .into_inner()
        .rows;
    assert_eq!(keys.len(), 1, "{keys:?}");
    let total = &keys[0];
    assert_eq!((total.key.as_str(), total.sandboxes), ("alice", 2));
    let want = |f: fn(&Measured) -> Duration| f(&saved) + f(&adopted);
    near("alice", "running", total.running_ms, want(|m| m.running));
    near(
        "alice",
        "paused in memory",
        total.paused_ms,
        want(|m| m.paused),
    );
    near("alice", "on disk", total.on_disk_ms, want(|m| m.on_disk));
    second.stop().await;
}
