//! Starts are dependable: a hundred sandbox starts, two at a time, each
//! running a command and checking its output. A single failed start fails
//! the test, with every failure's error (console and device state) printed.
//!
//! It runs alone in its own test binary, so the two VMs at a time are the
//! only load: the soak checks starts, not how the host copes with more.

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use airlock::Command;
use futures::StreamExt;

/// How many sandboxes start in all.
const STARTS: usize = 100;
/// How many start at once.
const AT_ONCE: usize = 2;

/// One start: boots, runs `echo`, checks the output, shuts down. Returns
/// the time to ready and the state directory, or what went wrong.
async fn start_and_echo(n: usize) -> Result<(Duration, PathBuf), String> {
    let begin = Instant::now();
    let sandbox = airlock_tests::builder()
        .start()
        .await
        .map_err(|e| format!("start {n}: {e}"))?;
    let ready = begin.elapsed();
    let dir = sandbox.state_dir().to_owned();
    let expected = format!("soak {n}\n");
    let output = sandbox
        .exec(Command::new("echo").arg(format!("soak {n}")))
        .await
        .map_err(|e| format!("exec {n}: {e}"))?
        .output()
        .await
        .map_err(|e| format!("output {n}: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if stdout != expected || !output.status.success() {
        return Err(format!(
            "start {n}: echo gave {stdout:?} with {:?}",
            output.status
        ));
    }
    drop(sandbox);
    Ok((ready, dir))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_starts_two_at_a_time_all_run_their_command() {
    let began = Instant::now();
    let results: Vec<_> = futures::stream::iter(0..STARTS)
        .map(start_and_echo)
        .buffer_unordered(AT_ONCE)
        .collect()
        .await;

    let mut failures = Vec::new();
    let mut ready = Vec::new();
    let mut dirs = Vec::new();
    for result in results {
        match result {
            Ok((time, dir)) => {
                ready.push(time);
                dirs.push(dir);
            }
            Err(error) => failures.push(error),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {STARTS} starts failed:\n{}",
        failures.len(),
        failures.join("\n----\n")
    );

    // Nothing is left behind: no VMM process, no state directory.
    for dir in &dirs {
        assert!(!dir.exists(), "{} was left behind", dir.display());
        let left = airlock_tests::processes_mentioning(dir);
        assert!(
            left.is_empty(),
            "processes {left:?} outlived {}",
            dir.display()
        );
    }

    ready.sort();
    eprintln!(
        "soak: {STARTS} starts, {AT_ONCE} at a time, in {:.1?}; ready median {:.2?}, slowest {:.2?}",
        began.elapsed(),
        ready[ready.len() / 2],
        ready[ready.len() - 1],
    );
}
