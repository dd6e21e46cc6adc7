//! The soak: many starts, two at a time, each running a command and
//! checking its output, and nothing left behind. `tests/soak.rs` (clones
//! and cold starts on the serial channel) and `tests/soak_vsock.rs` run it.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use airlock::{Command, Origin, SandboxBuilder};
use futures::StreamExt;

/// How many sandboxes start at once.
const AT_ONCE: usize = 2;

/// One start: boots, runs `echo`, checks the output, shuts down. Returns
/// the time to ready and the state directory, or what went wrong.
async fn start_and_echo(
    builder: SandboxBuilder,
    n: usize,
    clone: bool,
) -> Result<(Duration, PathBuf), String> {
    let begin = Instant::now();
    let sandbox = builder
        .start()
        .await
        .map_err(|e| format!("start {n}: {e}"))?;
    let ready = begin.elapsed();
    if clone != matches!(sandbox.origin(), Origin::Clone { .. }) {
        return Err(format!("start {n}: started as {:?}", sandbox.origin()));
    }
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

/// Runs `starts` starts of `builder`, `AT_ONCE` at a time, and checks
/// that all ran their command and left nothing behind.
pub async fn soak(what: &str, builder: SandboxBuilder, starts: usize, clone: bool) {
    let began = Instant::now();
    let results: Vec<_> = futures::stream::iter(0..starts)
        .map(|n| start_and_echo(builder.clone(), n, clone))
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
        "{what}: {} of {starts} starts failed:\n{}",
        failures.len(),
        failures.join("\n----\n")
    );

    // Nothing is left behind: no VMM process, no state directory.
    for dir in &dirs {
        assert!(!dir.exists(), "{} was left behind", dir.display());
        let left = crate::processes_mentioning(dir);
        assert!(
            left.is_empty(),
            "processes {left:?} outlived {}",
            dir.display()
        );
    }

    ready.sort();
    eprintln!(
        "soak: {starts} {what}, {AT_ONCE} at a time, in {:.1?}; ready median {:.2?}, slowest {:.2?}",
        began.elapsed(),
        ready[ready.len() / 2],
        ready[ready.len() - 1],
    );
}
