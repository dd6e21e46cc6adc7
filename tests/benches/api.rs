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
//! The TypeScript SDK takes its turns in the same rounds, driven as a peer
//! (`sdk/typescript/bench/peer.mjs`, `common::sdk`) on three connections:
//! the server's socket (gRPC over HTTP/2), TLS with the key (gRPC), and TLS
//! with the key over gRPC-Web (`fetch`, HTTP/1.1: the browsers' path). Its
//! start is `Sandbox.create()` to the first stdout chunk of
//! `commands.run("echo ready")` (E2B's vocabulary has only command lines,
//! so its start includes the guest's `/bin/sh`); its exec is
//! `commands.run("true")`, the very command of the other exec rows; and
//! `getInfo()`. The exec sandbox is the key's, so that every client may
//! use it (the owner sees every key's sandboxes), and the Rust client
//! takes its exec and `Get` turns on TLS too, the TypeScript SDK's TLS
//! rows' pair.
//!
//! Run with `scripts/bench`, or `cargo bench -p airlock-tests --bench api
//! [-- --json]`. `AIRLOCK_BENCH_STARTS` sets the takes per row divided by
//! four (default 5: 20 takes). The Python SDK's rows need
//! `AIRLOCK_BENCH_PYTHON`, the interpreter of a virtualenv with the SDK
//! (`scripts/bench` sets it from `scripts/sdk-python venv`); the
//! TypeScript SDK's need Node and the SDK built (`scripts/sdk-typescript
//! build`, which `scripts/bench` runs); without them they are left out,
//! and the output says so.

#![allow(clippy::expect_used, clippy::unwrap_used)]

#[allow(dead_code)]
mod common;

use std::path::PathBuf;
use std::time::Duration;

use airlock::Sandbox;
use airlock_client::{api, Client, Endpoint};
use airlock_tests::{DaemonHome, TlsServer};
use serde_json::json;

use common::clients;
use common::pool::{create_to_first_output, pooled_starts, wait_for_frozen_member};
use common::sdk::{PeerServer, SdkPeer};
use common::{ms, percentile};

/// The most the API may add to a start from the pool.
const TARGET_RATIO: f64 = 1.3;
/// The most the Python SDK may add to a call over the Rust client.
const SDK_TARGET_MS: f64 = 2.0;
/// Exec round trips per row (the CLI takes one round in five).
const EXECS: usize = 50;
/// Rounds first taken and thrown away.
const WARM: usize = 3;
/// The TypeScript SDK's connections: its name for each, the rows' key and
/// label, and the Rust client's row each is paired with (start, exec, Get).
const TS_CONNS: [TsConn; 3] = [
    TsConn {
        conn: "unix",
        key: "ts_unix",
        get_key: "get_ts_unix",
        how: "socket, gRPC",
        start_pair: "unix",
        exec_pair: "api",
        get_pair: "get_api",
    },
    TsConn {
        conn: "tls",
        key: "ts_tls",
        get_key: "get_ts_tls",
        how: "TLS + key, gRPC",
        start_pair: "tls",
        exec_pair: "api_tls",
        get_pair: "get_api_tls",
    },
    TsConn {
        conn: "web",
        key: "ts_web",
        get_key: "get_ts_web",
        how: "TLS + key, gRPC-Web",
        start_pair: "tls",
        exec_pair: "api_tls",
        get_pair: "get_api_tls",
    },
];

/// One of the TypeScript SDK's connections, as [`TS_CONNS`] names it.
struct TsConn {
    conn: &'static str,
    key: &'static str,
    get_key: &'static str,
    how: &'static str,
    start_pair: &'static str,
    exec_pair: &'static str,
    get_pair: &'static str,
}

/// One take of an exec round.
#[derive(Clone, Copy)]
enum Take {
    /// `Sandbox::exec` in the library's own sandbox (the floor).
    Library,
    /// The Rust client's exec, on TLS or the socket, under a row's key.
    Exec(bool, &'static str),
    /// The Rust client's `Sandboxes.Get`, likewise.
    Get(bool, &'static str),
    /// `airlock sandbox exec` (every fifth round).
    Cli,
    /// A call of the Python SDK's helper (`exec sync`, ...), under a key.
    Python(&'static str, &'static str),
    /// An exec (or with `true`, a `getInfo()`) of the TypeScript SDK.
    Ts(&'static TsConn, bool),
}

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
    let host = format!("https://localhost:{}", server.port);
    let remote = Endpoint::remote(&host, Some(key.clone()), Some(server.ca.clone()))
        .unwrap()
        .connect()
        .await
        .expect("the TLS listener");
    let mut sdk = std::env::var_os(clients::PYTHON_ENV)
        .map(|python| clients::SdkHelper::start(std::path::Path::new(&python), &home.socket()));
    let socket = home.socket();
    let (mut ts, ts_missing) = typescript_peer(&PeerServer {
        socket: &socket,
        host: &host,
        key: &key,
        ca: &server.ca,
    });

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
        if let Some(ts) = ts.as_mut() {
            for conn in &TS_CONNS {
                wait_for_frozen_member(&home).await;
                starts.push(conn.key, ts.create_echo(conn.conn).await);
            }
        }
        if round % 2 == 0 {
            wait_for_frozen_member(&home).await;
            starts.push("cli", clients::cli_create_to_echo(&home, &local).await);
        }
    }

    // Exec round trips in one running sandbox of the server's (the key's),
    // and the library's own in a sandbox of the same machine, in turn
    // likewise.
    let exec_id = remote
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
    let mut steps = vec![
        Take::Library,
        Take::Exec(false, "api"),
        Take::Exec(true, "api_tls"),
        Take::Get(false, "get_api"),
        Take::Get(true, "get_api_tls"),
        Take::Cli,
    ];
    if sdk.is_some() {
        steps.extend([
            Take::Python("exec sync", "sdk_sync"),
            Take::Python("exec async", "sdk_async"),
            Take::Python("get sync", "get_sdk_sync"),
            Take::Python("get async", "get_sdk_async"),
        ]);
    }
    if ts.is_some() {
        for conn in &TS_CONNS {
            steps.extend([Take::Ts(conn, false), Take::Ts(conn, true)]);
        }
    }
    // The steps of a round, started at a different one each round: an exec
    // that follows another in the same sandbox would otherwise always meet
    // the agent's work after that one.
    for round in 0..EXECS + WARM {
        for step in 0..steps.len() {
            let client = |tls: bool| if tls { &remote } else { &local };
            let (name, took) = match steps[(round + step) % steps.len()] {
                Take::Library => ("library", clients::library_exec(&library).await),
                Take::Exec(tls, name) => (name, clients::api_exec(client(tls), &exec_id).await),
                Take::Get(tls, name) => (name, clients::api_get(client(tls), &exec_id).await),
                Take::Cli if round % 5 != 0 => continue,
                Take::Cli => ("cli", clients::cli_exec(&home, &exec_id)),
                Take::Python(verb, name) => {
                    let Some(sdk) = sdk.as_mut() else { continue };
                    (name, sdk.call(&format!("{verb} {exec_id}")))
                }
                Take::Ts(conn, false) => {
                    let Some(ts) = ts.as_mut() else { continue };
                    (conn.key, ts.exec(conn.conn, &exec_id).await)
                }
                Take::Ts(conn, true) => {
                    let Some(ts) = ts.as_mut() else { continue };
                    (conn.get_key, ts.get(conn.conn, &exec_id).await)
                }
            };
            if round >= WARM {
                execs.push(name, took);
            }
        }
    }
    drop(library);
    drop(sdk);
    drop(ts);
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
    let ts_rows = |what: &str| -> Vec<(String, &'static str)> {
        TS_CONNS
            .iter()
            .map(|conn| (format!("TypeScript SDK, {what}, {}", conn.how), conn.key))
            .collect()
    };
    for (name, key) in [
        ("API, the server's Unix socket".to_owned(), "unix"),
        ("API, TCP + TLS + key on loopback".to_owned(), "tls"),
        (
            "Python SDK, Sandbox.create (blocking)".to_owned(),
            "sdk_sync",
        ),
        (
            "Python SDK, AsyncSandbox.create (asyncio)".to_owned(),
            "sdk_async",
        ),
    ]
    .into_iter()
    .chain(ts_rows("sh -c echo"))
    .chain([(
        "CLI: sandbox create + sandbox exec (to exit)".to_owned(),
        "cli",
    )]) {
        let times = starts.sorted(key);
        if times.is_empty() {
            continue;
        }
        text.push_str(&row(
            &name,
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
    if !starts.sorted("ts_unix").is_empty() {
        text.push_str(
            "(the TypeScript SDK's start is `commands.run(\"echo ready\")`: E2B's vocabulary has \
             command lines only, so its `echo` runs through /bin/sh)\n",
        );
    }
    let library_exec = execs.sorted("library");
    let exec_floor = percentile(&library_exec, 50);
    text.push_str(&format!(
        "\nexec round trip: `/bin/sh -c true` to its exit in one running sandbox, {EXECS} each (the CLI {})\n",
        EXECS / 5
    ));
    text.push_str(&row("measure", "median", "p95", "/ floor"));
    for (name, key) in [
        ("library: Sandbox::exec (the floor)".to_owned(), "library"),
        (
            "API, Rust client, the server's Unix socket".to_owned(),
            "api",
        ),
        ("API, Rust client, TCP + TLS + key".to_owned(), "api_tls"),
        ("Python SDK, commands.run (blocking)".to_owned(), "sdk_sync"),
        ("Python SDK, commands.run (asyncio)".to_owned(), "sdk_async"),
    ]
    .into_iter()
    .chain(ts_rows("run"))
    .chain([("CLI: airlock sandbox exec (a process)".to_owned(), "cli")])
    {
        let times = execs.sorted(key);
        if times.is_empty() {
            continue;
        }
        text.push_str(&row(
            &name,
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
        (
            "API, Rust client, the server's Unix socket".to_owned(),
            "get_api",
        ),
        (
            "API, Rust client, TCP + TLS + key".to_owned(),
            "get_api_tls",
        ),
        ("Python SDK, get_info (blocking)".to_owned(), "get_sdk_sync"),
        ("Python SDK, get_info (asyncio)".to_owned(), "get_sdk_async"),
    ]
    .into_iter()
    .chain(TS_CONNS.iter().map(|conn| {
        (
            format!("TypeScript SDK, getInfo, {}", conn.how),
            conn.get_key,
        )
    })) {
        let times = execs.sorted(key);
        if !times.is_empty() {
            text.push_str(&row(
                &name,
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
    let ts_added: Vec<(String, (f64, f64, f64))> = TS_CONNS
        .iter()
        .flat_map(|conn| {
            [
                (
                    format!("start, {}", conn.conn),
                    starts.paired(conn.key, conn.start_pair),
                ),
                (
                    format!("exec, {}", conn.conn),
                    execs.paired(conn.key, conn.exec_pair),
                ),
                (
                    format!("Get, {}", conn.conn),
                    execs.paired(conn.get_key, conn.get_pair),
                ),
            ]
        })
        .collect();
    if let Some(note) = &ts_missing {
        text.push_str(&format!("TypeScript SDK rows left out: {note}\n"));
    } else {
        text.push_str(
            "\nwhat the TypeScript SDK adds to a call over the Rust client on the same transport \
             (each round's difference; gRPC-Web against gRPC on TLS; its start includes /bin/sh)\n",
        );
        text.push_str(&row("call", "median", "quartiles", ""));
        for (name, (median, q1, q3)) in &ts_added {
            text.push_str(&row(
                name,
                &format!("{median:+.2} ms"),
                &format!("{q1:+.1}..{q3:+.1}"),
                "",
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
            "ts_added_ms": ts_added
                .iter()
                .map(|(name, (median, _, _))| (name.clone(), json!(median)))
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

/// The TypeScript SDK's peer, or why there is none.
fn typescript_peer(server: &PeerServer) -> (Option<SdkPeer>, Option<String>) {
    let typescript = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../sdk/typescript");
    let built = typescript.join("dist/esm/index.js").exists();
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success());
    if !(built && node) {
        return (
            None,
            Some(
                "it needs Node and the SDK built (scripts/sdk-typescript build; scripts/bench runs it)"
                    .to_owned(),
            ),
        );
    }
    let script = typescript.join("bench/peer.mjs");
    let peer = SdkPeer::start(
        "TypeScript SDK",
        "node",
        &[script.to_str().expect("a UTF-8 path")],
        server,
    );
    (Some(peer), None)
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
