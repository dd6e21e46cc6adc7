//! The metrics benchmark: what counting costs a call. Two servers in this
//! process, alike but for what they count (one serves `--metrics` and keeps
//! the usage ledger, the other counts nothing and keeps no ledger), each
//! with one sandbox on the library's process backend (the static agent that
//! `scripts/setup` builds, run as a host process: no VM, so the server's
//! share of a round trip is as large as it can be). Rows: an exec round
//! trip, `Processes.Start` of `true` to its exit event on the server's Unix
//! socket, in rounds of 20 alternating between the servers so that the
//! machine's load falls on both alike, with a scrape of `/metrics` after
//! each round of the counting server; the medians and their ratio
//! (on / off). Target: within 1.05x.
//!
//! Run with `scripts/bench`, or `cargo bench -p airlock-tests --bench
//! metrics`. `AIRLOCK_BENCH_EXECS` sets the round trips per server
//! (default 400).

#![allow(clippy::expect_used, clippy::unwrap_used)]

#[allow(dead_code)]
mod common;

use std::time::{Duration, Instant};

use airlock::Sandbox;
use airlock_client::{api, Client};
use airlock_testkit::{create, create_sandbox, Options, TestServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use common::{ms, percentile};

/// The most counting may add to an exec round trip.
const TARGET_RATIO: f64 = 1.05;
/// Round trips per round, per server.
const ROUND: usize = 20;
/// Rounds first taken and thrown away.
const WARM: usize = 3;

/// `true` in `id`, from the start to its exit event.
async fn round_trip(client: &Client, id: &str) -> Duration {
    let begun = Instant::now();
    let mut stream = client
        .start(api::StartProcess {
            sandbox_id: id.to_owned(),
            argv: vec!["true".to_owned()],
            ..api::StartProcess::default()
        })
        .await
        .expect("start true");
    loop {
        match stream.next_event().await.expect("its events") {
            Some(api::process_event::Event::Exited(exit)) => {
                assert_eq!(exit.exit_code, 0);
                return begun.elapsed();
            }
            Some(_) => {}
            None => panic!("the stream ended without an exit"),
        }
    }
}

/// A scrape of `/metrics`, as Prometheus makes it.
async fn scrape(address: std::net::SocketAddr) -> usize {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    assert!(answer.starts_with(b"HTTP/1.0 200"));
    answer.len()
}

#[tokio::main]
async fn main() {
    let agent = common::musl_release_dir().join("airlock-agent");
    assert!(
        agent.is_file(),
        "{} is missing: run scripts/setup (it builds the static agent)",
        agent.display()
    );
    let execs: usize = std::env::var("AIRLOCK_BENCH_EXECS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(400);
    let rounds = execs.div_ceil(ROUND).max(1);
    let server = |metrics: bool| {
        let agent = agent.clone();
        let temp = tempfile::tempdir().unwrap();
        let (state, saved) = (temp.path().join("state"), temp.path().join("saved"));
        async move {
            let server = TestServer::start_with(
                Options {
                    metrics,
                    no_usage_ledger: !metrics,
                    dir: Some(temp.path().to_owned()),
                    ..Options::default()
                },
                move || {
                    Sandbox::builder()
                        .process_backend(agent.clone())
                        .state_dir_base(state.clone())
                        .saved_dir(saved.clone())
                },
            )
            .await;
            (server, temp)
        }
    };
    let (on, _on_dir) = server(true).await;
    let (off, _off_dir) = server(false).await;
    let (on_client, off_client) = (on.owner().await, off.owner().await);
    let on_id = create_sandbox(&on_client, create()).await;
    let off_id = create_sandbox(&off_client, create()).await;
    let metrics = on.metrics.expect("the counting server's listener");

    let (mut with, mut without) = (Vec::new(), Vec::new());
    let mut scraped = 0;
    for round in 0..rounds + WARM {
        // Alternate which server goes first, so neither always follows
        // the other's work.
        let order = if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for counting in order {
            let (client, id, times) = match counting {
                true => (&on_client, &on_id, &mut with),
                false => (&off_client, &off_id, &mut without),
            };
            for _ in 0..ROUND {
                let took = round_trip(client, id).await;
                if round >= WARM {
                    times.push(took);
                }
            }
            if counting {
                scraped = scrape(metrics).await;
            }
        }
    }
    with.sort();
    without.sort();
    let (on_median, off_median) = (percentile(&with, 50), percentile(&without, 50));
    let ratio = on_median.as_secs_f64() / off_median.as_secs_f64();
    println!(
        "metrics and usage ledger: exec round trip (`true` to its exit, process backend, {} each, rounds of {ROUND} alternating)",
        with.len()
    );
    println!(
        "  on  (metrics, ledger)  median {:>7.3} ms  p95 {:>7.3} ms  (a scrape of {scraped} bytes after each round)",
        ms(on_median),
        ms(percentile(&with, 95))
    );
    println!(
        "  off (neither)          median {:>7.3} ms  p95 {:>7.3} ms",
        ms(off_median),
        ms(percentile(&without, 95))
    );
    let verdict = if ratio <= TARGET_RATIO {
        "within"
    } else {
        "OVER"
    };
    println!("  on / off               {ratio:.3}x  ({verdict} the target of {TARGET_RATIO}x)");
    on.stop().await;
    off.stop().await;
}
