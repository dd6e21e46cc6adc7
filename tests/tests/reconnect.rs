//! The agent connection breaking under a live sandbox: calls in flight on
//! it fail with a clear error, and the next call dials again by itself.
//!
//! The break is made with a relay the test puts between the bridge's
//! channel and the VM's hybrid-vsock socket (which `transport::channel`
//! dials like any other): closing the relay's connections is what a
//! broken vsock connection looks like to the host.

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use airlock_proto::v1::health_client::HealthClient;
use airlock_proto::v1::process_client::ProcessClient;
use airlock_proto::v1::{CheckRequest, StartRequest};
use tokio::sync::watch;

#[tokio::test]
async fn a_broken_connection_fails_open_calls_and_redials_for_new_ones() {
    let sandbox = airlock_tests::builder()
        .guest_channel(airlock::GuestChannel::Vsock)
        .start()
        .await
        .expect("a sandbox on the vsock channel");
    let dir = tempfile::tempdir().unwrap();
    let front = dir.path().join("relay.sock");
    let (cut, cut_rx) = watch::channel(0u32);
    airlock_tests::relay(
        front.clone(),
        sandbox.state_dir().join("vsock.sock"),
        cut_rx,
    );
    let channel = airlock::transport::channel(front, airlock_proto::DEFAULT_AGENT_PORT)
        .await
        .expect("channel through the relay");
    let mut health = HealthClient::new(channel.clone());
    health.check(CheckRequest {}).await.expect("first call");

    // A call in flight: a program's output stream.
    let mut events = ProcessClient::new(channel.clone())
        .start(StartRequest {
            argv: vec!["sleep".into(), "30".into()],
            ..Default::default()
        })
        .await
        .expect("start")
        .into_inner();
    events.message().await.expect("started event");

    cut.send_modify(|g| *g += 1);
    let broke = Instant::now();
    let error = tokio::time::timeout(Duration::from_secs(10), events.message())
        .await
        .expect("the open stream noticed the break")
        .expect_err("the open stream fails");
    assert!(
        broke.elapsed() < Duration::from_secs(5),
        "took {:?}",
        broke.elapsed()
    );
    assert!(!error.message().is_empty(), "{error:?}");

    // The break is known (the open stream saw it), so the next call dials
    // a fresh connection by itself and succeeds: no call is lost to it.
    health
        .check(CheckRequest {})
        .await
        .expect("a new call after the break");
    // The sandbox's own channel was never affected.
    sandbox.health().await.expect("the sandbox's own channel");
}

/// On the serial channel (one connection through QEMU's socket, no relay
/// possible), a guest that stops answering is found by the host's HTTP/2
/// keepalive within seconds: open calls fail, and once the guest runs
/// again the next call opens a new connection, which the agent serves.
#[tokio::test]
async fn a_stuck_serial_connection_is_dropped_in_seconds_and_the_next_call_reconnects() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;

    let sandbox = airlock_tests::boot().await;
    let mut execution = sandbox
        .exec(airlock::Command::new("sleep").arg("60"))
        .await
        .expect("start sleep");
    let qemu = airlock_tests::processes_mentioning(sandbox.state_dir());
    assert_eq!(qemu.len(), 1, "{qemu:?}");
    let qemu = Pid::from_raw(i32::try_from(qemu[0]).unwrap());

    // Freeze QEMU behind the library's back: a guest that hangs.
    kill(qemu, Signal::SIGSTOP).unwrap();
    let frozen = Instant::now();
    let broke = tokio::time::timeout(Duration::from_secs(40), execution.next_event()).await;
    let waited = frozen.elapsed();
    kill(qemu, Signal::SIGCONT).unwrap();
    let result = broke.expect("the open call ends once the keepalive gives up");
    assert!(result.is_err(), "{result:?}");
    let keepalive = airlock_proto::contract::serial::KEEPALIVE_INTERVAL
        + airlock_proto::contract::serial::KEEPALIVE_TIMEOUT;
    assert!(
        waited <= keepalive + Duration::from_secs(5),
        "the stuck connection was dropped after {waited:?}"
    );

    // A new connection: the agent serves it, and the program it ran before
    // is still there to be listed.
    sandbox.health().await.expect("a new call after the break");
    let listed = sandbox.list().await.expect("list");
    assert!(
        listed
            .iter()
            .any(|p| p.argv.first().map(String::as_str) == Some("sleep")),
        "{listed:?}"
    );
}
