//! Ctrl-C through a CLI command: the command under test runs a guest
//! script that traps SIGINT, the test interrupts the host process once the
//! script is ready, and the trap's line and exit code must come back.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};

/// The guest script: prints `ready`, then on SIGINT prints `interrupted`
/// and exits 7.
pub const TRAPPING_SCRIPT: &str =
    "trap 'echo interrupted; exit 7' INT; echo ready; while :; do sleep 0.1; done";

/// Runs `command` (which runs [`TRAPPING_SCRIPT`] in a guest), sends its
/// host process SIGINT once the script said `ready`, checks that the
/// script said `interrupted`, and returns the rest of what it wrote and
/// how it ended.
pub fn interrupt_when_ready(mut command: Command) -> Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("cannot start {command:?}: {error}"));
    let Some(piped) = child.stdout.take() else {
        panic!("{command:?} has no stdout pipe");
    };
    let mut stdout = BufReader::new(piped);
    let mut line_after = |what: &str| {
        let mut line = String::new();
        if let Err(error) = stdout.read_line(&mut line) {
            panic!("reading {command:?} {what}: {error}");
        }
        line
    };
    assert_eq!(line_after("before the interrupt"), "ready\n");
    let interrupted = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap_or_else(|error| panic!("cannot run kill: {error}"));
    assert!(interrupted.success(), "kill -INT failed: {interrupted}");
    assert_eq!(line_after("after the interrupt"), "interrupted\n");
    child
        .wait_with_output()
        .unwrap_or_else(|error| panic!("waiting for {command:?}: {error}"))
}
