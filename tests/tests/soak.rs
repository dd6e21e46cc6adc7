//! Starts are dependable: two hundred clone starts and fifty cold starts on
//! the serial channel, two at a time, each running a command and checking
//! its output. A single failed start fails the test, with every failure's
//! error (console and channel state) printed; nothing may be left behind
//! (no VMM process, state directory or unfinished template).
//!
//! It runs alone in its own test binary, one phase after the other, so the
//! two VMs at a time are the only load: the soak checks starts, not how the
//! host copes with more. `soak_vsock.rs` does the same for the vsock
//! channel.

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use airlock::Origin;
use airlock_tests::soak::soak;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_clone_starts_then_fifty_cold_starts_all_run_their_command() {
    let templates = tempfile::tempdir().unwrap();
    let clones = airlock_tests::builder()
        .image(airlock_tests::default_image())
        .from_template(true)
        .template_dir(templates.path());
    // The template is made by the first start, outside the count.
    let first = clones.clone().start().await.expect("the template is made");
    assert!(
        matches!(first.origin(), Origin::Clone { built: true, .. }),
        "{:?}",
        first.origin()
    );
    drop(first);
    soak("clone starts", clones, 200, true).await;
    let left: Vec<_> = std::fs::read_dir(templates.path())
        .unwrap()
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(".building-"))
        .collect();
    assert!(left.is_empty(), "unfinished templates left: {left:?}");

    soak("cold starts", airlock_tests::builder(), 50, false).await;
}
