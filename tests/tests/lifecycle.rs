//! Sandboxes come and go without leaving anything behind, and a VM that
//! dies during boot is reported with its console.

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use airlock::{Command, Error};

#[tokio::test]
async fn drop_kills_the_vm_and_removes_its_state() {
    let sandbox = airlock_tests::boot().await;
    let state_dir = sandbox.state_dir().to_owned();
    assert!(state_dir.is_dir());
    let vm_processes = airlock_tests::processes_mentioning(&state_dir);
    assert_eq!(
        vm_processes.len(),
        1,
        "qemu (the serial channel needs no other process): {vm_processes:?}"
    );

    drop(sandbox);
    assert!(
        !state_dir.exists(),
        "state dir left behind: {}",
        state_dir.display()
    );
    let left = airlock_tests::processes_mentioning(&state_dir);
    assert!(left.is_empty(), "processes left behind: {left:?}");
}

#[tokio::test]
async fn graceful_shutdown_powers_off_and_cleans_up() {
    let sandbox = airlock_tests::boot().await;
    let state_dir = sandbox.state_dir().to_owned();
    let out = sandbox
        .exec(&Command::new("cat").arg("/proc/1/comm"))
        .await
        .expect("start")
        .output()
        .await
        .expect("output");
    assert_eq!(out.stdout, b"init\n", "the agent is PID 1");

    sandbox
        .shutdown(Duration::from_secs(20))
        .await
        .expect("shutdown");
    assert!(
        !state_dir.exists(),
        "state dir left behind: {}",
        state_dir.display()
    );
    let left = airlock_tests::processes_mentioning(&state_dir);
    assert!(left.is_empty(), "processes left behind: {left:?}");
}

#[tokio::test]
async fn a_vm_that_dies_during_boot_is_reported_with_its_console() {
    // A kernel with an unusable initramfs panics; panic=-1 and -no-reboot
    // make QEMU exit. The error must say so and show the console.
    let junk = tempfile_path("not-an-initramfs");
    std::fs::write(&junk, b"this is not a cpio archive").expect("write junk");
    let error = airlock_tests::builder()
        .initramfs(&junk)
        .start()
        .await
        .expect_err("boot must fail");
    let _ = std::fs::remove_file(&junk);
    assert!(matches!(error, Error::VmExited { .. }), "{error}");
    assert!(error.to_string().contains("Kernel panic"), "{error}");
}

#[tokio::test]
async fn an_agent_the_host_cannot_reach_fails_the_start_at_once_with_what_was_seen() {
    // The agent serves (and announces) on another port than the one the
    // host dials: a guest that is up but out of reach. The start must fail
    // soon after the announcement, not at the 120 s boot deadline, and say
    // what each side showed.
    let error = airlock_tests::builder()
        .guest_channel(airlock::GuestChannel::Vsock)
        .kernel_arg("airlock.port=2000")
        .start()
        .await
        .expect_err("the host dials a port nobody serves");
    eprintln!("the error a user sees:\n{error}");
    let Error::AgentUnreachable {
        waited,
        device,
        console_tail,
        ..
    } = &error
    else {
        panic!("expected AgentUnreachable, got {error}");
    };
    assert!(
        *waited < airlock_tests::BOOT_TIMEOUT,
        "gave up after {waited:?}"
    );
    assert!(device.starts_with("running"), "{device}");
    assert!(console_tail.contains("vsock:2000"), "{console_tail}");
}

#[tokio::test]
async fn an_agent_that_never_answers_the_serial_opening_fails_at_the_boot_deadline() {
    // The agent serves vsock (the later key wins) while the host opens
    // the serial port: its hellos are never answered. The start ends at
    // its deadline, saying what it waited for, with the console.
    let error = airlock_tests::builder()
        .kernel_arg("airlock.channel=vsock")
        .boot_timeout(Duration::from_secs(20))
        .start()
        .await
        .expect_err("nobody answers the opening");
    let Error::BootTimeout {
        last_error,
        console_tail,
        ..
    } = &error
    else {
        panic!("expected BootTimeout, got {error}");
    };
    assert!(last_error.contains("opening"), "{last_error}");
    assert!(console_tail.contains("vsock:1024"), "{console_tail}");
}

fn tempfile_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("airlock-test-{}-{name}", std::process::id()))
}
