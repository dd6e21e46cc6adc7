//! `airlock run` wiring the host to the command: piped stdin, Ctrl-C,
//! `--env`/`--cwd`/`--user`, and `--timeout` as the guest-side deadline.

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::Write;
use std::process::{Command, Stdio};

use airlock_tests::interrupt::{interrupt_when_ready, TRAPPING_SCRIPT};

fn airlock_run(args: &[&str]) -> Command {
    let mut command = Command::new(airlock_tests::airlock_bin());
    command.args(["run", "--memory", "256"]).args(args);
    command
}

#[test]
fn piped_stdin_reaches_the_command() {
    // Every byte value, more than a pipe holds.
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let mut child = airlock_run(&["--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run airlock");
    let mut stdin = child.stdin.take().unwrap();
    let input = data.clone();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().expect("wait");
    writer.join().unwrap().expect("write stdin");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    assert_eq!(out.stdout.len(), data.len(), "stderr: {stderr}");
    assert!(out.stdout == data, "stdin changed on the way");
}

#[test]
fn env_cwd_and_user_reach_the_command() {
    let out = airlock_run(&[
        "--env",
        "GREETING=hello there",
        "-e",
        "SECOND=2",
        "--cwd",
        "/tmp",
        "--user",
        "1000:1000",
        "--",
        "sh",
        "-c",
        "echo \"$GREETING|$SECOND|$(pwd)|$(id -u):$(id -g)\"",
    ])
    .output()
    .expect("run airlock");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello there|2|/tmp|1000:1000\n",
        "stderr: {stderr}"
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
}

#[test]
fn timeout_kills_the_command_keeps_its_output_and_exits_124() {
    let out = airlock_run(&[
        "--timeout",
        "3",
        "--",
        "sh",
        "-c",
        "echo partial; sleep 1000; echo never",
    ])
    .output()
    .expect("run airlock");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "partial\n",
        "stderr: {stderr}"
    );
    assert_eq!(out.status.code(), Some(124), "stderr: {stderr}");
    assert!(stderr.contains("timed out"), "stderr: {stderr}");
}

#[test]
fn ctrl_c_is_forwarded_to_the_command() {
    let out = interrupt_when_ready(airlock_run(&["--", "sh", "-c", TRAPPING_SCRIPT]));
    assert_eq!(out.status.code(), Some(7), "the command's own exit code");
}
