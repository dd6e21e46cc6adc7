//! Clone benchmark: starting from a template against a cold boot and a
//! start from a manager's warm pool, in one run, for the busybox initramfs
//! and the default Debian image; and the host memory (PSS) of idle clones
//! against an idle cold sandbox.
//!
//! A start is timed from `start()` to the first stdout chunk of `echo`
//! (what a user waits for). A start from the pool is timed from
//! `Sandboxes::start_pooled()` to its return (a thawed, answering sandbox)
//! and to the first stdout chunk of `echo`, each take after the pool (of
//! one) has refilled; once more for members that waited frozen past the
//! connection's keepalive. Targets on a TCG host: clone median at most
//! 150 ms and at most 10% of the cold start; a start from the pool returned
//! in at most 20 ms; at most 64 MiB PSS per idle clone.
//!
//! Run with `scripts/bench`, or `cargo bench -p airlock-tests --bench
//! clone [-- --json]`. `AIRLOCK_BENCH_STARTS` sets the number of cold
//! starts (default 5); clones and starts from the pool are four times as
//! many.

#![allow(clippy::expect_used, clippy::unwrap_used)]

#[allow(dead_code)]
mod common;

use std::time::{Duration, Instant};

use airlock::{Origin, Sandbox, SandboxBuilder};
use serde_json::json;

use common::pool::pooled_starts;
use common::{first_echo, ms, percentile};

/// A configuration to start, made afresh for each start.
type MakeBuilder<'a> = Box<dyn Fn() -> SandboxBuilder + 'a>;

/// Clones kept alive together for the memory figure.
const IDLE_CLONES: usize = 4;
/// The target of a start from the pool, to its return.
const POOLED_TARGET: Duration = Duration::from_millis(20);
/// How long members wait frozen in the long-wait row: past the agent
/// connection's keepalive timeout (10 s), so the thaw finds it broken.
const LONG_FROZEN: Duration = Duration::from_secs(15);
/// Takes after a long wait.
const LONG_FROZEN_TAKES: usize = 3;

#[tokio::main]
async fn main() {
    let json_out = std::env::args().skip(1).any(|arg| arg == "--json");
    let cold_n: usize = std::env::var("AIRLOCK_BENCH_STARTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(5);
    let clone_n = cold_n * 4;
    let templates = tempfile::tempdir().unwrap();
    let image = airlock_tests::default_image();
    let mut text = String::new();
    let mut report = serde_json::Map::new();

    let configs: [(&str, MakeBuilder<'_>); 2] = [
        ("busybox initramfs", Box::new(airlock_tests::builder)),
        (
            "default Debian image",
            Box::new(|| airlock_tests::builder().image(&image)),
        ),
    ];
    for (name, builder) in &configs {
        let cold = timed_starts(cold_n, || builder().from_template(false)).await;
        // The first start makes the template; it is not counted.
        let made = time_to_echo(builder().from_template(true).template_dir(templates.path())).await;
        assert!(
            matches!(made.1, Origin::Clone { built: true, .. }),
            "{:?}",
            made.1
        );
        let clones = timed_starts(clone_n, || {
            builder().from_template(true).template_dir(templates.path())
        })
        .await;
        let pool_builder = || builder().from_template(true).template_dir(templates.path());
        let pooled = pooled_starts(clone_n, Duration::ZERO, pool_builder()).await;
        let (cold_median, clone_median) = (percentile(&cold, 50), percentile(&clones, 50));
        text.push_str(&format!(
            "\nstart to first `echo` output, {name} (256 MiB, 1 vCPU)\n"
        ));
        text.push_str(&row("measure", "median", "p95"));
        text.push_str(&row(
            &format!("cold start ({cold_n} runs)"),
            &fmt_ms(cold_median),
            &fmt_ms(percentile(&cold, 95)),
        ));
        text.push_str(&row(
            &format!("clone start ({clone_n} runs)"),
            &fmt_ms(clone_median),
            &fmt_ms(percentile(&clones, 95)),
        ));
        text.push_str(&row(
            "template made (first start, once)",
            &fmt_ms(made.0),
            "",
        ));
        text.push_str(&row(
            &format!("pool start, returned ({clone_n} runs)"),
            &fmt_ms(percentile(&pooled.returned, 50)),
            &fmt_ms(percentile(&pooled.returned, 95)),
        ));
        text.push_str(&row(
            &format!("pool start, to `echo` ({clone_n} runs)"),
            &fmt_ms(percentile(&pooled.echoed, 50)),
            &fmt_ms(percentile(&pooled.echoed, 95)),
        ));
        text.push_str(&row(
            "pool start target (returned, median)",
            &format!("<= {}", fmt_ms(POOLED_TARGET)),
            if percentile(&pooled.returned, 50) <= POOLED_TARGET {
                "met"
            } else {
                "missed"
            },
        ));
        let ratio = ms(clone_median) / ms(cold_median);
        text.push_str(&row(
            "clone / cold (median)",
            &format!("{:.1}%", ratio * 100.0),
            "",
        ));
        report.insert(
            (*name).to_owned(),
            json!({
                "cold_median_ms": ms(cold_median),
                "cold_p95_ms": ms(percentile(&cold, 95)),
                "clone_median_ms": ms(clone_median),
                "clone_p95_ms": ms(percentile(&clones, 95)),
                "template_made_ms": ms(made.0),
                "clone_over_cold": ratio,
                "pooled_returned_median_ms": ms(percentile(&pooled.returned, 50)),
                "pooled_returned_p95_ms": ms(percentile(&pooled.returned, 95)),
                "pooled_echo_median_ms": ms(percentile(&pooled.echoed, 50)),
                "pooled_echo_p95_ms": ms(percentile(&pooled.echoed, 95)),
            }),
        );
    }

    // A start from the pool whose members waited past the keepalive.
    let long = pooled_starts(
        LONG_FROZEN_TAKES,
        LONG_FROZEN,
        airlock_tests::builder()
            .from_template(true)
            .template_dir(templates.path()),
    )
    .await;
    text.push_str(&format!(
        "\nstart from the pool after {LONG_FROZEN:?} frozen, busybox initramfs\n"
    ));
    text.push_str(&row("measure", "median", "max"));
    text.push_str(&row(
        &format!("pool start, returned ({LONG_FROZEN_TAKES} runs)"),
        &fmt_ms(percentile(&long.returned, 50)),
        &fmt_ms(percentile(&long.returned, 100)),
    ));
    text.push_str(&row(
        &format!("pool start, to `echo` ({LONG_FROZEN_TAKES} runs)"),
        &fmt_ms(percentile(&long.echoed, 50)),
        &fmt_ms(percentile(&long.echoed, 100)),
    ));
    report.insert(
        "pooled_after_long_wait".into(),
        json!({
            "frozen_s": LONG_FROZEN.as_secs(),
            "returned_median_ms": ms(percentile(&long.returned, 50)),
            "echo_median_ms": ms(percentile(&long.echoed, 50)),
        }),
    );

    // Memory: idle clones side by side against one idle cold sandbox.
    let mut clones = Vec::new();
    for _ in 0..IDLE_CLONES {
        let sandbox = airlock_tests::builder()
            .image(&image)
            .from_template(true)
            .template_dir(templates.path())
            .start()
            .await
            .expect("clone");
        first_echo(&sandbox).await;
        clones.push(sandbox);
    }
    let cold = airlock_tests::builder()
        .image(&image)
        .start()
        .await
        .expect("cold");
    first_echo(&cold).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let clone_pss: Vec<u64> = clones.iter().map(qemu_pss).collect();
    let cold_pss = qemu_pss(&cold);
    let clone_mean = clone_pss.iter().sum::<u64>() / clone_pss.len() as u64;
    text.push_str("\nhost memory of an idle sandbox (QEMU's PSS), default Debian image\n");
    text.push_str(&row("measure", "MiB", ""));
    text.push_str(&row(
        &format!("clone, mean of {IDLE_CLONES} alive together"),
        &format!("{:.1}", clone_mean as f64 / 1048576.0),
        "",
    ));
    text.push_str(&row(
        "cold sandbox",
        &format!("{:.1}", cold_pss as f64 / 1048576.0),
        "",
    ));
    report.insert(
        "idle_pss".into(),
        json!({ "clone_mean_bytes": clone_mean, "clones": clone_pss, "cold_bytes": cold_pss }),
    );

    if json_out {
        eprint!("{text}");
        println!("{}", serde_json::Value::Object(report));
    } else {
        print!("{text}");
    }
}

/// `n` starts in sequence, each timed to its first `echo` output.
async fn timed_starts(n: usize, builder: impl Fn() -> SandboxBuilder) -> Vec<Duration> {
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        times.push(time_to_echo(builder()).await.0);
    }
    times.sort();
    times
}

/// From `start()` to the first stdout chunk of `echo`; the VM is then
/// dropped.
async fn time_to_echo(builder: SandboxBuilder) -> (Duration, Origin) {
    let began = Instant::now();
    let sandbox = builder.start().await.expect("start");
    let first = first_echo(&sandbox).await;
    (first - began, sandbox.origin().clone())
}

/// The proportional set size of the sandbox's QEMU, in bytes.
fn qemu_pss(sandbox: &Sandbox) -> u64 {
    airlock_tests::processes_mentioning(sandbox.state_dir())
        .into_iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok())
        .map(|rollup| airlock_tests::status_kib(&rollup, "Pss") * 1024)
        .sum()
}

fn row(a: &str, b: &str, c: &str) -> String {
    format!("{a:<46} {b:>13} {c:>10}\n")
}

fn fmt_ms(d: Duration) -> String {
    format!("{:.1} ms", ms(d))
}
