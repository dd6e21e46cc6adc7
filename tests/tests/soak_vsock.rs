//! The vsock channel (kept for VMMs that only have vsock) passes the same
//! soak as the serial one: fifty cold starts, two at a time, each running a
//! command and checking its output, nothing left behind.

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_cold_starts_on_vsock_all_run_their_command() {
    let builder = airlock_tests::builder().guest_channel(airlock::GuestChannel::Vsock);
    airlock_tests::soak::soak("cold starts on vsock", builder, 50, false).await;
}
