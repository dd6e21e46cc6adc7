//! Change tracking stays bounded: a run that creates 200,000 files gets a
//! truncated list no longer than the agent's limit, and the agent stays
//! healthy and small. Its own VM (2 GiB, no image): the files fill a good
//! part of the guest's memory.

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use airlock::fs::ChangeKind;
use airlock_proto::contract::changes::{MAX_CHANGES, MAX_ENTRIES};
use airlock_tests::{run, sh, status_kib, stdout_of};

const FILES: u32 = 200_000;

#[tokio::test]
async fn a_run_that_creates_200000_files_gets_a_bounded_truncated_list() {
    let sandbox = airlock_tests::builder()
        .memory_mib(2048)
        .start()
        .await
        .expect("sandbox did not start");
    let tracker = sandbox.fs().track_changes(["/tmp"]).await.unwrap();
    let script = format!("mkdir /tmp/many && cd /tmp/many && seq 1 {FILES} | xargs touch");
    let out = run(&sandbox, sh(&script)).await;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        stdout_of(&sandbox, "ls /tmp/many | wc -l").await.trim(),
        FILES.to_string()
    );

    let changes = tracker.changes().await.expect("changes");
    eprintln!(
        "changes: {} reported, {} scanned, truncated {}",
        changes.changes.len(),
        changes.scanned,
        changes.truncated
    );
    assert!(changes.truncated, "200,000 files must not fit");
    assert!(changes.changes.len() as u64 <= MAX_CHANGES);
    assert!(changes.scanned <= MAX_ENTRIES);
    assert!(!changes.changes.is_empty());
    assert!(changes
        .changes
        .iter()
        .all(|c| c.kind == ChangeKind::Created && c.path.starts_with("/tmp/many")));

    // A snapshot of the big tree stops at its limit too, and comparing
    // with it reports nothing it did not see.
    let big = sandbox.fs().track_changes(["/tmp"]).await.unwrap();
    assert!(big.truncated());
    assert_eq!(big.entries(), MAX_ENTRIES);
    let none = big.finish(0).await.unwrap();
    assert!(
        none.changes.is_empty(),
        "{:?}",
        &none.changes[..3.min(none.changes.len())]
    );
    assert!(none.truncated);

    // The agent answers and stayed small throughout.
    let health = sandbox.health().await.expect("health after the scans");
    let status =
        String::from_utf8(sandbox.fs().read_to_vec("/proc/1/status").await.unwrap()).unwrap();
    let peak_mib = status_kib(&status, "VmHWM") >> 10;
    let rss_mib = health.agent_rss_bytes >> 20;
    eprintln!("changes: agent RSS {rss_mib} MiB, peak {peak_mib} MiB");
    assert!(peak_mib < 96, "agent peak RSS {peak_mib} MiB");
    assert_eq!(stdout_of(&sandbox, "echo still here").await, "still here\n");
    sandbox
        .shutdown(std::time::Duration::from_secs(10))
        .await
        .expect("shutdown");
}
