//! Exec benchmark: cold starts (busybox initramfs and the default Debian
//! image), exec latency and throughput, stdout throughput and footprint,
//! each beside a floor measured in the same VM and run where one exists
//! (the raw serial echo, the guest's own fork+exec+wait, the guest writing
//! to `/dev/null`); then the QEMU guest agent as a peer in a VM of its own
//! image ([`peer`]), ours and theirs side by side.
//!
//! Run with `scripts/bench` (it builds the guest echo listener and the
//! peer's `bench-qga` image first), or
//! `cargo bench -p airlock-tests --bench exec [-- --json]`. With `--json`
//! the table goes to stderr and one JSON object to stdout.
//! `AIRLOCK_BENCH_STARTS` sets the number of cold starts of each kind
//! (default 5); `AIRLOCK_BENCH_QGA_MIB` the file both agents upload in the
//! peer comparison (default `AIRLOCK_BENCH_MIB`, else 64).

#![allow(clippy::expect_used, clippy::unwrap_used)]

#[allow(dead_code)]
mod common;
mod peer;

use std::time::{Duration, Instant};

use airlock::{BootTimings, Command, Event, Sandbox, SandboxBuilder};
use futures::StreamExt;
use serde_json::{json, Value};

use common::{echo_round_trips, echo_throughput, ms, percentile, start_echo, with_echo_port, MIB};

/// Sequential `true` execs for the latency figure.
const LATENCY_RUNS: usize = 200;
/// Iterations of the guest's own fork+exec+wait loop.
const GUEST_LOOP_RUNS: usize = 500;
/// Concurrency levels for execs per second, and execs per level.
const CONCURRENCY: [usize; 3] = [1, 8, 64];
const EXECS_PER_LEVEL: usize = 128;
/// The file both agents upload in the peer comparison, MiB: the transfer
/// benchmark's default size.
const QGA_UPLOAD_MIB: usize = 64;
/// Bytes the stdout benchmark writes (32 MiB).
const STDOUT_BYTES: usize = 32 * MIB;
/// The block size of the stdout benchmark's writer: `dd` writes the bytes
/// in blocks of this many. (busybox `head -c` made only 11 to 25 MB/s on
/// its own, below the channel, so it measured `head` more than the agent.)
const STDOUT_BLOCK: usize = 64 * 1024;

#[tokio::main]
async fn main() {
    let json_out = std::env::args().skip(1).any(|arg| arg == "--json");
    let starts: usize = std::env::var("AIRLOCK_BENCH_STARTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(5);
    let env_mib = |key: &str| {
        std::env::var(key)
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&n| n > 0)
    };
    let qga_mib = env_mib("AIRLOCK_BENCH_QGA_MIB")
        .or_else(|| env_mib("AIRLOCK_BENCH_MIB"))
        .unwrap_or(QGA_UPLOAD_MIB);
    let mut table = Table::default();

    // Start from the default Debian image first (each VM shut down), then
    // from the busybox initramfs, whose last VM serves the rest.
    let mut debian_table = Table::default();
    let debian_probes = [
        ("first exec output after ready", echo_ready()),
        (
            "first python3 -c output after ready",
            Command::new("python3").arg("-c").arg("print('ready')"),
        ),
    ];
    let image = airlock_tests::default_image();
    let (debian_starts, vm) = cold_starts(
        starts,
        || airlock_tests::builder().image(&image),
        &debian_probes,
    )
    .await;
    vm.shutdown(Duration::from_secs(10))
        .await
        .expect("shutdown");
    let start_debian_json = start_section(
        &mut debian_table,
        &format!(
            "start: {starts} cold starts, default Debian image (python3), accel {}",
            debian_starts.accel
        ),
        &debian_starts,
    );

    let busybox_probes = [("first exec output after ready", echo_ready())];
    // Each start gets the echo port (the floor), on a socket of its own.
    let echo_dir = tempfile::tempdir().expect("temp dir");
    let echo_socket = |n: usize| echo_dir.path().join(format!("echo-{n}.sock"));
    let started = std::sync::atomic::AtomicUsize::new(0);
    let (busybox_starts, sandbox) = cold_starts(
        starts,
        || {
            let n = started.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            with_echo_port(airlock_tests::builder(), &echo_socket(n))
        },
        &busybox_probes,
    )
    .await;
    let last_socket = echo_socket(started.load(std::sync::atomic::Ordering::Relaxed) - 1);
    let start_json = start_section(
        &mut table,
        &format!(
            "start: {starts} cold starts, busybox initramfs, accel {}",
            busybox_starts.accel
        ),
        &busybox_starts,
    );
    table.append(&debian_table);

    // Floors in the same VM: raw serial echo and the guest's own fork+exec.
    let (_echo, mut stream) = start_echo(&sandbox, &last_socket).await;
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
    let mut to_started = Vec::with_capacity(LATENCY_RUNS);
    let mut setups = Vec::with_capacity(LATENCY_RUNS);
    let mut runs = Vec::with_capacity(LATENCY_RUNS);
    let mut outside = Vec::with_capacity(LATENCY_RUNS);
    for _ in 0..LATENCY_RUNS {
        let began = Instant::now();
        let execution = sandbox.exec(Command::new("true")).await.expect("exec true");
        to_started.push(began.elapsed());
        let exit = execution.wait().await.expect("wait true");
        let took = began.elapsed();
        assert!(exit.status.success(), "true failed: {exit:?}");
        times.push(took);
        agent_times.push(exit.duration);
        let stamps = exit.stamps.expect("the agent's stamps");
        setups.push(stamps.setup);
        runs.push(stamps.run);
        outside.push(took.saturating_sub(stamps.setup + stamps.run));
    }
    for figures in [
        &mut times,
        &mut agent_times,
        &mut to_started,
        &mut setups,
        &mut runs,
        &mut outside,
    ] {
        figures.sort();
    }
    let (lat_median, lat_p99) = (percentile(&times, 50), percentile(&times, 99));
    let agent_median = percentile(&agent_times, 50);
    table.heading(&format!(
        "exec latency: `true`, {LATENCY_RUNS} runs, one VM"
    ));
    table.header("measure", "figure", "vs floor");
    table.row(
        "raw serial echo round trip (median)",
        &fmt_ms(echo_median),
        "",
    );
    table.row("raw serial echo round trip (p99)", &fmt_ms(echo_p99), "");
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
    table.row("breakdown (medians of each part):", "", "");
    table.row(
        "  host: exec call until the started event",
        &fmt_ms(percentile(&to_started, 50)),
        "",
    );
    table.row(
        "  agent: request in until spawned (setup)",
        &fmt_ms(percentile(&setups, 50)),
        "",
    );
    table.row(
        "  agent: spawned until the exit was seen",
        &fmt_ms(percentile(&runs, 50)),
        "",
    );
    table.row(
        "  rest: channel, both gRPC stacks, host",
        &fmt_ms(percentile(&outside, 50)),
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

    // The same with two vCPUs: does the agent use the second one?
    let two = airlock_tests::builder()
        .vcpus(2)
        .start()
        .await
        .expect("2-vCPU sandbox");
    run_true(&two).await;
    table.heading(&format!(
        "exec throughput with 2 vCPUs: {EXECS_PER_LEVEL} `true` execs per level, one VM"
    ));
    table.header("concurrent sessions", "execs/s", "vs 1");
    let mut two_json = serde_json::Map::new();
    let mut at_one = 0.0;
    for level in [1usize, 8] {
        let began = Instant::now();
        futures::stream::iter(0..EXECS_PER_LEVEL)
            .map(|_| run_true(&two))
            .buffer_unordered(level)
            .collect::<Vec<_>>()
            .await;
        let per_sec = EXECS_PER_LEVEL as f64 / began.elapsed().as_secs_f64();
        if level == 1 {
            at_one = per_sec;
        }
        table.row(
            &level.to_string(),
            &format!("{per_sec:.1}"),
            &ratio(per_sec / at_one),
        );
        two_json.insert(level.to_string(), json!(per_sec));
    }
    two.shutdown(Duration::from_secs(10))
        .await
        .expect("shutdown");

    // Stdout throughput beside the raw echo and the guest writing to /dev/null.
    let echo_mbps = echo_throughput(&mut stream, STDOUT_BYTES / MIB).await;
    let writer = stdout_writer();
    let writer_line = writer.argv().join(" ");
    // Ten runs: one is too short for the guest's 10 ms clock.
    let guest_null = guest_micros(
        &sandbox,
        &format!("for i in 0 1 2 3 4 5 6 7 8 9; do {writer_line} > /dev/null 2>&1; done"),
        10,
    )
    .await;
    let null_mbps = STDOUT_BYTES as f64 / guest_null.as_secs_f64() / 1e6;
    let stdout_mbps = stdout_throughput(&sandbox, &writer).await;
    table.heading(&format!("stdout throughput: `{writer_line}`, one VM"));
    table.header("measure", "MB/s", "vs floor");
    table.row(
        "raw serial echo throughput",
        &format!("{echo_mbps:.1}"),
        "ceiling",
    );
    table.row(
        "guest alone: dd > /dev/null",
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
    let accel = sandbox.accel().qemu_name();
    sandbox
        .shutdown(Duration::from_secs(10))
        .await
        .expect("shutdown");

    // The QEMU guest agent beside ours, in a VM of its own image.
    let peer_json = peer::run(&mut table, qga_mib).await;

    table.print(json_out);
    if json_out {
        let report = json!({
            "accel": accel,
            "starts": starts,
            "start": Value::Object(start_json),
            "start_debian": Value::Object(start_debian_json),
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
                "to_started_median_ms": ms(percentile(&to_started, 50)),
                "agent_setup_median_ms": ms(percentile(&setups, 50)),
                "agent_run_median_ms": ms(percentile(&runs, 50)),
                "outside_agent_median_ms": ms(percentile(&outside, 50)),
            },
            "execs_per_second": Value::Object(throughput_json),
            "execs_per_second_2_vcpus": Value::Object(two_json),
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
            "peer_qga": peer_json,
        });
        println!("{report}");
    }
}

/// The start figures of one configuration: each start's boot split and
/// the time to first output of each probe, by probe name.
struct Starts {
    accel: &'static str,
    boots: Vec<BootTimings>,
    probes: Vec<(&'static str, Vec<Duration>)>,
}

/// `n` cold starts in sequence from `builder`, each followed by `probes`
/// (run one after another); every VM but the last is shut down.
async fn cold_starts(
    n: usize,
    builder: impl Fn() -> SandboxBuilder,
    probes: &[(&'static str, Command)],
) -> (Starts, Sandbox) {
    let mut starts = Starts {
        accel: "",
        boots: Vec::with_capacity(n),
        probes: probes.iter().map(|(name, _)| (*name, Vec::new())).collect(),
    };
    let mut last = None;
    for i in 0..n {
        let vm = builder().start().await.expect("sandbox");
        starts.accel = vm.accel().qemu_name();
        starts.boots.push(vm.boot_timings());
        for ((_, command), (_, times)) in probes.iter().zip(&mut starts.probes) {
            times.push(first_output(&vm, command).await);
        }
        if i + 1 < n {
            vm.shutdown(Duration::from_secs(10))
                .await
                .expect("shutdown");
        } else {
            last = Some(vm);
        }
    }
    (starts, last.expect("at least one start"))
}

/// Adds the start rows (median and p95) to `table` and returns them as JSON.
fn start_section(
    table: &mut Table,
    heading: &str,
    starts: &Starts,
) -> serde_json::Map<String, Value> {
    let column = |times: Vec<Duration>| {
        let mut times = times;
        times.sort();
        (percentile(&times, 50), percentile(&times, 95))
    };
    let boot = |f: fn(&BootTimings) -> Duration| column(starts.boots.iter().map(f).collect());
    let mut rows = vec![
        ("VMM processes started", boot(|b| b.vmm_started)),
        (
            "before the guest's clock started",
            boot(|b| b.before_guest_clock.unwrap_or_default()),
        ),
        ("guest kernel to agent (PID 1)", boot(|b| b.kernel_to_init)),
        ("agent init to serving", boot(|b| b.init_to_serving)),
        (
            "serving to its first Health answer",
            boot(|b| b.serving_to_answer.unwrap_or_default()),
        ),
        ("agent's first answer (host view)", boot(|b| b.answered)),
        ("agent ready (host view)", boot(|b| b.ready)),
    ];
    for (name, times) in &starts.probes {
        rows.push((name, column(times.clone())));
    }
    table.heading(heading);
    table.header("measure", "median", "p95");
    let mut json = serde_json::Map::new();
    for (name, (median, p95)) in rows {
        table.row(name, &fmt_ms(median), &fmt_ms(p95));
        json.insert(
            name.to_owned(),
            json!({"median_ms": ms(median), "p95_ms": ms(p95)}),
        );
    }
    json
}

/// `echo ready`, the first-output probe of every start.
fn echo_ready() -> Command {
    Command::new("echo").arg("ready")
}

/// Time from exec to the first stdout chunk of `command`, then waits for
/// it to exit successfully.
async fn first_output(sandbox: &Sandbox, command: &Command) -> Duration {
    let began = Instant::now();
    let mut execution = sandbox.exec(command).await.expect("exec probe");
    let mut first = None;
    while let Some(event) = execution.next_event().await.expect("probe events") {
        match event {
            Event::Stdout(_) if first.is_none() => first = Some(began.elapsed()),
            Event::Exited(exit) => assert!(
                exit.status.success(),
                "{:?} failed: {exit:?}",
                command.argv()
            ),
            _ => {}
        }
    }
    first.unwrap_or_else(|| panic!("{:?} printed nothing", command.argv()))
}

/// Runs `true` to its exit; returns the agent's own start-to-exit time.
async fn run_true(sandbox: &Sandbox) -> Duration {
    run_true_exit(sandbox).await.duration
}

/// Runs `true` and returns its exit (with the agent's stamps).
async fn run_true_exit(sandbox: &Sandbox) -> airlock::Exit {
    let exit = sandbox
        .exec(Command::new("true"))
        .await
        .expect("exec true")
        .wait()
        .await
        .expect("wait true");
    assert!(exit.status.success(), "true failed: {exit:?}");
    exit
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

/// The stdout benchmark's program: `STDOUT_BYTES` zero bytes to stdout.
fn stdout_writer() -> Command {
    Command::new("dd")
        .arg("if=/dev/zero")
        .arg(format!("bs={STDOUT_BLOCK}"))
        .arg(format!("count={}", STDOUT_BYTES / STDOUT_BLOCK))
}

/// MB/s of stdout from `writer` to the host, exec to exit, checking every
/// byte arrived.
async fn stdout_throughput(sandbox: &Sandbox, writer: &Command) -> f64 {
    let began = Instant::now();
    let mut execution = sandbox.exec(writer).await.expect("exec dd");
    let mut received = 0usize;
    while let Some(event) = execution.next_event().await.expect("dd events") {
        match event {
            Event::Stdout(chunk) => received += chunk.len(),
            Event::Dropped(n) => panic!("{n} bytes of stdout dropped"),
            Event::Exited(exit) => assert!(exit.status.success(), "dd failed: {exit:?}"),
            Event::Stderr(_) => {}
        }
    }
    let elapsed = began.elapsed();
    assert_eq!(received, STDOUT_BYTES, "stdout bytes received");
    STDOUT_BYTES as f64 / elapsed.as_secs_f64() / 1e6
}

/// VmRSS of each host process (QEMU, and vhost-device-vsock on vsock) whose command line
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

    /// A line under a heading.
    fn heading_note(&mut self, text: &str) {
        self.0.push_str(&format!("{text}\n"));
    }

    /// Another table's rows, after this one's.
    fn append(&mut self, other: &Table) {
        self.0.push_str(&other.0);
    }

    fn header(&mut self, a: &str, b: &str, c: &str) {
        self.row(a, b, c);
    }

    fn row(&mut self, a: &str, b: &str, c: &str) {
        self.0.push_str(&format!("{a:<46} {b:>13} {c:>10}\n"));
    }

    /// A row of four columns (measure, ours, theirs, ratio).
    fn row4(&mut self, a: &str, b: &str, c: &str, d: &str) {
        self.0
            .push_str(&format!("{a:<46} {b:>13} {c:>13} {d:>10}\n"));
    }

    fn print(&self, to_stderr: bool) {
        if to_stderr {
            eprint!("{}", self.0);
        } else {
            print!("{}", self.0);
        }
    }
}
