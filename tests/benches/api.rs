//! The API benchmark: a start from the warm pool to its first output,
//! through the server's API from another process, against the library's own
//! start from a pool of the same configuration, in one run.
//!
//! The floor is `Sandboxes::start_pooled()` to the first stdout chunk of
//! `echo` (the default image, 512 MiB, 1 vCPU: what `sandbox create`
//! without options asks for). The API rows run `airlock serve --pool 1`
//! (a process of its own) and time, from this process, `Sandboxes.Create`
//! through `Processes.Start` of `echo` to its first stdout chunk: once on
//! the server's Unix socket, once over TCP with TLS and a key on loopback,
//! alternating, each take once the pool has refilled (a frozen QEMU).
//! Target: within 1.3x of the floor.
//!
//! The same server serves the other clients in the same rounds: the
//! `airlock` CLI (`sandbox create` then `sandbox exec -- echo ready`,
//! processes of their own) and the Python SDK (`Sandbox.create()` and
//! `AsyncSandbox.create()` to the first stdout chunk of `echo ready`, timed
//! in a helper process that keeps its connection, `common::clients`). Then
//! an exec round trip, `/bin/sh -c true` to its exit in one running sandbox,
//! in rounds through the library (the floor, its own sandbox of the same
//! machine), the Rust client, the SDK's `commands.run("true")` (blocking and
//! asyncio) and the CLI. Each round takes once per client, so that the
//! machine's changing load falls on all alike; what the SDK adds is the
//! median of its take minus the Rust client's in the same round. Target:
//! at most 2 ms a call.
//!
//! Run with `scripts/bench`, or `cargo bench -p airlock-tests --bench api
//! [-- --json]`. `AIRLOCK_BENCH_STARTS` sets the takes per row divided by
//! four (default 5: 20 takes). The SDK's rows need `AIRLOCK_BENCH_PYTHON`,
//! the interpreter of a virtualenv with the SDK (`scripts/bench` sets it
//! from `scripts/sdk-python venv`); without it they are left out, and the
//! output says so.

#![allow(clippy::expect_used, clippy::unwrap_used)]

#[allow(dead_code)]
mod common;

use std::time::Duration;

use airlock::Sandbox;
use airlock_client::{api, Client, Endpoint};
use airlock_tests::{DaemonHome, TlsServer};
use serde_json::json;

use common::clients;
use common::pool::{create_to_first_output, pooled_starts, wait_for_frozen_member};
use common::{ms, percentile};

/// The most the API may add to a start from the pool.
const TARGET_RATIO: f64 = 1.3;
/// The most the Python SDK may add to a call over the Rust client.
const SDK_TARGET_MS: f64 = 2.0;
/// Exec round trips per row (the CLI takes one round in five).
const EXECS: usize = 50;
/// Rounds first taken and thrown away.
const WARM: usize = 3;

#[tokio::main]
async fn main() {
    let json_out = std::env::args().skip(1).any(|arg| arg == "--json");
    let takes = std::env::var("AIRLOCK_BENCH_STARTS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(5)
        * 4;
    let image = airlock_tests::default_image();
    let floor = pooled_starts(
        takes,
        Duration::ZERO,
        Sandbox::builder().image(&image).memory_mib(512),
    )
    .await;

    let home = DaemonHome::new();
    let server = TlsServer::start(&home, &["--pool", "1", "--max", "3"]);
    let key = {
        let out = home.airlock(&["key", "create", "bench"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .unwrap()
            .trim()
            .to_owned()
    };
    let local = Endpoint::Local {
        socket: home.socket(),
    }
    .connect()
    .await
    .expect("the local socket");
    let remote = Endpoint::remote(
        &format!("https://localhost:{}", server.port),
        Some(key),
        Some(server.ca.clone()),
    )
    .unwrap()
    .connect()
    .await
    .expect("the TLS listener");
    let mut sdk = std::env::var_os(clients::PYTHON_ENV)
        .map(|python| clients::SdkHelper::start(std::path::Path::new(&python), &home.socket()));

    // Starts: a round takes once per client in turn, each once the pool has
    // refilled (the CLI every other round), so that drift in the machine's
    // load falls on every client alike.
    let mut starts = Rows::default();
    for round in 0..takes {
        wait_for_frozen_member(&home).await;
        starts.push("unix", create_to_echo(&local).await);
        wait_for_frozen_member(&home).await;
        starts.push("tls", create_to_echo(&remote).await);
        if let Some(sdk) = sdk.as_mut() {
            wait_for_frozen_member(&home).await;
            starts.push("sdk_sync", sdk.call("create sync"));
            wait_for_frozen_member(&home).await;
            starts.push("sdk_async", sdk.call("create async"));
        }
        if round % 2 == 0 {
            wait_for_frozen_member(&home).await;
            starts.push("cli", clients::cli_create_to_echo(&home, &local).await);
        }
    }

    // Exec round trips in one running sandbox of the server's, and the
    // library's own in a sandbox of the same machine, in turn likewise.
    let exec_id = local
        .sandboxes()
        .create(api::CreateSandboxRequest::default())
        .await
        .expect("create the exec sandbox")
        .into_inner()
        .sandbox_id;
    let library = Sandbox::builder()
        .image(&image)
        .memory_mib(512)
        .start()
        .await
        .expect("a library sandbox for the exec floor");
    wait_for_frozen_member(&home).await;
    let mut execs = Rows::default();
    // The steps of a round, started at a different one each round: an exec
    // that follows another in the same sandbox would otherwise always meet
    // the agent's work after that one.
    const STEPS: usize = 8;
    for round in 0..EXECS + WARM {
        let mut take = |name: &'static str, took: Duration| {
            if round >= WARM {
                execs.push(name, took);
            }
        };
        for step in 0..STEPS {
            match (round + step) % STEPS {
                0 => take("library", clients::library_exec(&library).await),
                1 => take("api", clients::api_exec(&local, &exec_id).await),
                2 => take("get_api", clients::api_get(&local, &exec_id).await),
                3 if round % 5 == 0 => take("cli", clients::cli_exec(&home, &exec_id)),
                n => {
                    let Some(sdk) = sdk.as_mut() else { continue };
                    match n {
                        4 => take("sdk_sync", sdk.call(&format!("exec sync {exec_id}"))),
                        5 => take("sdk_async", sdk.call(&format!("exec async {exec_id}"))),
                        6 => take("get_sdk_sync", sdk.call(&format!("get sync {exec_id}"))),
                        7 => take("get_sdk_async", sdk.call(&format!("get async {exec_id}"))),
                        _ => {}
                    }
                }
            }
        }
    }
    drop(library);
    drop(sdk);
    drop(server);

    let floor_median = percentile(&floor.echoed, 50);
    let ratio = |times: &[Duration]| ms(percentile(times, 50)) / ms(floor_median);
    let mut text = format!(
        "\nstart from the pool to the first `echo` output, default image (512 MiB, 1 vCPU), {takes} takes each (the CLI {})\n",
        takes.div_ceil(2)
    );
    text.push_str(&row("measure", "median", "p95", "/ floor"));
    text.push_str(&row(
        "library: Sandboxes::start_pooled (the floor)",
        &fmt_ms(floor_median),
        &fmt_ms(percentile(&floor.echoed, 95)),
        "1.00x",
    ));
    let (unix, tls) = (starts.sorted("unix"), starts.sorted("tls"));
    for (name, key) in [
        ("API, the server's Unix socket", "unix"),
        ("API, TCP + TLS + key on loopback", "tls"),
        ("Python SDK, Sandbox.create (blocking)", "sdk_sync"),
        ("Python SDK, AsyncSandbox.create (asyncio)", "sdk_async"),
        ("CLI: sandbox create + sandbox exec (to exit)", "cli"),
    ] {
        let times = starts.sorted(key);
        if times.is_empty() {
            continue;
        }
        text.push_str(&row(
            name,
            &fmt_ms(percentile(&times, 50)),
            &fmt_ms(percentile(&times, 95)),
            &format!("{:.2}x", ratio(&times)),
        ));
    }
    let met = ratio(&unix) <= TARGET_RATIO && ratio(&tls) <= TARGET_RATIO;
    text.push_str(&row(
        &format!("target: the API within {TARGET_RATIO}x"),
        "",
        "",
        if met { "met" } else { "missed" },
    ));
    let library_exec = execs.sorted("library");
    let exec_floor = percentile(&library_exec, 50);
    text.push_str(&format!(
        "\nexec round trip: `/bin/sh -c true` to its exit in one running sandbox, {EXECS} each (the CLI {})\n",
        EXECS / 5
    ));
    text.push_str(&row("measure", "median", "p95", "/ floor"));
    for (name, key) in [
        ("library: Sandbox::exec (the floor)", "library"),
        ("API, Rust client, the server's Unix socket", "api"),
        ("Python SDK, commands.run (blocking)", "sdk_sync"),
        ("Python SDK, commands.run (asyncio)", "sdk_async"),
        ("CLI: airlock sandbox exec (a process)", "cli"),
    ] {
        let times = execs.sorted(key);
        if times.is_empty() {
            continue;
        }
        text.push_str(&row(
            name,
            &fmt_ms(percentile(&times, 50)),
            &fmt_ms(percentile(&times, 95)),
            &format!("{:.2}x", ms(percentile(&times, 50)) / ms(exec_floor)),
        ));
    }
    text.push_str(&format!(
        "\na call the server answers without the guest: Sandboxes.Get, {EXECS} each\n"
    ));
    text.push_str(&row("measure", "median", "p95", ""));
    for (name, key) in [
        ("API, Rust client", "get_api"),
        ("Python SDK, get_info (blocking)", "get_sdk_sync"),
        ("Python SDK, get_info (asyncio)", "get_sdk_async"),
    ] {
        let times = execs.sorted(key);
        if !times.is_empty() {
            text.push_str(&row(
                name,
                &fmt_ms(percentile(&times, 50)),
                &fmt_ms(percentile(&times, 95)),
                "",
            ));
        }
    }
    // What the SDK adds: its take minus the Rust client's take of the same
    // round, median and quartiles.
    let added = [
        ("start, blocking", starts.paired("sdk_sync", "unix")),
        ("start, asyncio", starts.paired("sdk_async", "unix")),
        ("exec, blocking", execs.paired("sdk_sync", "api")),
        ("exec, asyncio", execs.paired("sdk_async", "api")),
        ("Get, blocking", execs.paired("get_sdk_sync", "get_api")),
        ("Get, asyncio", execs.paired("get_sdk_async", "get_api")),
    ];
    if starts.sorted("sdk_sync").is_empty() {
        text.push_str(&format!(
            "Python SDK rows left out: set {} to the python of a venv with the SDK (scripts/bench does)\n",
            clients::PYTHON_ENV
        ));
    } else {
        text.push_str(&format!(
            "\nwhat the Python SDK adds to a call over the Rust client (each round's difference; target at most {SDK_TARGET_MS} ms)\n"
        ));
        text.push_str(&row("call", "median", "quartiles", "target"));
        for (name, (median, q1, q3)) in added {
            text.push_str(&row(
                name,
                &format!("{median:+.2} ms"),
                &format!("{q1:+.1}..{q3:+.1}"),
                if median <= SDK_TARGET_MS {
                    "met"
                } else {
                    "missed"
                },
            ));
        }
    }
    eprint!("{text}");
    if json_out {
        let medians = |rows: &Rows| -> serde_json::Value {
            rows.times
                .keys()
                .map(|key| {
                    (
                        (*key).to_owned(),
                        json!(ms(percentile(&rows.sorted(key), 50))),
                    )
                })
                .collect::<serde_json::Map<_, _>>()
                .into()
        };
        let report = json!({
            "takes": takes,
            "floor_median_ms": ms(floor_median),
            "floor_p95_ms": ms(percentile(&floor.echoed, 95)),
            "api_unix_median_ms": ms(percentile(&unix, 50)),
            "api_unix_p95_ms": ms(percentile(&unix, 95)),
            "api_tls_median_ms": ms(percentile(&tls, 50)),
            "api_tls_p95_ms": ms(percentile(&tls, 95)),
            "api_unix_ratio": ratio(&unix),
            "api_tls_ratio": ratio(&tls),
            "start_median_ms": medians(&starts),
            "exec_median_ms": medians(&execs),
            "sdk_added_ms": added
                .iter()
                .map(|(name, (median, _, _))| ((*name).to_owned(), json!(median)))
                .collect::<serde_json::Map<_, _>>(),
        });
        println!("{report}");
    }
}

/// Times by client, in the order taken (a round's takes share an index).
#[derive(Debug, Default)]
struct Rows {
    times: std::collections::BTreeMap<&'static str, Vec<Duration>>,
}

impl Rows {
    fn push(&mut self, client: &'static str, took: Duration) {
        self.times.entry(client).or_default().push(took);
    }

    fn sorted(&self, client: &str) -> Vec<Duration> {
        let mut times = self.times.get(client).cloned().unwrap_or_default();
        times.sort();
        times
    }

    /// `client`'s take minus `base`'s in each round, in ms: the median and
    /// the quartiles.
    fn paired(&self, client: &str, base: &str) -> (f64, f64, f64) {
        let (Some(a), Some(b)) = (self.times.get(client), self.times.get(base)) else {
            return (f64::NAN, f64::NAN, f64::NAN);
        };
        let mut diffs: Vec<f64> = a.iter().zip(b).map(|(a, b)| ms(*a) - ms(*b)).collect();
        diffs.sort_by(f64::total_cmp);
        let at = |pct: usize| {
            diffs
                .get((diffs.len() * pct / 100).min(diffs.len().saturating_sub(1)))
                .copied()
                .unwrap_or(f64::NAN)
        };
        (at(50), at(25), at(75))
    }
}

/// From `Create` to the first stdout chunk of `echo ready` in the new
/// sandbox, which must come from the pool.
async fn create_to_echo(client: &Client) -> Duration {
    create_to_first_output(client, &["echo", "ready"])
        .await
        .first_output
}

fn row(a: &str, b: &str, c: &str, d: &str) -> String {
    format!("{a:<48} {b:>10} {c:>10} {d:>8}\n")
}

fn fmt_ms(d: Duration) -> String {
    format!("{:.1} ms", ms(d))
}
