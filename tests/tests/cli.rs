//! `airlock run` as a user types it.

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::Command;

fn airlock_run(script: &str) -> std::process::Output {
    Command::new(airlock_tests::airlock_bin())
        .args(["run", "--memory", "256", "--", "sh", "-c", script])
        .output()
        .expect("run airlock")
}

#[test]
fn run_streams_output_and_exits_with_the_commands_code() {
    let out = airlock_run("echo out; echo err >&2; exit 3");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.lines().any(|line| line == "err"), "stderr: {stderr}");
    assert!(
        !stderr.contains("out"),
        "stdout leaked into stderr: {stderr}"
    );
    assert_eq!(out.status.code(), Some(3), "stderr: {stderr}");
}

#[test]
fn run_reports_death_by_signal_as_128_plus_n() {
    let out = airlock_run("kill -9 $$");
    assert_eq!(
        out.status.code(),
        Some(137),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn run_of_a_missing_program_says_so() {
    let out = Command::new(airlock_tests::airlock_bin())
        .args(["run", "--memory", "256", "--", "no-such-program-xyz"])
        .output()
        .expect("run airlock");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no-such-program-xyz"), "stderr: {stderr}");
    assert_eq!(out.status.code(), Some(125), "stderr: {stderr}");
}
