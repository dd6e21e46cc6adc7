//! Process.Start output delivery: completeness, size, background
//! descendants and concurrency.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use airlock_proto::v1::exited::Status as ExitStatus;
use airlock_proto::v1::process_event;
use common::{request, Agent};

/// `seq 1 n` as the program prints it.
fn seq(n: u32) -> Vec<u8> {
    (1..=n)
        .map(|i| format!("{i}\n"))
        .collect::<String>()
        .into_bytes()
}

#[tokio::test]
async fn last_line_before_exit_is_never_lost() {
    let agent = Agent::start().await;
    for i in 0..50 {
        let out = agent
            .run_argv(&["sh", "-c", "echo last; echo gone >&2; exit 0"])
            .await
            .unwrap();
        assert_eq!(out.stdout_text(), "last\n", "run {i}");
        assert_eq!(out.stderr_text(), "gone\n", "run {i}");
        assert_eq!(out.exit, ExitStatus::Code(0));
    }
}

#[tokio::test]
async fn large_output_arrives_byte_exact_on_both_streams() {
    let agent = Agent::start().await;
    let out = agent
        .run_argv(&["sh", "-c", "seq 1 1500000; seq 1 200000 >&2"])
        .await
        .unwrap();
    let want_out = seq(1_500_000);
    assert!(want_out.len() > 10_000_000);
    assert_eq!(out.stdout.len(), want_out.len());
    assert!(out.stdout == want_out, "stdout differs from seq output");
    assert!(out.stderr == seq(200_000), "stderr differs from seq output");
    assert_eq!(out.exit, ExitStatus::Code(0));
}

#[tokio::test]
async fn binary_output_arrives_unchanged() {
    let agent = Agent::start().await;
    let out = agent
        .run_argv(&["head", "-c", "10000000", "/dev/zero"])
        .await
        .unwrap();
    assert_eq!(out.stdout.len(), 10_000_000);
    assert!(out.stdout.iter().all(|b| *b == 0));
}

#[tokio::test]
async fn background_children_holding_the_pipes_do_not_hold_the_stream() {
    let agent = Agent::start().await;
    for script in [
        "sleep 30 & echo done",
        "(sleep 30 >/dev/null 2>&1 &); echo done",
        "sleep 30 2>&1 & echo done; exit 4",
    ] {
        let begun = Instant::now();
        let out = tokio::time::timeout(
            Duration::from_secs(25),
            agent.run_argv(&["sh", "-c", script]),
        )
        .await
        .unwrap_or_else(|_| panic!("{script:?} held the stream open"))
        .unwrap();
        assert_eq!(out.stdout_text(), "done\n", "{script}");
        assert!(
            begun.elapsed() < Duration::from_secs(10),
            "{script:?} took {:?}",
            begun.elapsed()
        );
    }
}

#[tokio::test]
async fn output_written_by_a_slow_exit_is_complete() {
    let agent = Agent::start().await;
    // Output in several bursts, the last right before exit.
    let out = agent
        .run_argv(&[
            "sh",
            "-c",
            "for i in 1 2 3; do echo $i; sleep 0.05; done; printf end",
        ])
        .await
        .unwrap();
    assert_eq!(out.stdout_text(), "1\n2\n3\nend");
}

#[tokio::test]
async fn concurrent_starts_each_get_their_own_output() {
    let agent = Agent::start().await;
    let runs = (0..20).map(|i| {
        let agent = &agent;
        async move {
            let mut req = request(&[
                "sh",
                "-c",
                "echo start-$1; sleep 0.2; seq 1 $((1000 * $1)); echo end-$1 >&2; exit $1",
                "sh",
            ]);
            req.argv.push(i.to_string());
            (i, agent.run(req).await.unwrap())
        }
    });
    let results = futures::future::join_all(runs).await;
    let mut pids = std::collections::HashSet::new();
    for (i, out) in results {
        let mut want = format!("start-{i}\n").into_bytes();
        want.extend(seq(1000 * i));
        assert!(out.stdout == want, "run {i} got someone else's stdout");
        assert_eq!(out.stderr_text(), format!("end-{i}\n"));
        assert_eq!(out.exit, ExitStatus::Code(i as i32));
        assert!(pids.insert(out.pid), "pid {} reported twice", out.pid);
    }
}

#[tokio::test]
async fn a_slow_client_gets_every_byte_while_the_agent_stays_small() {
    let agent = Agent::start().await;
    let copy = agent.dir().join("copy");
    let script = format!("head -c 33554432 /dev/urandom | tee {}", copy.display());
    let baseline = common::memory_kib(agent.pid(), "VmRSS");
    let mut stream = agent
        .process()
        .start(request(&["sh", "-c", &script]))
        .await
        .unwrap()
        .into_inner();
    let mut stdout = Vec::new();
    let mut peak_rss = 0;
    let mut exit = None;
    let mut reads = 0u32;
    while let Some(event) = stream.message().await.unwrap() {
        match event.event.unwrap() {
            process_event::Event::Stdout(b) => stdout.extend_from_slice(&b),
            process_event::Event::Exited(e) => exit = e.status,
            _ => {}
        }
        reads += 1;
        if reads.is_multiple_of(16) {
            peak_rss = peak_rss.max(common::memory_kib(agent.pid(), "VmRSS"));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(exit, Some(ExitStatus::Code(0)));
    let want = std::fs::read(&copy).unwrap();
    assert_eq!(stdout.len(), 33_554_432);
    assert!(stdout == want, "output differs from what the program wrote");
    // The agent holds a bounded window, not the 32 MiB it forwarded.
    assert!(
        peak_rss < baseline + 16 * 1024,
        "agent RSS grew from {baseline} KiB to {peak_rss} KiB"
    );
}

#[tokio::test]
async fn a_client_that_does_not_read_holds_the_program_back() {
    let agent = Agent::start().await;
    let done = agent.dir().join("done");
    let script = format!("head -c 20000000 /dev/zero; : > {}", done.display());
    let mut stream = agent
        .process()
        .start(request(&["sh", "-c", &script]))
        .await
        .unwrap()
        .into_inner();
    let pid = common::started_pid(&mut stream).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !done.exists(),
        "the program ran ahead of a client that read nothing"
    );
    assert!(common::proc_state(pid).is_some());
    let out = common::collect_after_started(stream).await;
    assert_eq!(out.stdout.len(), 20_000_000);
    assert!(done.exists());
    assert_eq!(out.dropped, 0);
}
