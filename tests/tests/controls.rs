//! Lifecycle controls on a running sandbox: the lifetime ceiling, pause and
//! resume (with the guest clock pushed), idle parking, metering, and a VM
//! that powers itself off.

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::{Duration, Instant, SystemTime};

use airlock::{Command, EndReason, Error, IdlePolicy, PausedCalls, SandboxState};
use airlock_tests::{sh, stdout_of};

async fn start(builder: airlock::SandboxBuilder) -> airlock::Sandbox {
    builder.start().await.expect("sandbox did not start")
}

#[tokio::test]
async fn the_lifetime_ceiling_kills_a_busy_sandbox_and_says_so() {
    // Generous: the tests in this file boot their VMs at the same time.
    const CEILING: Duration = Duration::from_secs(30);
    let begin = Instant::now();
    let sandbox = start(airlock_tests::builder().max_lifetime(Some(CEILING))).await;
    assert!(
        begin.elapsed() < CEILING,
        "boot took {:?}, past the ceiling under test",
        begin.elapsed()
    );
    let mut sleeper = sandbox
        .exec(Command::new("sleep").arg("infinity"))
        .await
        .expect("sleep starts");
    let error = loop {
        match sleeper.next_event().await {
            Ok(Some(_)) => {}
            Ok(None) => panic!("sleep infinity ended by itself"),
            Err(error) => break error,
        }
    };
    let ended_after = begin.elapsed();
    assert!(
        ended_after <= CEILING + Duration::from_secs(2),
        "killed after {ended_after:?}, ceiling {CEILING:?}"
    );
    match &error {
        Error::VmGone {
            reason: EndReason::LifetimeExceeded { limit },
            ..
        } => assert_eq!(*limit, CEILING),
        other => panic!("unexpected error: {other}"),
    }
    assert!(error.to_string().contains("maximum lifetime"), "{error}");
    assert_eq!(
        sandbox.state(),
        SandboxState::Ended(EndReason::LifetimeExceeded { limit: CEILING })
    );
    let again = sandbox.exec(Command::new("true")).await.unwrap_err();
    assert!(
        matches!(again, Error::SandboxEnded { .. }),
        "a call after the end: {again}"
    );
    let state_dir = sandbox.state_dir().to_owned();
    assert!(airlock_tests::processes_mentioning(&state_dir).is_empty());
}

/// The guest's idea of "now", from the modification time of a file it
/// writes: nanosecond precision without relying on the guest's `date`.
async fn guest_now(sandbox: &airlock::Sandbox) -> SystemTime {
    let fs = sandbox.fs();
    fs.write("/tmp/now", "x").await.expect("write");
    fs.stat("/tmp/now").await.expect("stat").modified
}

fn skew(a: SystemTime, b: SystemTime) -> Duration {
    a.duration_since(b)
        .or_else(|_| b.duration_since(a))
        .unwrap_or_default()
}

#[tokio::test]
async fn pause_stops_the_guest_and_resume_sets_its_clock() {
    let sandbox = start(airlock_tests::builder().paused_calls(PausedCalls::Fail)).await;
    // Something for the guest to do, so a running guest uses CPU.
    sandbox
        .exec(sh("while :; do :; done").tag("spin"))
        .await
        .expect("spin starts");
    tokio::time::sleep(Duration::from_millis(500)).await;

    sandbox.pause().await.expect("pause");
    assert_eq!(sandbox.state(), SandboxState::Paused);
    let before = sandbox.usage();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = sandbox.usage();
    assert!(
        after.guest_cpu.saturating_sub(before.guest_cpu) <= Duration::from_millis(20),
        "guest CPU advanced while paused: {before:?} -> {after:?}"
    );
    assert!(after.wall - before.wall >= Duration::from_secs(3));
    assert!(
        after.running - before.running < Duration::from_millis(200),
        "running time advanced while paused: {before:?} -> {after:?}"
    );
    let refused = sandbox.exec(Command::new("true")).await.unwrap_err();
    assert!(matches!(refused, Error::Paused), "{refused}");

    sandbox.resume().await.expect("resume");
    assert_eq!(sandbox.state(), SandboxState::Running);
    assert_eq!(stdout_of(&sandbox, "echo back").await, "back\n");
    let host = SystemTime::now();
    let guest = guest_now(&sandbox).await;
    assert!(
        skew(guest, host) < Duration::from_secs(1),
        "guest clock {guest:?} vs host {host:?}"
    );
    let resumed = sandbox.usage();
    assert!(resumed.running <= resumed.wall, "{resumed:?}");
    assert!(
        resumed.guest_cpu > after.guest_cpu,
        "the spinning guest used no CPU after resume: {after:?} -> {resumed:?}"
    );
}

#[tokio::test]
async fn metering_counts_guest_cpu_under_load() {
    let sandbox = airlock_tests::boot().await;
    let start = sandbox.usage();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = sandbox.usage();
    // A fixed amount of work: its CPU time does not depend on how loaded
    // the host is.
    stdout_of(
        &sandbox,
        "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done",
    )
    .await;
    let busy = sandbox.usage();
    for usage in [start, idle, busy] {
        assert!(usage.running <= usage.wall, "{usage:?}");
        assert!(usage.guest_cpu <= usage.wall, "{usage:?}");
    }
    let idle_cpu = idle.guest_cpu - start.guest_cpu;
    let busy_cpu = busy.guest_cpu - idle.guest_cpu;
    assert!(
        busy_cpu >= Duration::from_millis(300) && busy_cpu > idle_cpu,
        "idle for 2 s: {idle_cpu:?}; busy loop: {busy_cpu:?}"
    );
}

#[tokio::test]
async fn an_idle_sandbox_is_parked_and_the_next_call_wakes_it() {
    let sandbox =
        start(airlock_tests::builder().idle_timeout(Duration::from_secs(2), IdlePolicy::Pause))
            .await;
    // A call in flight (an open output stream) keeps it awake.
    let sleeper = sandbox
        .exec(Command::new("sleep").arg("4"))
        .await
        .expect("sleep starts");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(sandbox.state(), SandboxState::Running);
    sleeper.wait().await.expect("sleep ends");

    let deadline = Instant::now() + Duration::from_secs(10);
    while sandbox.state() != SandboxState::Paused {
        assert!(Instant::now() < deadline, "not paused after going idle");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The default policy resumes on the next call.
    assert_eq!(stdout_of(&sandbox, "echo awake").await, "awake\n");
    assert_eq!(sandbox.state(), SandboxState::Running);
}

#[tokio::test]
async fn an_idle_sandbox_can_be_stopped_instead() {
    let sandbox =
        start(airlock_tests::builder().idle_timeout(Duration::from_secs(1), IdlePolicy::Stop))
            .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while sandbox.end_reason().is_none() {
        assert!(Instant::now() < deadline, "not stopped after going idle");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(matches!(sandbox.end_reason(), Some(EndReason::Idle { .. })));
    assert!(airlock_tests::processes_mentioning(sandbox.state_dir()).is_empty());
}

#[tokio::test]
async fn a_vm_that_powers_off_fails_every_open_call_with_the_reason() {
    let sandbox = airlock_tests::boot().await;
    let mut sleeper = sandbox
        .exec(Command::new("sleep").arg("1000"))
        .await
        .expect("sleep starts");
    // Only a privileged program can power the guest off.
    let poweroff = sandbox
        .exec(Command::new("poweroff").arg("-f").privileged(true))
        .await;
    let noticed = Instant::now();
    drop(poweroff);
    let error = loop {
        match sleeper.next_event().await {
            Ok(Some(_)) => {}
            Ok(None) => panic!("sleep ended normally"),
            Err(error) => break error,
        }
    };
    assert!(
        noticed.elapsed() < Duration::from_secs(5),
        "the end took {:?} to reach an open call",
        noticed.elapsed()
    );
    assert!(
        matches!(
            &error,
            Error::VmGone {
                reason: EndReason::VmExited { .. },
                ..
            }
        ),
        "{error}"
    );
    let later = sandbox.fs().stat("/").await.unwrap_err();
    assert!(matches!(later, Error::SandboxEnded { .. }), "{later}");
    assert!(airlock_tests::processes_mentioning(sandbox.state_dir()).is_empty());
}

#[tokio::test]
async fn streams_survive_repeated_pauses_without_losing_output() {
    let sandbox = airlock_tests::boot().await;
    let ticker = sandbox
        .exec(
            sh("i=0; while [ $i -lt 100000 ]; do i=$((i+1)); echo $i; sleep 0.02; done")
                .tag("ticker"),
        )
        .await
        .expect("ticker starts");
    let reader = tokio::spawn(async move { ticker.output().await });
    for cycle in 0..12 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        sandbox.pause().await.expect("pause");
        tokio::time::sleep(Duration::from_millis(150)).await;
        sandbox.resume().await.expect("resume");
        let out = tokio::time::timeout(
            Duration::from_secs(20),
            stdout_of(&sandbox, &format!("echo cycle-{cycle}")),
        )
        .await
        .unwrap_or_else(|_| panic!("exec after resume {cycle} hung"));
        assert_eq!(out, format!("cycle-{cycle}\n"));
    }
    sandbox
        .process("ticker")
        .signal(airlock::Signal::TERM)
        .await
        .expect("stop the ticker");
    let out = tokio::time::timeout(Duration::from_secs(20), reader)
        .await
        .expect("the ticker's stream ended")
        .expect("reader task")
        .expect("ticker output");
    let text = String::from_utf8_lossy(&out.stdout);
    let numbers: Vec<u64> = text.lines().map(|l| l.parse().expect(l)).collect();
    assert!(numbers.len() > 20, "too few ticks: {}", numbers.len());
    for (i, n) in numbers.iter().enumerate() {
        assert_eq!(*n, i as u64 + 1, "a gap or repeat in the ticker's output");
    }
}

/// A pause longer than the keepalive: the host drops the connection under
/// the open stream meanwhile, and the stream re-attaches from its offset
/// after the resume, with no gap.
#[tokio::test]
async fn a_stream_open_across_a_long_pause_loses_nothing() {
    use airlock_proto::contract::serial::{KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT};
    let sandbox = airlock_tests::boot().await;
    let ticker = sandbox
        .exec(
            sh("i=0; while [ $i -lt 100000 ]; do i=$((i+1)); echo $i; sleep 0.05; done")
                .tag("ticker"),
        )
        .await
        .expect("ticker starts");
    let reader = tokio::spawn(async move { ticker.output().await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    sandbox.pause().await.expect("pause");
    tokio::time::sleep(KEEPALIVE_INTERVAL + KEEPALIVE_TIMEOUT + Duration::from_secs(3)).await;
    sandbox.resume().await.expect("resume");
    tokio::time::sleep(Duration::from_secs(1)).await;
    sandbox
        .process("ticker")
        .signal(airlock::Signal::TERM)
        .await
        .expect("stop the ticker");
    let out = tokio::time::timeout(Duration::from_secs(30), reader)
        .await
        .expect("the ticker's stream ended")
        .expect("reader task")
        .expect("the ticker's output, across the pause");
    let text = String::from_utf8_lossy(&out.stdout);
    let numbers: Vec<u64> = text.lines().map(|l| l.parse().expect(l)).collect();
    assert!(numbers.len() > 10, "too few ticks: {}", numbers.len());
    for (i, n) in numbers.iter().enumerate() {
        assert_eq!(*n, i as u64 + 1, "a gap or repeat in the ticker's output");
    }
}

#[tokio::test]
async fn a_guest_flooding_its_console_does_not_fill_the_host_disk() {
    use std::os::unix::fs::MetadataExt;
    const BUDGET: u64 = 256 * 1024;
    let sandbox = start(airlock_tests::builder().console_log_budget(BUDGET)).await;
    // Root in the guest may write to the console; 3 MiB is twelve budgets.
    stdout_of(
        &sandbox,
        "yes flood | head -c 3145728 > /dev/console; echo the-end > /dev/console",
    )
    .await;
    let log = sandbox.state_dir().join("console.log");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let meta = std::fs::metadata(&log).expect("console.log");
        assert!(meta.len() >= 3 << 20, "the flood is not in the log");
        if meta.blocks() * 512 <= BUDGET {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "console.log still takes {} bytes of disk",
            meta.blocks() * 512
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        sandbox.console_tail(4096).contains("the-end"),
        "the newest console output is kept"
    );
    assert_eq!(stdout_of(&sandbox, "echo alive").await, "alive\n");
}

#[tokio::test]
async fn a_hung_guest_is_killed_and_its_open_calls_fail() {
    const AFTER: Duration = Duration::from_secs(4);
    let sandbox = start(airlock_tests::builder().unresponsive_after(Some(AFTER))).await;
    let mut sleeper = sandbox
        .exec(Command::new("sleep").arg("1000"))
        .await
        .expect("sleep starts");
    // Freeze QEMU behind the library's back: to the host, a hung guest.
    let qemu = airlock_tests::processes_mentioning(sandbox.state_dir())
        .into_iter()
        .find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.starts_with("qemu-system"))
        })
        .expect("the QEMU process");
    let frozen = std::process::Command::new("kill")
        .args(["-STOP", &qemu.to_string()])
        .status()
        .expect("kill -STOP");
    assert!(frozen.success());
    let hung = Instant::now();
    let error = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match sleeper.next_event().await {
                Ok(Some(_)) => {}
                Ok(None) => panic!("sleep ended normally"),
                Err(error) => break error,
            }
        }
    })
    .await
    .expect("the open call still waits on a hung guest");
    // Counted from the last answer, which came up to one probe interval
    // (AFTER / 4, at least 1 s) before the freeze.
    assert!(
        hung.elapsed() >= AFTER - Duration::from_secs(1),
        "ended after {:?}, well before the limit",
        hung.elapsed()
    );
    assert!(
        matches!(
            &error,
            Error::VmGone {
                reason: EndReason::Unresponsive { after },
                ..
            } if *after == AFTER
        ),
        "{error}"
    );
    assert!(airlock_tests::processes_mentioning(sandbox.state_dir()).is_empty());
}
