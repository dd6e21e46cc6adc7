//! The first-output benchmark: from the call that makes a sandbox to the
//! first output of its first program, Airlock against gVisor on the same
//! machine, in one run, for `python3 -c 'print(1)'` and `echo hi` in the
//! default image.
//!
//! - gVisor: `runsc run` of the program in an OCI bundle of the default
//!   image's files (see `gvisor`), from the spawn to the first byte of its
//!   stdout (and to its exit).
//! - Airlock through the API: `airlock serve --pool 1` (its own process,
//!   the standard warm-up), from `Sandboxes.Create` through `Processes.Start`
//!   to the first stdout chunk, each take once the pool holds a frozen
//!   member; and `airlock run` (a clone of the template, no pool), from the
//!   spawn of the process to the first byte of its stdout.
//!
//! The rounds alternate gVisor and Airlock take by take, so the machine's
//! load falls on both alike. Target: Airlock's API within 1.0x of
//! `runsc run` for each program.
//!
//! Then where Airlock's time goes, in the library (its own pools of one,
//! of the same configuration): `start_pooled()` (the thaw, the clock, the
//! personalisation), the exec split by the agent's stamps (the agent's
//! set-up, the program until its first output, the rest: the channel and
//! both gRPC stacks), for a pool warmed up as the server's and one not
//! warmed at all; and a clone start split into the QEMU start and restore
//! until the agent answers, and the personalisation.
//!
//! Run with `scripts/bench` (which installs `runsc`), or `cargo bench -p
//! airlock-tests --bench first_output [-- --json]`. `AIRLOCK_BENCH_STARTS`
//! sets the rounds (default 5, doubled: 10 takes of each row).

#![allow(clippy::expect_used, clippy::unwrap_used)]

#[allow(dead_code)]
mod common;
mod gvisor;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use airlock::{Command, Event, PoolConfig, Sandbox, SandboxBuilder, Sandboxes, WarmUp};
use airlock_client::Endpoint;
use airlock_tests::{DaemonHome, TlsServer};
use serde_json::json;
use tokio::io::AsyncReadExt;

use common::pool::{create_to_first_output, refilled, wait_for_frozen_member};
use common::{ms, percentile};
use gvisor::Gvisor;

/// The programs, with what each prints.
const PROGRAMS: [(&str, &[&str], &str); 2] = [
    (
        "python3 -c 'print(1)'",
        &["python3", "-c", "print(1)"],
        "1\n",
    ),
    ("echo hi", &["echo", "hi"], "hi\n"),
];
/// Airlock's API against `runsc run`, at most.
const TARGET_RATIO: f64 = 1.0;

#[tokio::main]
async fn main() {
    let json_out = std::env::args().skip(1).any(|arg| arg == "--json");
    let takes = std::env::var("AIRLOCK_BENCH_STARTS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(5)
        * 2;
    let image = airlock_tests::default_image();
    let target_dir = common::musl_release_dir()
        .parent()
        .and_then(std::path::Path::parent)
        .map(std::path::Path::to_owned)
        .expect("the target directory");
    let mut peer = Gvisor::prepare(&image, &target_dir).await;

    let home = DaemonHome::new();
    let server = TlsServer::start(&home, &["--pool", "1", "--max", "3"]);
    let client = Endpoint::Local {
        socket: home.socket(),
    }
    .connect()
    .await
    .expect("the server's socket");

    let mut times = Times::default();
    for _ in 0..takes {
        for (name, argv, expected) in PROGRAMS {
            if let Ok(gvisor) = peer.as_mut() {
                match gvisor.run(argv, expected).await {
                    Ok(run) => {
                        times.push(name, "gvisor", run.first_output);
                        times.push(name, "gvisor_exit", run.exited);
                    }
                    Err(error) => peer = Err(error),
                }
            }
            wait_for_frozen_member(&home).await;
            let start = create_to_first_output(&client, argv).await;
            times.push(name, "api", start.first_output);
            times.push(name, "api_create", start.created);
        }
    }
    for _ in 0..takes.div_ceil(2) {
        let (name, argv, expected) = PROGRAMS[0];
        times.push(name, "run", airlock_run(&home, argv, expected).await);
    }
    drop(client);
    drop(server);

    let memory = 512;
    let builder = Sandbox::builder()
        .image(&image)
        .memory_mib(memory)
        .from_template(true);
    let breakdown = breakdown(&builder, takes).await;

    let mut text = format!(
        "\nfirst output of a new sandbox's first program: the default image, {takes} takes each, alternating\n"
    );
    match &peer {
        Ok(gvisor) => text.push_str(&format!(
            "gVisor: {} (ptrace, no network, --overlay{}); Airlock: accel {}, {memory} MiB, 1 vCPU\n",
            gvisor.version,
            gvisor
                .cgroups_note
                .as_deref()
                .map(|note| format!("; {note}"))
                .unwrap_or_default(),
            airlock::Accel::Auto.resolve().map_or("?", airlock::Accel::qemu_name),
        )),
        Err(error) => text.push_str(&format!("gVisor could not run here: {error}\n")),
    }
    text.push_str(&row("measure", "median", "p95", "/ gVisor"));
    let mut report = serde_json::Map::new();
    let mut met = true;
    for (name, _, _) in PROGRAMS {
        let gvisor_median = times.median(name, "gvisor");
        for (label, key) in [
            ("gVisor: runsc run, to first output", "gvisor"),
            ("gVisor: runsc run, to exit", "gvisor_exit"),
            ("Airlock API: Create returned (pool)", "api_create"),
            ("Airlock API: Create + Start, first output", "api"),
            ("Airlock: airlock run (a clone), first output", "run"),
        ] {
            let sorted = times.sorted(name, key);
            if sorted.is_empty() {
                continue;
            }
            let median = percentile(&sorted, 50);
            let ratio = gvisor_median.map(|floor| ms(median) / ms(floor));
            text.push_str(&row(
                &format!("{name}: {label}"),
                &fmt_ms(median),
                &fmt_ms(percentile(&sorted, 95)),
                &ratio.map(|r| format!("{r:.2}x")).unwrap_or_default(),
            ));
            report.insert(format!("{name} {key} median_ms"), json!(ms(median)));
            if let Some(ratio) = ratio {
                report.insert(format!("{name} {key} ratio"), json!(ratio));
                if key == "api" && ratio > TARGET_RATIO {
                    met = false;
                }
            }
        }
    }
    let verdict = match &peer {
        Ok(_) if met => "met",
        Ok(_) => "missed",
        Err(_) => "no peer",
    };
    text.push_str(&row(
        &format!("target: the API within {TARGET_RATIO}x of runsc run"),
        "",
        "",
        verdict,
    ));
    report.insert("target".to_owned(), json!(verdict));

    text.push_str(&format!(
        "\nwhere Airlock's time goes: python3 -c 'print(1)' in the library, {takes} takes each (medians)\n"
    ));
    text.push_str(&row("part", "warmed", "not warmed", ""));
    for (label, key) in [
        ("start_pooled(): thaw, clock, personalise", "created"),
        ("exec: the agent's set-up until the spawn", "setup"),
        ("exec: the program until its first output", "interpreter"),
        ("exec: channel and gRPC, both ways", "rest"),
        ("start_pooled() to the first output", "total"),
    ] {
        let (warmed, cold) = (
            breakdown.median("warmed", key),
            breakdown.median("unwarmed", key),
        );
        text.push_str(&row(
            label,
            &warmed.map(fmt_ms).unwrap_or_default(),
            &cold.map(fmt_ms).unwrap_or_default(),
            "",
        ));
        for (pool, value) in [("warmed", warmed), ("unwarmed", cold)] {
            if let Some(value) = value {
                report.insert(format!("breakdown {pool} {key} ms"), json!(ms(value)));
            }
        }
    }
    text.push_str(&row("a clone start (no pool)", "median", "", ""));
    for (label, key) in [
        ("QEMU started, state loaded, agent answered", "answered"),
        ("personalised (entropy, clock, hostname)", "personalised"),
        ("exec to the first output", "clone_exec"),
    ] {
        if let Some(value) = breakdown.median("clone", key) {
            text.push_str(&row(label, &fmt_ms(value), "", ""));
            report.insert(format!("breakdown clone {key} ms"), json!(ms(value)));
        }
    }
    eprint!("{text}");
    if json_out {
        println!("{}", serde_json::Value::Object(report));
    }
}

/// Times by program and row.
#[derive(Default)]
struct Times {
    times: BTreeMap<(String, String), Vec<Duration>>,
}

impl Times {
    fn push(&mut self, program: &str, row: &str, took: Duration) {
        self.times
            .entry((program.to_owned(), row.to_owned()))
            .or_default()
            .push(took);
    }

    fn sorted(&self, program: &str, row: &str) -> Vec<Duration> {
        let mut times = self
            .times
            .get(&(program.to_owned(), row.to_owned()))
            .cloned()
            .unwrap_or_default();
        times.sort();
        times
    }

    fn median(&self, program: &str, row: &str) -> Option<Duration> {
        let sorted = self.sorted(program, row);
        (!sorted.is_empty()).then(|| percentile(&sorted, 50))
    }
}

/// `airlock run -- ARGV` in `home`'s state directory, from the spawn to
/// the first byte of its stdout.
async fn airlock_run(home: &DaemonHome, argv: &[&str], expected: &str) -> Duration {
    let began = Instant::now();
    let mut child = tokio::process::Command::new(airlock_tests::airlock_bin())
        .arg("run")
        .arg("--")
        .args(argv)
        .env("AIRLOCK_STATE_DIR", home.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("airlock run");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut out = Vec::new();
    let mut first = None;
    let mut buf = [0u8; 4096];
    loop {
        let n = stdout.read(&mut buf).await.expect("airlock run's stdout");
        if n == 0 {
            break;
        }
        first.get_or_insert_with(Instant::now);
        out.extend_from_slice(&buf[..n]);
    }
    let status = child.wait().await.expect("airlock run");
    assert!(
        status.success() && out == expected.as_bytes(),
        "{status}: {out:?}"
    );
    first.expect("output") - began
}

/// The library's split of a start to the first output of `python3 -c`:
/// pools of one warmed and not warmed, taken in turn, then clone starts.
async fn breakdown(builder: &SandboxBuilder, takes: usize) -> Times {
    let mut times = Times::default();
    let pools =
        [("warmed", WarmUp::standard()), ("unwarmed", WarmUp::none())].map(|(name, warm_up)| {
            let manager = Sandboxes::new(2);
            manager
                .configure_pool(PoolConfig::new(builder.clone(), 1).warm_up(warm_up))
                .expect("pool");
            (name, manager)
        });
    let (_, argv, _) = PROGRAMS[0];
    for _ in 0..takes {
        for (name, manager) in &pools {
            refilled(manager).await;
            let began = Instant::now();
            let sandbox = manager.start_pooled().await.expect("start from the pool");
            let created = began.elapsed();
            let (exec, exit) = first_output(&sandbox, argv).await;
            times.push(name, "created", created);
            times.push(name, "total", created + exec);
            if let Some(stamps) = exit.stamps {
                let interpreter = stamps.to_first_output.unwrap_or_default();
                times.push(name, "setup", stamps.setup);
                times.push(name, "interpreter", interpreter);
                times.push(
                    name,
                    "rest",
                    exec.saturating_sub(stamps.setup + interpreter),
                );
            }
            manager.kill(sandbox.id()).expect("kill");
        }
    }
    drop(pools);
    for _ in 0..takes.div_ceil(2) {
        let sandbox = builder.clone().start().await.expect("a clone");
        let timings = sandbox.boot_timings();
        let (exec, _) = first_output(&sandbox, argv).await;
        times.push("clone", "answered", timings.answered);
        times.push(
            "clone",
            "personalised",
            timings.ready.saturating_sub(timings.answered),
        );
        times.push("clone", "clone_exec", exec);
    }
    times
}

/// Runs `argv` to its end: the time from the exec call to its first
/// output, and its exit.
async fn first_output(sandbox: &Sandbox, argv: &[&str]) -> (Duration, airlock::Exit) {
    let began = Instant::now();
    let mut execution = sandbox
        .exec(Command::new(argv[0]).args(argv[1..].iter().copied()))
        .await
        .expect("exec");
    let mut first = None;
    let exit = loop {
        match execution.next_event().await.expect("events") {
            Some(Event::Stdout(_)) => {
                first.get_or_insert_with(Instant::now);
            }
            Some(Event::Exited(exit)) => break exit,
            Some(_) => {}
            None => panic!("no exit"),
        }
    };
    (first.expect("output") - began, exit)
}

fn row(a: &str, b: &str, c: &str, d: &str) -> String {
    format!("{a:<62} {b:>10} {c:>10} {d:>8}\n")
}

fn fmt_ms(d: Duration) -> String {
    format!("{:.1} ms", ms(d))
}
