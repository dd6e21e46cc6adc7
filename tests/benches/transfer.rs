//! Transfer benchmark: file upload and download through the agent's Files
//! service, beside the raw vsock echo throughput and round trip measured in
//! the same VM, in the same run. Prints figures and ratios; asserts only
//! that the bytes arrived intact.
//!
//! Run with `scripts/bench` (it builds the guest echo listener first).
//! `AIRLOCK_BENCH_MIB` sets the file size (default 64).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use airlock::Command;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ECHO_PORT: u32 = 5000;
const MIB: usize = 1 << 20;

#[tokio::main]
async fn main() {
    let size_mib: usize = std::env::var("AIRLOCK_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let echo_bin = echo_binary();
    // /tmp in the initramfs is a tmpfs of a quarter of guest memory.
    let memory = u32::try_from((size_mib * 4 + 256).max(512)).expect("memory size");
    let sandbox = airlock_tests::builder()
        .memory_mib(memory)
        .start()
        .await
        .expect("sandbox");
    let fs = sandbox.fs();

    // The floor: a trivial echo listener in the guest.
    fs.write_file("/tmp/airlock-vsock-echo", &echo_bin)
        .await
        .expect("upload echo listener");
    let _echo = sandbox
        .exec(
            Command::new("/tmp/airlock-vsock-echo")
                .arg(ECHO_PORT.to_string())
                .tag("echo"),
        )
        .await
        .expect("start echo listener");
    let mut stream = connect_when_listening(&sandbox).await;
    let rtt = echo_round_trips(&mut stream, 500).await;
    let echo_mbps = echo_throughput(stream, size_mib).await;

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
        "raw vsock echo round trip (median)",
        ms(rtt.0),
        "floor"
    );
    println!(
        "{:<34} {:>9.3} ms {:>10}",
        "raw vsock echo round trip (p99)",
        ms(rtt.1),
        ""
    );
    println!(
        "{:<34} {:>7.1} MB/s {:>10}",
        "raw vsock echo throughput", echo_mbps, "ceiling"
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

fn echo_binary() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let bin = target.join("x86_64-unknown-linux-musl/release/airlock-vsock-echo");
    assert!(
        bin.is_file(),
        "{} is missing: run scripts/bench (it builds it)",
        bin.display()
    );
    bin
}

async fn connect_when_listening(sandbox: &airlock::Sandbox) -> tokio::net::UnixStream {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match sandbox.connect_vsock(ECHO_PORT).await {
            Ok(stream) => return stream,
            Err(error) if Instant::now() > deadline => panic!("echo listener: {error}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// Median and p99 of `n` sequential 64-byte round trips.
async fn echo_round_trips(stream: &mut tokio::net::UnixStream, n: usize) -> (Duration, Duration) {
    let message = [0x5au8; 64];
    let mut reply = [0u8; 64];
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let began = Instant::now();
        stream.write_all(&message).await.expect("echo write");
        stream.read_exact(&mut reply).await.expect("echo read");
        times.push(began.elapsed());
    }
    times.sort();
    (times[n / 2], times[(n * 99 / 100).min(n - 1)])
}

/// MB/s echoing `mib` MiB as 64 KiB writes, each read back before the
/// next. (With 1 MiB writes in flight both ways, vhost-device-vsock 0.3
/// closed the connection here; 64 KiB matches its default per-connection
/// buffer.)
async fn echo_throughput(mut stream: tokio::net::UnixStream, mib: usize) -> f64 {
    const CHUNK: usize = 64 * 1024;
    let chunk = vec![0xa5u8; CHUNK];
    let mut buf = vec![0u8; CHUNK];
    let began = Instant::now();
    for _ in 0..mib * (MIB / CHUNK) {
        stream.write_all(&chunk).await.expect("echo write");
        stream.read_exact(&mut buf).await.expect("echo read");
    }
    (mib * MIB) as f64 / began.elapsed().as_secs_f64() / 1e6
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Incompressible bytes without a dependency (xorshift64*).
fn pseudo_random(len: usize) -> Vec<u8> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        out.extend_from_slice(&state.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    out.truncate(len);
    out
}
