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
//! The same server then serves the other clients' rows: the `airlock` CLI
//! (`sandbox create` then `sandbox exec -- echo ready`, processes of their
//! own) and the Python SDK (`Sandbox.create()` and `AsyncSandbox.create()`
//! to the first stdout chunk of `echo ready`, in a helper process that keeps
//! its connection, `common::clients`); and an exec round trip, `/bin/sh -c
//! true` to its exit in one running sandbox, through the library (the
//! floor), the Rust client, the SDK's `commands.run("true")` (blocking and
//! asyncio) and the CLI. Target for the SDK: at most 2 ms over the Rust
//! client per call, for both.
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

use std::time::{Duration, Instant};

use airlock::Sandbox;
use airlock_client::{api, Client, Endpoint};
use airlock_tests::{DaemonHome, TlsServer};
use serde_json::json;

use common::clients::{self, SdkTimes};
use common::pool::pooled_starts;
use common::{ms, percentile};

/// The most the API may add to a start from the pool.
const TARGET_RATIO: f64 = 1.3;
/// The most the Python SDK may add to a call over the Rust client.
const SDK_TARGET_MS: f64 = 2.0;
/// Exec round trips per row.
const EXECS: usize = 50;
/// CLI execs (a process each).
const CLI_EXECS: usize = 20;

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
    let (mut unix, mut tls) = (Vec::new(), Vec::new());
    for take in 0..takes * 2 {
        wait_for_frozen_member(&home).await;
        let client = if take % 2 == 0 { &local } else { &remote };
        let took = create_to_echo(client).await;
        if take % 2 == 0 {
            unix.push(took);
        } else {
            tls.push(took);
        }
    }
    unix.sort();
    tls.sort();

    // The other clients, on the same server.
    let exec_id = local
        .sandboxes()
        .create(api::CreateSandboxRequest::default())
        .await
        .expect("create the exec sandbox")
        .into_inner()
        .sandbox_id;
    let mut api_exec = Vec::with_capacity(EXECS);
    for n in 0..EXECS + 3 {
        let took = clients::api_exec(&local, &exec_id).await;
        if n >= 3 {
            api_exec.push(took);
        }
    }
    let mut cli_exec: Vec<Duration> = (0..CLI_EXECS)
        .map(|_| clients::cli_exec(&home, &exec_id))
        .collect();
    let sdk = std::env::var_os(clients::PYTHON_ENV).map(|python| {
        clients::python_sdk(
            std::path::Path::new(&python),
            &home,
            &exec_id,
            takes / 2,
            EXECS,
        )
    });
    let mut cli_create = Vec::with_capacity(takes / 2);
    for _ in 0..takes / 2 {
        wait_for_frozen_member(&home).await;
        cli_create.push(clients::cli_create_to_echo(&home, &local).await);
    }
    drop(server);
    let library = Sandbox::builder()
        .image(&image)
        .memory_mib(512)
        .start()
        .await
        .expect("a library sandbox for the exec floor");
    let mut library_exec = Vec::with_capacity(EXECS);
    for n in 0..EXECS + 3 {
        let took = clients::library_exec(&library).await;
        if n >= 3 {
            library_exec.push(took);
        }
    }
    drop(library);
    for times in [
        &mut api_exec,
        &mut cli_exec,
        &mut cli_create,
        &mut library_exec,
    ] {
        times.sort();
    }
    let sdk = sdk.map(|mut sdk| {
        for times in [
            &mut sdk.create_sync,
            &mut sdk.create_async,
            &mut sdk.exec_sync,
            &mut sdk.exec_async,
        ] {
            times.sort();
        }
        sdk
    });

    let floor_median = percentile(&floor.echoed, 50);
    let ratio = |times: &[Duration]| ms(percentile(times, 50)) / ms(floor_median);
    let mut text = format!(
        "\nstart from the pool to the first `echo` output, default image (512 MiB, 1 vCPU), {takes} takes each\n"
    );
    text.push_str(&row("measure", "median", "p95", "/ floor"));
    text.push_str(&row(
        "library: Sandboxes::start_pooled (the floor)",
        &fmt_ms(floor_median),
        &fmt_ms(percentile(&floor.echoed, 95)),
        "1.00x",
    ));
    for (name, times) in [
        ("API, the server's Unix socket", &unix),
        ("API, TCP + TLS + key on loopback", &tls),
    ] {
        text.push_str(&row(
            name,
            &fmt_ms(percentile(times, 50)),
            &fmt_ms(percentile(times, 95)),
            &format!("{:.2}x", ratio(times)),
        ));
    }
    let met = ratio(&unix) <= TARGET_RATIO && ratio(&tls) <= TARGET_RATIO;
    text.push_str(&row(
        &format!("target: each within {TARGET_RATIO}x"),
        "",
        "",
        if met { "met" } else { "missed" },
    ));
    if let Some(sdk) = &sdk {
        for (name, times) in [
            ("Python SDK, Sandbox.create (blocking)", &sdk.create_sync),
            (
                "Python SDK, AsyncSandbox.create (asyncio)",
                &sdk.create_async,
            ),
        ] {
            text.push_str(&row(
                name,
                &fmt_ms(percentile(times, 50)),
                &fmt_ms(percentile(times, 95)),
                &format!("{:.2}x", ratio(times)),
            ));
        }
    }
    text.push_str(&row(
        "CLI: sandbox create + sandbox exec (to exit)",
        &fmt_ms(percentile(&cli_create, 50)),
        &fmt_ms(percentile(&cli_create, 95)),
        &format!("{:.2}x", ratio(&cli_create)),
    ));
    let exec_floor = percentile(&library_exec, 50);
    text.push_str(&format!(
        "\nexec round trip: `/bin/sh -c true` to its exit in one running sandbox, {EXECS} each ({CLI_EXECS} for the CLI)\n"
    ));
    text.push_str(&row("measure", "median", "p95", "/ floor"));
    let mut exec_rows: Vec<(&str, &Vec<Duration>)> = vec![
        ("library: Sandbox::exec (the floor)", &library_exec),
        ("API, Rust client, the server's Unix socket", &api_exec),
    ];
    if let Some(sdk) = &sdk {
        exec_rows.push(("Python SDK, commands.run (blocking)", &sdk.exec_sync));
        exec_rows.push(("Python SDK, commands.run (asyncio)", &sdk.exec_async));
    }
    exec_rows.push(("CLI: airlock sandbox exec (a process)", &cli_exec));
    for (name, times) in exec_rows {
        text.push_str(&row(
            name,
            &fmt_ms(percentile(times, 50)),
            &fmt_ms(percentile(times, 95)),
            &format!("{:.2}x", ms(percentile(times, 50)) / ms(exec_floor)),
        ));
    }
    let sdk_over = sdk.as_ref().map(|sdk| sdk_overhead(sdk, &unix, &api_exec));
    match &sdk_over {
        Some(over) => text.push_str(&format!(
            "Python SDK over the Rust client (medians): create {:+.1} / {:+.1} ms, exec {:+.1} / {:+.1} ms (blocking / asyncio); target: at most {SDK_TARGET_MS} ms: {}\n",
            over[0],
            over[1],
            over[2],
            over[3],
            if over.iter().all(|&o| o <= SDK_TARGET_MS) { "met" } else { "missed" }
        )),
        None => text.push_str(&format!(
            "Python SDK rows left out: set {} to the python of a venv with the SDK (scripts/bench does)\n",
            clients::PYTHON_ENV
        )),
    }
    eprint!("{text}");
    if json_out {
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
            "cli_create_median_ms": ms(percentile(&cli_create, 50)),
            "exec_library_median_ms": ms(percentile(&library_exec, 50)),
            "exec_api_median_ms": ms(percentile(&api_exec, 50)),
            "exec_cli_median_ms": ms(percentile(&cli_exec, 50)),
            "sdk": sdk.as_ref().map(|sdk| json!({
                "create_sync_median_ms": ms(percentile(&sdk.create_sync, 50)),
                "create_async_median_ms": ms(percentile(&sdk.create_async, 50)),
                "exec_sync_median_ms": ms(percentile(&sdk.exec_sync, 50)),
                "exec_async_median_ms": ms(percentile(&sdk.exec_async, 50)),
                "over_api_ms": sdk_over,
            })),
        });
        println!("{report}");
    }
}

/// What the SDK adds over the Rust client, in ms of the medians: create
/// (blocking, asyncio), then exec (blocking, asyncio).
fn sdk_overhead(sdk: &SdkTimes, api_create: &[Duration], api_exec: &[Duration]) -> [f64; 4] {
    let over =
        |sdk: &[Duration], api: &[Duration]| ms(percentile(sdk, 50)) - ms(percentile(api, 50));
    [
        over(&sdk.create_sync, api_create),
        over(&sdk.create_async, api_create),
        over(&sdk.exec_sync, api_exec),
        over(&sdk.exec_async, api_exec),
    ]
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
            argv: vec!["echo".into(), "ready".into()],
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

fn row(a: &str, b: &str, c: &str, d: &str) -> String {
    format!("{a:<48} {b:>10} {c:>10} {d:>8}\n")
}

fn fmt_ms(d: Duration) -> String {
    format!("{:.1} ms", ms(d))
}
