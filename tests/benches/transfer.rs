//! Transfer benchmark: file upload and download through the agent's Files
//! service, beside the raw serial echo throughput and round trip measured in
//! the same VM, in the same run. Prints figures and ratios; asserts only
//! that the bytes arrived intact.
//!
//! Run with `scripts/bench` (it builds the guest echo listener first).
//! `AIRLOCK_BENCH_MIB` sets the file size (default 64).

#![allow(clippy::expect_used, clippy::unwrap_used)]

#[allow(dead_code)]
mod common;

use std::time::{Duration, Instant};

use common::{
    echo_round_trips, echo_throughput, ms, pseudo_random, start_echo, with_echo_port, MIB,
};

#[tokio::main]
async fn main() {
    let size_mib: usize = std::env::var("AIRLOCK_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    // /tmp in the initramfs is a tmpfs of a quarter of guest memory.
    let memory = u32::try_from((size_mib * 4 + 256).max(512)).expect("memory size");
    let echo_dir = tempfile::tempdir().expect("temp dir");
    let echo_socket = echo_dir.path().join("echo.sock");
    let sandbox = with_echo_port(airlock_tests::builder(), &echo_socket)
        .memory_mib(memory)
        .start()
        .await
        .expect("sandbox");
    let fs = sandbox.fs();

    // The floor: a trivial echo listener in the guest.
    let (_echo, mut stream) = start_echo(&sandbox, &echo_socket).await;
    let rtt = echo_round_trips(&mut stream, 500).await;
    let echo_mbps = echo_throughput(&mut stream, size_mib).await;

    // Files: upload then download the same random file.
    let dir = std::env::temp_dir().join(format!("airlock-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let source = dir.join("source.bin");
    let back = dir.join("back.bin");
    let data = pseudo_random(size_mib * MIB);
    std::fs::write(&source, &data).expect("write source");

    let began = Instant::now();
    fs.write_file("/tmp/bench.bin", &source)
        .await
        .expect("upload");
    let upload = began.elapsed();
    let began = Instant::now();
    fs.read_to_file("/tmp/bench.bin", &back)
        .await
        .expect("download");
    let download = began.elapsed();
    let intact = std::fs::read(&back).expect("read back") == data;
    let _ = std::fs::remove_dir_all(&dir);
    assert!(intact, "the downloaded file differs from the uploaded one");

    let bytes = (size_mib * MIB) as f64;
    let up_mbps = bytes / upload.as_secs_f64() / 1e6;
    let down_mbps = bytes / download.as_secs_f64() / 1e6;
    println!(
        "transfer benchmark: {size_mib} MiB, accel {}, 1 vCPU",
        sandbox.accel().qemu_name()
    );
    println!("{:<34} {:>12} {:>10}", "measure", "figure", "vs floor");
    println!(
        "{:<34} {:>9.3} ms {:>10}",
        "raw serial echo round trip (median)",
        ms(rtt.0),
        "floor"
    );
    println!(
        "{:<34} {:>9.3} ms {:>10}",
        "raw serial echo round trip (p99)",
        ms(rtt.1),
        ""
    );
    println!(
        "{:<34} {:>7.1} MB/s {:>10}",
        "raw serial echo throughput", echo_mbps, "ceiling"
    );
    println!(
        "{:<34} {:>7.1} MB/s {:>9.2}x",
        "Files upload (WriteFile)",
        up_mbps,
        up_mbps / echo_mbps
    );
    println!(
        "{:<34} {:>7.1} MB/s {:>9.2}x",
        "Files download (ReadFile)",
        down_mbps,
        down_mbps / echo_mbps
    );
    let health = sandbox.health().await.expect("health");
    println!(
        "{:<34} {:>8.1} MiB {:>10}",
        "agent RSS after the transfers",
        health.agent_rss_bytes as f64 / MIB as f64,
        format!("budget {AGENT_RSS_BUDGET_MIB}")
    );
    sandbox
        .shutdown(Duration::from_secs(10))
        .await
        .expect("shutdown");
}

/// The agent's memory budget in MiB, as `tests/tests/limits.rs` asserts it.
const AGENT_RSS_BUDGET_MIB: u64 = 16;
