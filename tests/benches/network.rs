//! Network benchmark: a download by a guest program from a server on the
//! host's loopback, through the host's policy (the redirect, the carrier
//! and the gateway), beside the same download made on the host and the raw
//! serial echo throughput of the same VM in the same run; and connection
//! set-up, from the guest's `connect` to the server's first answer. Prints
//! figures and ratios; asserts only that the bytes arrived.
//!
//! Run with `scripts/bench`. `AIRLOCK_BENCH_MIB` sets the size (default 32).

#![allow(clippy::expect_used, clippy::unwrap_used)]

#[allow(dead_code)]
mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Instant;

use airlock::{Command, NetworkOptions, NetworkPolicy, StaticResolver};
use common::{echo_throughput, start_echo, with_echo_port, MIB};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Connections timed for set-up.
const CONNECTS: usize = 30;

#[tokio::main]
async fn main() {
    let size_mib: usize = std::env::var("AIRLOCK_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32);
    let size = size_mib * MIB;
    let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = server.local_addr().unwrap().port();
    tokio::spawn(serve(server, size));

    let echo_dir = tempfile::tempdir().expect("temp dir");
    let echo_socket = echo_dir.path().join("echo.sock");
    let options = NetworkOptions::new()
        .policy(
            NetworkPolicy::new()
                .allow("bench.test".parse().unwrap())
                .allow("127.0.0.1/32".parse().unwrap()),
        )
        .host_access(airlock::HostAccess::Allowed)
        .resolver(Arc::new(
            StaticResolver::new().with("bench.test", IpAddr::V4(Ipv4Addr::LOCALHOST)),
        ));
    let sandbox = with_echo_port(airlock_tests::builder(), &echo_socket)
        .image(airlock_tests::default_image())
        .memory_mib(512)
        .network(options)
        .start()
        .await
        .expect("sandbox");

    let (_echo, mut stream) = start_echo(&sandbox, &echo_socket).await;
    let echo_mbps = echo_throughput(&mut stream, size_mib).await;

    // On the host: the same download from the same server.
    let began = Instant::now();
    let mut conn = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    conn.write_all(b"b").await.unwrap();
    let mut buf = vec![0u8; 256 * 1024];
    let mut got = 0;
    while got < size {
        let n = conn.read(&mut buf).await.unwrap();
        assert!(n > 0, "the host's download ended early");
        got += n;
    }
    let host_mbps = size as f64 / began.elapsed().as_secs_f64() / 1e6;

    // In the guest: timed by the guest, from connect to the last byte.
    let script = format!(
        "import socket, time\n\
         def fetch(n):\n\
         \x20   s = socket.create_connection(('bench.test', {port})); s.sendall(b'b' if n > 1 else b's')\n\
         \x20   buf = bytearray(256 * 1024); got = 0\n\
         \x20   while got < n:\n\
         \x20       k = s.recv_into(buf)\n\
         \x20       if k == 0: raise SystemExit('ended early at %d' % got)\n\
         \x20       got += k\n\
         \x20   s.close()\n\
         fetch(1)\n\
         t = time.monotonic(); fetch({size}); print(time.monotonic() - t)\n\
         times = []\n\
         for _ in range({CONNECTS}):\n\
         \x20   t = time.monotonic(); fetch(1); times.append(time.monotonic() - t)\n\
         times.sort(); print(times[len(times) // 2], times[len(times) * 9 // 10])"
    );
    let out = sandbox
        .exec(Command::new("python3").arg("-c").arg(script))
        .await
        .expect("python starts")
        .output()
        .await
        .expect("python output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the guest's download failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let figures: Vec<f64> = stdout
        .split_whitespace()
        .map(|f| f.parse().expect("a figure"))
        .collect();
    let guest_mbps = size as f64 / figures[0] / 1e6;
    let (setup_median, setup_p90) = (figures[1] * 1e3, figures[2] * 1e3);

    println!(
        "network benchmark: {size_mib} MiB download, accel {}, 1 vCPU",
        sandbox.accel().qemu_name()
    );
    println!("{:<40} {:>12} {:>10}", "measure", "figure", "vs floor");
    println!(
        "{:<40} {:>7.1} MB/s {:>10}",
        "raw serial echo throughput", echo_mbps, "floor"
    );
    println!(
        "{:<40} {:>7.1} MB/s {:>10}",
        "download on the host (loopback)", host_mbps, ""
    );
    println!(
        "{:<40} {:>7.1} MB/s {:>9.2}x",
        "download in the guest, through the policy",
        guest_mbps,
        guest_mbps / echo_mbps
    );
    println!(
        "{:<40} {:>9.2} ms {:>10}",
        "connection set-up + 1 byte (median)", setup_median, ""
    );
    println!(
        "{:<40} {:>9.2} ms {:>10}",
        "connection set-up + 1 byte (p90)", setup_p90, ""
    );
    let audit = sandbox.network_audit().expect("audit");
    println!(
        "audit: {} records, {} refused",
        audit.len(),
        audit.iter().filter(|r| !r.verdict.is_allowed()).count()
    );
}

/// Answers each connection's one request byte: `b` with `size` bytes,
/// anything else (the set-up probes) with one.
async fn serve(server: TcpListener, size: usize) {
    let chunk = vec![0x5au8; 256 * 1024];
    loop {
        let (mut conn, _) = server.accept().await.unwrap();
        let chunk = chunk.clone();
        tokio::spawn(async move {
            let mut request = [0u8; 1];
            if conn.read_exact(&mut request).await.is_err() {
                return;
            }
            let mut left = if request[0] == b'b' { size } else { 1 };
            while left > 0 {
                let n = left.min(chunk.len());
                if conn.write_all(&chunk[..n]).await.is_err() {
                    return;
                }
                left -= n;
            }
        });
    }
}
