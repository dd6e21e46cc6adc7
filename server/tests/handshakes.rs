//! Stalling TLS handshakes for everyone without a key: hundreds of idle
//! TCP connections from many loopback addresses, renewed as the server
//! closes them, against a real server with TLS (process backend). New
//! clients still get their handshake and call at once, an established
//! connection keeps working, an idle connection is closed within its
//! first-byte deadline, and the owner's socket is untouched.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use airlock_client::api;
use airlock_testkit::{tcp_from, Options, TestServer};
use tokio::io::AsyncReadExt;

/// Keeps about `count` idle connections open to `to` from 127.0.0.2 and
/// up (`per_source` each), opening a new one for each the server closes,
/// until `stop`.
fn idle_connections(
    to: SocketAddr,
    count: usize,
    per_source: usize,
    stop: Arc<AtomicBool>,
    opened: Arc<AtomicUsize>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..count)
        .map(|i| {
            let source = Ipv4Addr::new(
                127,
                0,
                1 + (i / per_source / 250) as u8,
                2 + ((i / per_source) % 250) as u8,
            );
            let (stop, opened) = (Arc::clone(&stop), Arc::clone(&opened));
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let mut stream = tcp_from(source, to).await;
                    opened.fetch_add(1, Ordering::Relaxed);
                    let mut buf = [0u8; 64];
                    // Send nothing; wait for the server to give up.
                    let _ =
                        tokio::time::timeout(Duration::from_secs(15), stream.read(&mut buf)).await;
                }
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_do_not_stall_new_tls_clients() {
    let server = TestServer::start(Options {
        tls: true,
        ..Options::default()
    })
    .await;
    let key = server.key("alice", api::KeyQuota::default()).await;
    let established = server.remote(Some(&key)).await;
    established.ping().await.unwrap();

    // A connection that sends nothing is closed after its first-byte
    // deadline (1 s), not held for the whole handshake's.
    let mut idle = tcp_from(Ipv4Addr::new(127, 0, 0, 1), server.tcp).await;
    let began = Instant::now();
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(5), idle.read(&mut buf))
        .await
        .expect("an idle connection is closed");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    let first_byte = began.elapsed();
    assert!(
        first_byte >= Duration::from_millis(900) && first_byte < Duration::from_secs(3),
        "{first_byte:?}"
    );

    // The attack: 300 idle connections from 30 addresses, renewed.
    let stop = Arc::new(AtomicBool::new(false));
    let opened = Arc::new(AtomicUsize::new(0));
    let attackers = idle_connections(server.tcp, 300, 10, Arc::clone(&stop), Arc::clone(&opened));
    while opened.load(Ordering::Relaxed) < 300 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // One more idle connection is closed as soon (or cut sooner, for the
    // newer ones).
    let mut idle = tcp_from(Ipv4Addr::new(127, 0, 0, 1), server.tcp).await;
    let began = Instant::now();
    let read = tokio::time::timeout(Duration::from_secs(5), idle.read(&mut buf))
        .await
        .expect("an idle connection is closed");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    let closed_after = began.elapsed();
    assert!(closed_after < Duration::from_secs(3), "{closed_after:?}");

    // New clients meanwhile, each a TLS handshake and a call.
    let mut slowest = Duration::ZERO;
    for _ in 0..5 {
        let began = Instant::now();
        let client = server.remote(Some(&key)).await;
        let ping = client.ping().await.unwrap();
        assert_eq!(ping.principal, "key:alice");
        slowest = slowest.max(began.elapsed());
    }
    eprintln!(
        "alone, an idle connection closed after {first_byte:?}; under {} idle connections: \
         an idle one closed after {closed_after:?}, \
         the slowest of 5 new TLS clients connected and called in {slowest:?}",
        opened.load(Ordering::Relaxed)
    );
    assert!(
        slowest < Duration::from_secs(2),
        "a new client waited {slowest:?} for its handshake"
    );
    // The connection made before the attack, and the owner's socket.
    established.ping().await.unwrap();
    server.owner().await.ping().await.unwrap();

    stop.store(true, Ordering::Relaxed);
    for attacker in attackers {
        attacker.abort();
    }
    server.stop().await;
}
