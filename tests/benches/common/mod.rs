//! The raw channel floor shared by the benchmarks: a virtio-serial port of
//! its own beside the agent's ([`ECHO_PORT_NAME`], added to the builder with
//! [`with_echo_port`]), the static guest echo program (`vsock-echo`)
//! on it, and round trips and throughput measured through QEMU's socket
//! for the port: the same path as the agent's channel, minus the agent.
//! Also the pseudo-random file contents and the percentile and millisecond
//! helpers the benchmarks use; starts from a warm pool (`pool`); the API
//! benchmark's other clients (`clients`) and SDKs driven as its peers over
//! a line protocol (`sdk`). A server in the benchmark's process, with its
//! HTTP ingress, is the tests' own (`airlock_testkit::TestServer`).

pub mod clients;
pub mod pool;
pub mod sdk;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use airlock::{Command, Event, Execution, Sandbox, SandboxBuilder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// The virtio-serial port the echo program serves.
pub const ECHO_PORT_NAME: &str = "airlock.echo";
pub const MIB: usize = 1 << 20;

/// The musl release target directory (`CARGO_TARGET_DIR` or the workspace's).
pub fn musl_release_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"))
        .join("x86_64-unknown-linux-musl/release")
}

/// The guest echo listener binary, failing with the command that builds it.
pub fn echo_binary() -> PathBuf {
    let bin = musl_release_dir().join("airlock-vsock-echo");
    assert!(
        bin.is_file(),
        "{} is missing: run scripts/bench (it builds it)",
        bin.display()
    );
    bin
}

/// `builder` with the echo's serial port, QEMU listening on `socket`.
pub fn with_echo_port(builder: SandboxBuilder, socket: &Path) -> SandboxBuilder {
    builder.serial_port(ECHO_PORT_NAME, socket)
}

/// Uploads the echo program to `/tmp`, starts it on the echo port whose
/// host socket is `socket`, and connects to it. Keep the returned
/// execution alive while measuring.
pub async fn start_echo(sandbox: &Sandbox, socket: &Path) -> (Execution, UnixStream) {
    sandbox
        .fs()
        .write_file("/tmp/airlock-vsock-echo", echo_binary())
        .await
        .expect("upload echo program");
    let mut stream = UnixStream::connect(socket)
        .await
        .expect("connect to the echo port's socket");
    let echo = sandbox
        .exec(
            Command::new("/tmp/airlock-vsock-echo")
                .arg(format!("serial:{ECHO_PORT_NAME}"))
                .tag("echo"),
        )
        .await
        .expect("start echo program");
    let mut byte = [0u8; 1];
    stream.write_all(b"!").await.expect("echo probe");
    tokio::time::timeout(Duration::from_secs(30), stream.read_exact(&mut byte))
        .await
        .expect("the echo program answers")
        .expect("echo probe read");
    (echo, stream)
}

/// Median and p99 of `n` sequential 64-byte round trips.
pub async fn echo_round_trips(stream: &mut UnixStream, n: usize) -> (Duration, Duration) {
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
    (percentile(&times, 50), percentile(&times, 99))
}

/// MB/s echoing `mib` MiB as 64 KiB writes, each read back before the
/// next.
pub async fn echo_throughput(stream: &mut UnixStream, mib: usize) -> f64 {
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

/// The `pct`th percentile of sorted `times` (nearest rank, clamped).
pub fn percentile(sorted: &[Duration], pct: usize) -> Duration {
    let n = sorted.len();
    sorted[(n * pct / 100).min(n - 1)]
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Incompressible bytes without a dependency (xorshift64*).
pub fn pseudo_random(len: usize) -> Vec<u8> {
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

/// Runs `echo ready` to its end; returns when its first output came (what
/// a user waits for after a start or a resume).
pub async fn first_echo(sandbox: &Sandbox) -> Instant {
    let mut execution = sandbox
        .exec(Command::new("echo").arg("ready"))
        .await
        .expect("exec echo");
    let mut first = None;
    while let Some(event) = execution.next_event().await.expect("echo events") {
        if let Event::Stdout(_) = event {
            first.get_or_insert_with(Instant::now);
        }
    }
    first.expect("echo printed")
}
