//! Exec benchmark: cold start, exec latency and throughput, stdout
//! throughput and footprint, each beside a floor measured in the same VM
//! and run where one exists (the raw vsock echo, the guest's own
//! fork+exec+wait, the guest writing to `/dev/null`).
//!
//! Run with `scripts/bench` (it builds the guest echo listener first), or
//! `cargo bench -p airlock-tests --bench exec [-- --json]`. With `--json`
//! the table goes to stderr and one JSON object to stdout.
//! `AIRLOCK_BENCH_STARTS` sets the number of cold starts (default 5).

#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use airlock::{Command, Event, Sandbox};
use futures::StreamExt;
use serde_json::{json, Value};

use common::{echo_round_trips, echo_throughput, ms, percentile, start_echo, MIB};

/// Sequential `true` execs for the latency figure.
const LATENCY_RUNS: usize = 200;
/// Iterations of the guest's own fork+exec+wait loop.
const GUEST_LOOP_RUNS: usize = 500;
/// Concurrency levels for execs per second, and execs per level.
const CONCURRENCY: [usize; 3] = [1, 8, 64];
const EXECS_PER_LEVEL: usize = 128;
/// Bytes the stdout benchmark writes (32 MiB).
const STDOUT_BYTES: usize = 32 * MIB;

#[tokio::main]
async fn main() {
    let json_out = std::env::args().skip(1).any(|arg| arg == "--json");
    let starts: usize = std::env::var("AIRLOCK_BENCH_STARTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(5);
    let mut table = Table::default();

    // Start: N cold starts in sequence; the last VM serves the rest.
    let mut boots = Vec::with_capacity(starts);
    let mut sandbox = None;
    for i in 0..starts {
        let vm = airlock_tests::builder().start().await.expect("sandbox");
        let first = first_output(&vm).await;
        boots.push((vm.boot_timings(), first));
        if i + 1 < starts {
            vm.shutdown(Duration::from_secs(10))
                .await
                .expect("shutdown");
        } else {
            sandbox = Some(vm);
        }
    }
    let sandbox = sandbox.expect("at least one start");
    let column = |f: &dyn Fn(&(airlock::BootTimings, Duration)) -> Duration| {
        let mut times: Vec<Duration> = boots.iter().map(f).collect();
        times.sort();
        (percentile(&times, 50), percentile(&times, 95))
    };
    let start_rows = [
        ("VMM processes started", column(&|b| b.0.vmm_started)),
        (
            "guest kernel to agent (PID 1)",
            column(&|b| b.0.kernel_to_init),
        ),
        ("agent init to serving", column(&|b| b.0.init_to_serving)),
        ("agent ready (host view)", column(&|b| b.0.ready)),
        ("first exec output after ready", column(&|b| b.1)),
    ];
    table.heading(&format!(
        "start: {starts} cold starts, busybox initramfs, accel {}",
        sandbox.accel().qemu_name()
    ));
    table.header("measure", "median", "p95");
    let mut start_json = serde_json::Map::new();
    for (name, (median, p95)) in start_rows {
        table.row(name, &fmt_ms(median), &fmt_ms(p95));
        start_json.insert(
            name.to_owned(),
            json!({"median_ms": ms(median), "p95_ms": ms(p95)}),
        );
    }

    // Floors in the same VM: raw vsock echo and the guest's own fork+exec.
    let (_echo, mut stream) = start_echo(&sandbox).await;
    let (echo_median, echo_p99) = echo_round_trips(&mut stream, 500).await;
    let guest_spawn = guest_micros(
        &sandbox,
        &format!("i=0; while [ $i -lt {GUEST_LOOP_RUNS} ]; do /bin/true; i=$((i+1)); done"),
        GUEST_LOOP_RUNS,
    )
    .await;
    let floor = echo_median + guest_spawn;

    // Exec latency: `true`, start to exit event, sequential.
    let mut times = Vec::with_capacity(LATENCY_RUNS);
    let mut agent_times = Vec::with_capacity(LATENCY_RUNS);
    for _ in 0..LATENCY_RUNS {
        let began = Instant::now();
        let exit = run_true(&sandbox).await;
        times.push(began.elapsed());
        agent_times.push(exit);
    }
    times.sort();
    agent_times.sort();
    let (lat_median, lat_p99) = (percentile(&times, 50), percentile(&times, 99));
    let agent_median = percentile(&agent_times, 50);
    table.heading(&format!(
        "exec latency: `true`, {LATENCY_RUNS} runs, one VM"
    ));
    table.header("measure", "figure", "vs floor");
    table.row(
        "raw vsock echo round trip (median)",
        &fmt_ms(echo_median),
        "",
    );
    table.row("raw vsock echo round trip (p99)", &fmt_ms(echo_p99), "");
    table.row(
        &format!("guest fork+exec+wait /bin/true (mean of {GUEST_LOOP_RUNS})"),
        &fmt_ms(guest_spawn),
        "",
    );
    table.row("floor: echo median + guest spawn", &fmt_ms(floor), "floor");
    table.row(
        "exec `true` round trip (median)",
        &fmt_ms(lat_median),
        &ratio(ms(lat_median) / ms(floor)),
    );
    table.row(
        "exec `true` round trip (p99)",
        &fmt_ms(lat_p99),
        &ratio(ms(lat_p99) / ms(floor)),
    );
    table.row(
        "agent-reported start to exit (median)",
        &fmt_ms(agent_median),
        "",
    );

    // Exec throughput at 1, 8 and 64 concurrent sessions.
    table.heading(&format!(
        "exec throughput: {EXECS_PER_LEVEL} `true` execs per level, one VM"
    ));
    table.header("concurrent sessions", "execs/s", "");
    let mut throughput_json = serde_json::Map::new();
    for level in CONCURRENCY {
        let began = Instant::now();
        futures::stream::iter(0..EXECS_PER_LEVEL)
            .map(|_| run_true(&sandbox))
            .buffer_unordered(level)
            .collect::<Vec<_>>()
            .await;
        let per_sec = EXECS_PER_LEVEL as f64 / began.elapsed().as_secs_f64();
        table.row(&level.to_string(), &format!("{per_sec:.1}"), "");
        throughput_json.insert(level.to_string(), json!(per_sec));
    }

    // Stdout throughput beside the raw echo and the guest writing to /dev/null.
    let echo_mbps = echo_throughput(&mut stream, STDOUT_BYTES / MIB).await;
    let guest_null = guest_micros(
        &sandbox,
        &format!("head -c {STDOUT_BYTES} /dev/zero > /dev/null"),
        1,
    )
    .await;
    let null_mbps = STDOUT_BYTES as f64 / guest_null.as_secs_f64() / 1e6;
    let stdout_mbps = stdout_throughput(&sandbox).await;
    table.heading(&format!(
        "stdout throughput: `head -c {STDOUT_BYTES} /dev/zero`, one VM"
    ));
    table.header("measure", "MB/s", "vs floor");
    table.row(
        "raw vsock echo throughput",
        &format!("{echo_mbps:.1}"),
        "ceiling",
    );
    table.row(
        "guest alone: head > /dev/null",
        &format!("{null_mbps:.1}"),
        "",
    );
    table.row(
        "exec stdout to the host",
        &format!("{stdout_mbps:.1}"),
        &ratio(stdout_mbps / echo_mbps),
    );

    // Footprint.
    let health = sandbox.health().await.expect("health");
    let agent_bin = common::musl_release_dir().join("airlock-agent");
    let agent_bin_bytes = std::fs::metadata(&agent_bin).map(|m| m.len()).ok();
    let host = host_rss(&sandbox);
    table.heading("footprint (the last VM, after the runs above)");
    table.header("measure", "MiB", "");
    let mib = |bytes: u64| format!("{:.1}", bytes as f64 / MIB as f64);
    table.row("agent RSS", &mib(health.agent_rss_bytes), "");
    table.row(
        "agent binary (static musl, release)",
        &agent_bin_bytes.map_or_else(|| "missing".to_owned(), mib),
        "",
    );
    for (name, bytes) in &host {
        table.row(&format!("host RSS: {name}"), &mib(*bytes), "");
    }
    let host_total: u64 = host.iter().map(|(_, bytes)| bytes).sum();
    table.row("host RSS per sandbox (sum)", &mib(host_total), "");

    table.print(json_out);
    if json_out {
        let report = json!({
            "accel": sandbox.accel().qemu_name(),
            "starts": starts,
            "start": Value::Object(start_json),
            "exec_latency": {
                "runs": LATENCY_RUNS,
                "median_ms": ms(lat_median),
                "p99_ms": ms(lat_p99),
                "agent_reported_median_ms": ms(agent_median),
                "echo_round_trip_median_ms": ms(echo_median),
                "echo_round_trip_p99_ms": ms(echo_p99),
                "guest_spawn_ms": ms(guest_spawn),
                "floor_ms": ms(floor),
                "median_vs_floor": ms(lat_median) / ms(floor),
            },
            "execs_per_second": Value::Object(throughput_json),
            "stdout": {
                "bytes": STDOUT_BYTES,
                "exec_mb_per_s": stdout_mbps,
                "echo_mb_per_s": echo_mbps,
                "guest_dev_null_mb_per_s": null_mbps,
            },
            "footprint": {
                "agent_rss_bytes": health.agent_rss_bytes,
                "agent_binary_bytes": agent_bin_bytes,
                "host_rss_bytes": host.iter().map(|(name, bytes)| json!({"process": name, "bytes": bytes})).collect::<Vec<_>>(),
                "host_rss_total_bytes": host_total,
            },
        });
        println!("{report}");
    }
    sandbox
        .shutdown(Duration::from_secs(10))
        .await
        .expect("shutdown");
}

/// Time from exec to the first stdout chunk of `echo`, then waits for it.
async fn first_output(sandbox: &Sandbox) -> Duration {
    let began = Instant::now();
    let mut execution = sandbox
        .exec(Command::new("echo").arg("ready"))
        .await
        .expect("exec echo");
    let mut first = None;
    while let Some(event) = execution.next_event().await.expect("echo events") {
        match event {
            Event::Stdout(_) if first.is_none() => first = Some(began.elapsed()),
            Event::Exited(exit) => assert!(exit.status.success(), "echo failed: {exit:?}"),
            _ => {}
        }
    }
    first.expect("echo printed nothing")
}

/// Runs `true` to its exit; returns the agent's own start-to-exit time.
async fn run_true(sandbox: &Sandbox) -> Duration {
    let exit = sandbox
        .exec(Command::new("true"))
        .await
        .expect("exec true")
        .wait()
        .await
        .expect("wait true");
    assert!(exit.status.success(), "true failed: {exit:?}");
    exit.duration
}

/// The guest's own time per iteration of `script`, timed inside the guest
/// with /proc/uptime (10 ms resolution; busybox `date` has no `%N`).
async fn guest_micros(sandbox: &Sandbox, script: &str, iterations: usize) -> Duration {
    let timed = format!(
        "read s _ < /proc/uptime; {script}; read e _ < /proc/uptime; \
         s=${{s%.*}}${{s#*.}}; e=${{e%.*}}${{e#*.}}; echo $(( (e - s) * 10000 ))"
    );
    let output = sandbox
        .exec(Command::new("sh").arg("-c").arg(timed))
        .await
        .expect("exec guest timing")
        .output()
        .await
        .expect("guest timing output");
    assert!(output.status.success(), "guest timing: {output:?}");
    let micros: u64 = String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .expect("guest timing prints microseconds");
    Duration::from_micros(micros) / u32::try_from(iterations).expect("iterations")
}

/// MB/s of stdout from `head -c STDOUT_BYTES /dev/zero` to the host, exec
/// to exit, checking every byte arrived.
async fn stdout_throughput(sandbox: &Sandbox) -> f64 {
    let began = Instant::now();
    let mut execution = sandbox
        .exec(
            Command::new("head")
                .arg("-c")
                .arg(STDOUT_BYTES.to_string())
                .arg("/dev/zero"),
        )
        .await
        .expect("exec head");
    let mut received = 0usize;
    while let Some(event) = execution.next_event().await.expect("head events") {
        match event {
            Event::Stdout(chunk) => received += chunk.len(),
            Event::Dropped(n) => panic!("{n} bytes of stdout dropped"),
            Event::Exited(exit) => assert!(exit.status.success(), "head failed: {exit:?}"),
            Event::Stderr(_) => {}
        }
    }
    let elapsed = began.elapsed();
    assert_eq!(received, STDOUT_BYTES, "stdout bytes received");
    STDOUT_BYTES as f64 / elapsed.as_secs_f64() / 1e6
}

/// VmRSS of each host process (QEMU, vhost-device-vsock) whose command line
/// names the sandbox's state directory.
fn host_rss(sandbox: &Sandbox) -> Vec<(String, u64)> {
    airlock_tests::processes_mentioning(sandbox.state_dir())
        .into_iter()
        .filter_map(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let field = |key: &str| {
                status
                    .lines()
                    .find_map(|line| line.strip_prefix(key))
                    .map(|rest| rest.trim().to_owned())
            };
            let name = field("Name:")?;
            let kib: u64 = field("VmRSS:")?
                .trim_end_matches("kB")
                .trim()
                .parse()
                .ok()?;
            Some((format!("{name} ({pid})"), kib * 1024))
        })
        .collect()
}

fn fmt_ms(d: Duration) -> String {
    format!("{:.3} ms", ms(d))
}

fn ratio(r: f64) -> String {
    format!("{r:.2}x")
}

/// Rows printed at the end, to stdout or (with `--json`) to stderr.
#[derive(Default)]
struct Table(String);

impl Table {
    fn heading(&mut self, text: &str) {
        self.0.push_str(&format!("\n{text}\n"));
    }

    fn header(&mut self, a: &str, b: &str, c: &str) {
        self.row(a, b, c);
    }

    fn row(&mut self, a: &str, b: &str, c: &str) {
        self.0.push_str(&format!("{a:<46} {b:>13} {c:>10}\n"));
    }

    fn print(&self, to_stderr: bool) {
        if to_stderr {
            eprint!("{}", self.0);
        } else {
            print!("{}", self.0);
        }
    }
}
