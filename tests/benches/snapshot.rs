//! Snapshot benchmark: what taking a snapshot costs against the guest's
//! memory size, and a start from a snapshot to its first output against
//! the other warm starts, measured in one run.
//!
//! - Taking: for guests of 256, 512 and 1024 MiB (each with 64 MiB written
//!   to its tmpfs, so the stream is not all zeros), the time the sandbox
//!   was stopped (`TakenSnapshot::paused`) and the whole take until the
//!   snapshot can be started from (`took`: the copy, its hash, and making
//!   its clones' template), with its size on disk.
//! - Starting, to the first output of `echo hi`, median of
//!   `AIRLOCK_BENCH_STARTS` (default 10) with the slowest: from the
//!   snapshot (`SandboxBuilder::snapshot`); a clone of the image's
//!   configuration template (what a plain start does); a member of a warm
//!   pool (frozen, handed out and thawed). The ratio is against the pool's
//!   row, the floor of a start.
//!
//! Run with `scripts/bench`, or `cargo bench -p airlock-tests --bench
//! snapshot`.

#![allow(clippy::expect_used, clippy::unwrap_used)]

#[allow(dead_code)]
mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use airlock::snapshot::SnapshotStore;
use airlock::{Sandbox, SandboxBuilder, Sandboxes};
use airlock_tests::stdout_of;

use common::{ms, percentile};

fn builder(dir: &Path, memory_mib: u32) -> SandboxBuilder {
    airlock_tests::builder()
        .memory_mib(memory_mib)
        .saved_dir(dir.join("saved"))
        .image(airlock_tests::default_image())
        .from_template(true)
}

/// From `start` until `echo hi` printed in the new sandbox.
async fn first_output<S: std::ops::Deref<Target = Sandbox>>(
    start: impl std::future::Future<Output = S>,
) -> (Duration, S) {
    let began = Instant::now();
    let sandbox = start.await;
    assert_eq!(stdout_of(&sandbox, "echo hi").await, "hi\n");
    (began.elapsed(), sandbox)
}

fn row(name: &str, mut times: Vec<Duration>, floor: Option<Duration>) -> Duration {
    times.sort();
    let median = percentile(&times, 50);
    let slowest = *times.last().unwrap();
    let ratio = floor.map_or(String::new(), |floor| {
        format!("  {:.2}x", median.as_secs_f64() / floor.as_secs_f64())
    });
    println!(
        "{name:<44} median {:>8.1} ms  slowest {:>8.1} ms{ratio}",
        ms(median),
        ms(slowest)
    );
    median
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::var("AIRLOCK_BENCH_STARTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(10);
    let dir = tempfile::tempdir().unwrap();
    let store = SnapshotStore::new(dir.path().join("snapshots"));

    println!("taking a snapshot (TCG; 64 MiB written into the guest's /tmp first)");
    for memory_mib in [256, 512, 1024] {
        let sandbox = builder(dir.path(), memory_mib)
            .start()
            .await
            .expect("start");
        stdout_of(&sandbox, "head -c 67108864 /dev/urandom > /tmp/fill").await;
        let taken = sandbox.snapshot(&store).await.expect("snapshot");
        println!(
            "  {memory_mib:>5} MiB guest: stopped {:>7.1} ms, whole take {:>8.1} ms, {:>5} MiB on disk",
            ms(taken.paused),
            ms(taken.took),
            taken.snapshot.disk_bytes() >> 20
        );
        store.remove(taken.snapshot.id()).unwrap();
    }

    // The snapshot the start rows use: a 256 MiB guest with a file.
    let source = builder(dir.path(), 256).start().await.expect("start");
    stdout_of(&source, "echo kept > /root/note").await;
    let snapshot = source.snapshot(&store).await.expect("snapshot").snapshot;
    drop(source);

    println!("\nto the first output of `echo hi`, {n} starts each:");
    let pool = Sandboxes::with_pool(4, builder(dir.path(), 256), 1).expect("pool");
    let mut pooled = Vec::new();
    for _ in 0..n {
        let deadline = Instant::now() + Duration::from_secs(300);
        while pool.pool_status().ready.is_empty() || pool.pool_status().filling > 0 {
            assert!(
                Instant::now() < deadline,
                "the pool did not fill: {:?}",
                pool.pool_status()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (took, sandbox) =
            first_output(async { pool.start_pooled().await.expect("pooled") }).await;
        pooled.push(took);
        // The manager holds it until it is killed: its slot goes back to
        // the pool's refill.
        pool.kill(sandbox.id()).expect("kill");
    }
    drop(pool);
    let floor = row("from the warm pool (frozen clone, thawed)", pooled, None);

    let mut clones = Vec::new();
    let mut from_snapshot = Vec::new();
    for _ in 0..n {
        let (took, _) = first_output(async {
            Box::new(builder(dir.path(), 256).start().await.expect("clone"))
        })
        .await;
        clones.push(took);
        let (took, sandbox) = first_output(async {
            Box::new(
                builder(dir.path(), 256)
                    .snapshot(&snapshot)
                    .start()
                    .await
                    .expect("from the snapshot"),
            )
        })
        .await;
        assert_eq!(stdout_of(&sandbox, "cat /root/note").await, "kept\n");
        from_snapshot.push(took);
    }
    row(
        "a clone of the image's configuration template",
        clones,
        Some(floor),
    );
    row("from the snapshot", from_snapshot, Some(floor));
}
