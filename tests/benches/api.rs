//! The API benchmark: a start from the warm pool to its first output, and
//! a command's round trip, through the server's API from other processes
//! (the Rust client, and each SDK driven as a peer), against the library's
//! own, in one run.
//!
//! Starts. The floor is `Sandboxes::start_pooled()` to the first stdout
//! chunk of `/bin/sh -c "echo ready"` (the default image, 512 MiB, 1 vCPU:
//! what `sandbox create` without options asks for; the command is what an
//! SDK's `commands.run("echo ready")` runs, so every row runs the same).
//! The API rows run `airlock serve --pool 1` (a process of its own) and
//! time, from another process, `Sandboxes.Create` through
//! `Processes.Start` of that command to its first stdout chunk: the Rust client (this process) on the server's Unix socket
//! and over TCP with TLS and a key on loopback, and the TypeScript SDK
//! (`sdk/typescript/bench/peer.mjs`, `Sandbox.create()` then
//! `commands.run("echo ready")`) on the socket (gRPC), over TLS with the
//! key (gRPC) and over TLS with gRPC-Web (`fetch`, HTTP/1.1: the browsers'
//! path), in turn, each take once the pool has refilled (a frozen QEMU).
//! Target: the Rust rows within 1.3x of the floor.
//!
//! Round trips. The floor is `Sandbox::exec` of `/bin/sh -c true` to its
//! exit on a library sandbox of the same configuration from a pool (this
//! process's; the server's sandbox comes from its pool too);
//! the API rows run the same command on a sandbox of the server's, start to
//! exit, with each client above (the SDK's `commands.run("true")` is that
//! command); the floor and the rows take turns, ten runs at a time.
//!
//! The SDK rows need the SDK built (`npm ci && npm run build` in
//! sdk/typescript; scripts/bench does it) and Node on PATH; without them
//! the table says so. Run with `scripts/bench`, or `cargo bench -p
//! airlock-tests --bench api [-- --json]`. `AIRLOCK_BENCH_STARTS` sets the
//! takes per start row divided by four (default 5: 20 takes).

#![allow(clippy::expect_used, clippy::unwrap_used)]

#[allow(dead_code)]
mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use airlock::{Command, Sandbox, Sandboxes};
use airlock_client::{api, Client, Endpoint};
use airlock_tests::{DaemonHome, TlsServer};
use serde_json::{json, Map, Value};

use common::pool::{pooled_starts_running, refilled};
use common::sdk::{PeerServer, SdkPeer};
use common::{ms, percentile};

/// The most the API may add to a start from the pool.
const TARGET_RATIO: f64 = 1.3;
/// Command round trips per row, and per round of a row.
const EXEC_RUNS: usize = 60;
const EXEC_ROUND: usize = 10;
/// The command every round trip runs (what an SDK's shell line runs).
const TRUE: [&str; 3] = ["/bin/sh", "-c", "true"];
/// The program every start waits for: `echo` as an SDK's shell line runs
/// it, so that every row runs the same command.
const SHELL_ECHO: [&str; 3] = ["/bin/sh", "-c", "echo ready"];

/// Who makes a row's calls.
enum Caller<'a> {
    Rust(&'a Client),
    Sdk(usize, &'static str),
}

/// A row of figures.
struct Row {
    name: String,
    key: String,
    times: Vec<Duration>,
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
    let floor = pooled_starts_running(
        takes,
        Duration::ZERO,
        Sandbox::builder().image(&image).memory_mib(512),
        &SHELL_ECHO,
    )
    .await;
    // The round trips' floor: a library sandbox of the same configuration,
    // from a pool of its own as the server's is (a pool member runs
    // commands faster than a fresh clone under TCG), measured in the same
    // rounds as the API's.
    let manager = Sandboxes::with_pool(2, Sandbox::builder().image(&image).memory_mib(512), 1)
        .expect("a pool");
    refilled(&manager).await;
    let library = manager.start_pooled().await.expect("a library sandbox");

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
    let socket = home.socket();
    let (mut peers, missing) = sdk_peers(&PeerServer {
        socket: &socket,
        host: &host,
        key: &key,
        ca: &server.ca,
    });

    let mut callers = vec![
        (
            "API, the server's Unix socket".to_owned(),
            "api_unix".to_owned(),
            Caller::Rust(&local),
        ),
        (
            "API, TCP + TLS + key on loopback".to_owned(),
            "api_tls".to_owned(),
            Caller::Rust(&remote),
        ),
    ];
    for (index, peer) in peers.iter().enumerate() {
        let slug = peer.name().to_lowercase().replace(' ', "_");
        for (conn, how) in [
            ("unix", "Unix socket, gRPC"),
            ("tls", "TLS + key, gRPC"),
            ("web", "TLS + key, gRPC-Web"),
        ] {
            callers.push((
                format!("{}, {how}", peer.name()),
                format!("{slug}_{conn}"),
                Caller::Sdk(index, conn),
            ));
        }
    }

    // Starts, one take per caller in turn, each from a refilled pool.
    let mut starts: Vec<Row> = callers
        .iter()
        .map(|(name, key, _)| row(name, key))
        .collect();
    for _ in 0..takes {
        for (index, (_, _, caller)) in callers.iter().enumerate() {
            wait_for_frozen_member(&home).await;
            let took = match caller {
                Caller::Rust(client) => create_to_echo(client).await,
                Caller::Sdk(peer, conn) => peers[*peer].create_echo(conn).await,
            };
            starts[index].times.push(took);
        }
    }

    // Round trips on one sandbox of the server's, in rounds per caller:
    // the key's, so that the key's callers see it as the owner's do.
    let sandbox = remote
        .sandboxes()
        .create(api::CreateSandboxRequest::default())
        .await
        .expect("a sandbox for the round trips")
        .into_inner()
        .sandbox_id;
    let mut trips: Vec<Row> = callers
        .iter()
        .map(|(name, key, _)| row(name, key))
        .collect();
    let mut exec_floor = Vec::with_capacity(EXEC_RUNS);
    for _ in 0..EXEC_RUNS / EXEC_ROUND {
        for _ in 0..EXEC_ROUND {
            exec_floor.push(library_round_trip(&library).await);
        }
        for (index, (_, _, caller)) in callers.iter().enumerate() {
            let times = match caller {
                Caller::Rust(client) => {
                    let mut times = Vec::with_capacity(EXEC_ROUND);
                    for _ in 0..EXEC_ROUND {
                        times.push(round_trip(client, &sandbox).await);
                    }
                    times
                }
                Caller::Sdk(peer, conn) => peers[*peer].exec(conn, &sandbox, EXEC_ROUND).await,
            };
            trips[index].times.extend(times);
        }
    }
    exec_floor.sort();
    drop(library);
    drop(manager);
    local
        .sandboxes()
        .kill(api::KillSandboxRequest {
            sandbox_id: sandbox,
        })
        .await
        .expect("kill");
    drop(peers.drain(..));
    drop(server);

    let mut floor_echo = floor.echoed.clone();
    floor_echo.sort();
    let mut text = format!(
        "\nstart from the pool to the first output of `sh -c 'echo ready'`, default image (512 MiB, 1 vCPU), {takes} takes each\n"
    );
    text.push_str(&table_row("measure", "median", "p95", "/ floor"));
    text.push_str(&table_row(
        "library: Sandboxes::start_pooled (the floor)",
        &fmt_ms(percentile(&floor_echo, 50)),
        &fmt_ms(percentile(&floor_echo, 95)),
        "1.00x",
    ));
    for start in &mut starts {
        text.push_str(&figures_row(start, &floor_echo));
    }
    let ratio = |times: &[Duration]| ms(percentile(times, 50)) / ms(percentile(&floor_echo, 50));
    let met = starts[..2].iter().all(|r| ratio(&r.times) <= TARGET_RATIO);
    text.push_str(&table_row(
        &format!("target: the API rows each within {TARGET_RATIO}x"),
        "",
        "",
        if met { "met" } else { "missed" },
    ));
    text.push_str(&format!(
        "\na command's round trip (`/bin/sh -c true`, start to exit), {EXEC_RUNS} runs each, one sandbox\n"
    ));
    text.push_str(&table_row("measure", "median", "p95", "/ floor"));
    text.push_str(&table_row(
        "library: Sandbox::exec (the floor)",
        &fmt_ms(percentile(&exec_floor, 50)),
        &fmt_ms(percentile(&exec_floor, 95)),
        "1.00x",
    ));
    for trip in &mut trips {
        text.push_str(&figures_row(trip, &exec_floor));
    }
    for note in &missing {
        text.push_str(&format!("{note}\n"));
    }
    eprint!("{text}");
    if json_out {
        let mut report = Map::new();
        report.insert("takes".into(), json!(takes));
        report.insert(
            "floor_median_ms".into(),
            json!(ms(percentile(&floor_echo, 50))),
        );
        report.insert(
            "floor_p95_ms".into(),
            json!(ms(percentile(&floor_echo, 95))),
        );
        for start in &starts {
            insert_figures(&mut report, &start.key, &start.times, &floor_echo);
        }
        report.insert(
            "exec_floor_median_ms".into(),
            json!(ms(percentile(&exec_floor, 50))),
        );
        report.insert(
            "exec_floor_p95_ms".into(),
            json!(ms(percentile(&exec_floor, 95))),
        );
        for trip in &trips {
            insert_figures(
                &mut report,
                &format!("exec_{}", trip.key),
                &trip.times,
                &exec_floor,
            );
        }
        println!("{}", Value::Object(report));
    }
}

fn row(name: &str, key: &str) -> Row {
    Row {
        name: name.to_owned(),
        key: key.to_owned(),
        times: Vec::new(),
    }
}

/// The SDK peers there are, and a note for each that is not.
fn sdk_peers(server: &PeerServer) -> (Vec<SdkPeer>, Vec<String>) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let typescript = root.join("sdk/typescript");
    let built = typescript.join("dist/esm/index.js").exists();
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success());
    if !(built && node) {
        return (
            Vec::new(),
            vec![
                "TypeScript SDK: not measured; it needs Node and the SDK built \
                  (`npm ci && npm run build` in sdk/typescript; scripts/bench does it)"
                    .to_owned(),
            ],
        );
    }
    let script = typescript.join("bench/peer.mjs");
    let peer = SdkPeer::start(
        "TypeScript SDK",
        "node",
        &[script.to_str().expect("a UTF-8 path")],
        server,
    );
    (vec![peer], Vec::new())
}

/// One round trip of `/bin/sh -c true` on a library sandbox: exec to exit.
async fn library_round_trip(sandbox: &Sandbox) -> Duration {
    let began = Instant::now();
    let execution = sandbox
        .exec(Command::new(TRUE[0]).args(TRUE[1..].iter().copied()))
        .await
        .expect("exec");
    let exit = execution.wait().await.expect("wait");
    assert!(exit.status.success(), "{exit:?}");
    began.elapsed()
}

/// One round trip of `/bin/sh -c true` through the API: start to exit.
async fn round_trip(client: &Client, sandbox: &str) -> Duration {
    let began = Instant::now();
    let mut stream = client
        .start(api::StartProcess {
            sandbox_id: sandbox.to_owned(),
            argv: TRUE.iter().map(|a| (*a).to_owned()).collect(),
            ..Default::default()
        })
        .await
        .expect("start");
    while let Some(event) = stream.next_event().await.expect("events") {
        if let api::process_event::Event::Exited(exit) = event {
            assert_eq!(exit.exit_code, 0, "{exit:?}");
            break;
        }
    }
    began.elapsed()
}

/// From `Create` to the first stdout chunk of `echo` in the new sandbox,
/// which is then killed.
async fn create_to_echo(client: &Client) -> Duration {
    let began = Instant::now();
    let info = client
        .sandboxes()
        .create(api::CreateSandboxRequest::default())
        .await
        .expect("create")
        .into_inner();
    assert_eq!(info.origin, "pool", "not from the pool: {info:?}");
    let mut stream = client
        .start(api::StartProcess {
            sandbox_id: info.sandbox_id.clone(),
            argv: SHELL_ECHO.iter().map(|a| (*a).to_owned()).collect(),
            ..Default::default()
        })
        .await
        .expect("start echo");
    let mut first = None;
    while let Some(event) = stream.next_event().await.expect("echo events") {
        match event {
            api::process_event::Event::Stdout(_) => {
                first.get_or_insert_with(Instant::now);
            }
            api::process_event::Event::Exited(_) => break,
            _ => {}
        }
    }
    let took = first.expect("echo printed") - began;
    client
        .sandboxes()
        .kill(api::KillSandboxRequest {
            sandbox_id: info.sandbox_id,
        })
        .await
        .expect("kill");
    took
}

/// Waits until the server's pool holds a frozen member (a QEMU of the
/// server's, stopped).
async fn wait_for_frozen_member(home: &DaemonHome) {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let frozen = airlock_tests::processes_mentioning(home.path())
            .into_iter()
            .any(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                comm.starts_with("qemu-system")
                    && stat
                        .rsplit_once(')')
                        .is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
            });
        if frozen {
            // Settled: the member's thaw check finds it answering.
            tokio::time::sleep(Duration::from_millis(200)).await;
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the pool did not refill; log:\n{}",
            home.daemon_log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A row's median, p95 and ratio to the floor's median (sorting it).
fn figures_row(row: &mut Row, floor: &[Duration]) -> String {
    row.times.sort();
    table_row(
        &row.name,
        &fmt_ms(percentile(&row.times, 50)),
        &fmt_ms(percentile(&row.times, 95)),
        &format!(
            "{:.2}x",
            ms(percentile(&row.times, 50)) / ms(percentile(floor, 50))
        ),
    )
}

fn insert_figures(
    report: &mut Map<String, Value>,
    key: &str,
    times: &[Duration],
    floor: &[Duration],
) {
    let mut sorted = times.to_vec();
    sorted.sort();
    let median = ms(percentile(&sorted, 50));
    report.insert(format!("{key}_median_ms"), json!(median));
    report.insert(format!("{key}_p95_ms"), json!(ms(percentile(&sorted, 95))));
    report.insert(
        format!("{key}_ratio"),
        json!(median / ms(percentile(floor, 50))),
    );
}

fn table_row(a: &str, b: &str, c: &str, d: &str) -> String {
    format!("{a:<48} {b:>10} {c:>10} {d:>8}\n")
}

fn fmt_ms(d: Duration) -> String {
    format!("{:.1} ms", ms(d))
}
