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
//! Run with `scripts/bench`, or `cargo bench -p airlock-tests --bench api
//! [-- --json]`. `AIRLOCK_BENCH_STARTS` sets the takes per row divided by
//! four (default 5: 20 takes).

#![allow(clippy::expect_used, clippy::unwrap_used)]

#[allow(dead_code)]
mod common;

use std::time::{Duration, Instant};

use airlock::Sandbox;
use airlock_client::{api, Client, Endpoint};
use airlock_tests::{DaemonHome, TlsServer};
use serde_json::json;

use common::pool::pooled_starts;
use common::{ms, percentile};

/// The most the API may add to a start from the pool.
const TARGET_RATIO: f64 = 1.3;

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
    drop(server);

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
        });
        println!("{report}");
    }
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
