//! Saved-sandbox benchmark: pause to disk and resume, for an idle sandbox
//! and for one holding 96 MiB of fresh data in `/tmp`, and fork.
//!
//! - pause to disk: `pause_to_disk()` until it returns (the snapshot is
//!   synced and the VM process gone), with the snapshot's size and MiB/s;
//! - resume: from `resume()` to the first output of an `echo` run right
//!   after, what a user waits for; with its parts: the new QEMU started
//!   and loaded the snapshot, and `resume()` returned (the agent answered
//!   on a new connection and took the host's clock);
//! - fork: `fork(1)` and `fork(3)` until the children are ready, then to
//!   the first child's `echo` output.
//!
//! Targets on a TCG host (issue: pause to disk): resume to first exec
//! output at most 400 ms for a 256 MiB guest.
//!
//! Run with `scripts/bench`, or `cargo bench -p airlock-tests --bench
//! saved [-- --json]`. `AIRLOCK_BENCH_STARTS` sets the number of cycles
//! (default 5).

#![allow(clippy::expect_used, clippy::unwrap_used)]

#[allow(dead_code)]
mod common;

use std::time::{Duration, Instant};

use airlock::{Command, Sandbox};
use serde_json::json;

use common::{first_echo, ms, percentile};

/// Data the loaded sandbox holds in `/tmp` (guest RAM).
const LOADED_MIB: u64 = 96;

#[tokio::main]
async fn main() {
    let json_out = std::env::args().skip(1).any(|arg| arg == "--json");
    let cycles: usize = std::env::var("AIRLOCK_BENCH_STARTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(5);
    let saved = tempfile::tempdir().unwrap();
    let templates = tempfile::tempdir().unwrap();
    let image = airlock_tests::default_image();
    let builder = || {
        airlock_tests::builder()
            .image(&image)
            .from_template(true)
            .template_dir(templates.path())
            .saved_dir(saved.path())
    };
    let mut text = String::new();
    let mut report = serde_json::Map::new();

    text.push_str(&format!(
        "\npause to disk and resume, default Debian image (256 MiB, 1 vCPU), {cycles} cycles\n"
    ));
    text.push_str(&row("measure", "median", "p95", "MiB/s"));
    for (name, load) in [("idle", 0), ("with 96 MiB in /tmp", LOADED_MIB)] {
        let sandbox = builder().start().await.expect("start");
        if load > 0 {
            let script = format!("head -c {}M /dev/urandom > /tmp/load", load);
            run(&sandbox, &script).await;
        }
        first_echo(&sandbox).await;
        let mut pauses = Vec::new();
        let mut resumes = Vec::new();
        let mut loads = Vec::new();
        let mut answers = Vec::new();
        let mut stream_bytes = 0;
        for _ in 0..cycles {
            let began = Instant::now();
            sandbox.pause_to_disk().await.expect("pause to disk");
            pauses.push(began.elapsed());
            stream_bytes = snapshot_bytes(saved.path(), sandbox.id());
            let began = Instant::now();
            if let Err(error) = sandbox.resume().await {
                panic!(
                    "resume: {}\n{}",
                    airlock::error_chain(&error),
                    sandbox.console_tail(3000)
                );
            }
            answers.push(began.elapsed());
            loads.push(sandbox.last_restore().expect("restored").took);
            let first = first_echo(&sandbox).await;
            resumes.push(first - began);
        }
        pauses.sort();
        resumes.sort();
        loads.sort();
        answers.sort();
        let mib = stream_bytes as f64 / 1048576.0;
        let (pause, resume) = (percentile(&pauses, 50), percentile(&resumes, 50));
        text.push_str(&row(
            &format!("{name}: snapshot size"),
            &format!("{mib:.1} MiB"),
            "",
            "",
        ));
        text.push_str(&row(
            &format!("{name}: pause to disk"),
            &fmt_ms(pause),
            &fmt_ms(percentile(&pauses, 95)),
            &format!("{:.0}", mib / pause.as_secs_f64()),
        ));
        text.push_str(&row(
            &format!("{name}:   new QEMU started and loaded"),
            &fmt_ms(percentile(&loads, 50)),
            &fmt_ms(percentile(&loads, 95)),
            &format!("{:.0}", mib / percentile(&loads, 50).as_secs_f64()),
        ));
        text.push_str(&row(
            &format!("{name}:   resume() returned (agent answered)"),
            &fmt_ms(percentile(&answers, 50)),
            &fmt_ms(percentile(&answers, 95)),
            "",
        ));
        text.push_str(&row(
            &format!("{name}: resume to first `echo` output"),
            &fmt_ms(resume),
            &fmt_ms(percentile(&resumes, 95)),
            &format!("{:.0}", mib / resume.as_secs_f64()),
        ));
        report.insert(
            name.to_owned(),
            json!({
                "snapshot_bytes": stream_bytes,
                "pause_median_ms": ms(pause),
                "pause_p95_ms": ms(percentile(&pauses, 95)),
                "resume_load_median_ms": ms(percentile(&loads, 50)),
                "resume_answered_median_ms": ms(percentile(&answers, 50)),
                "resume_to_echo_median_ms": ms(resume),
                "resume_to_echo_p95_ms": ms(percentile(&resumes, 95)),
            }),
        );
    }

    text.push_str("\nfork of a running sandbox, default Debian image\n");
    text.push_str(&row("measure", "median", "p95", ""));
    let parent = builder().start().await.expect("start");
    first_echo(&parent).await;
    for n in [1usize, 3] {
        let mut ready = Vec::new();
        let mut first_output = Vec::new();
        for _ in 0..cycles.min(3) {
            let began = Instant::now();
            let children = parent.fork(n).await.expect("fork");
            ready.push(began.elapsed());
            first_output.push(first_echo(&children[0]).await - began);
        }
        ready.sort();
        first_output.sort();
        text.push_str(&row(
            &format!("fork({n}) until the children are ready"),
            &fmt_ms(percentile(&ready, 50)),
            &fmt_ms(percentile(&ready, 95)),
            "",
        ));
        text.push_str(&row(
            &format!("fork({n}) to a child's first `echo` output"),
            &fmt_ms(percentile(&first_output, 50)),
            &fmt_ms(percentile(&first_output, 95)),
            "",
        ));
        report.insert(
            format!("fork_{n}"),
            json!({
                "ready_median_ms": ms(percentile(&ready, 50)),
                "first_echo_median_ms": ms(percentile(&first_output, 50)),
            }),
        );
    }

    if json_out {
        eprint!("{text}");
        println!("{}", serde_json::Value::Object(report));
    } else {
        print!("{text}");
    }
}

/// The newest snapshot's size of sandbox `id` in `dir`.
fn snapshot_bytes(dir: &std::path::Path, id: &str) -> u64 {
    let record = airlock::saved::SavedStore::new(dir)
        .record(id)
        .expect("saved record");
    let newest = record.generations.last().expect("a generation");
    std::fs::metadata(dir.join(id).join(format!("snapshot-{newest}")))
        .expect("snapshot file")
        .len()
}

async fn run(sandbox: &Sandbox, script: &str) {
    let output = sandbox
        .exec(Command::new("sh").arg("-c").arg(script))
        .await
        .expect("exec")
        .output()
        .await
        .expect("output");
    assert!(output.status.success(), "{script}: {output:?}");
}

fn row(a: &str, b: &str, c: &str, d: &str) -> String {
    format!("{a:<46} {b:>13} {c:>10} {d:>8}\n")
}

fn fmt_ms(d: Duration) -> String {
    format!("{:.1} ms", ms(d))
}
