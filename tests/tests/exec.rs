//! A booted VM runs commands: exit codes, signals, stream separation, clear
//! errors for programs that cannot start. One VM serves all these checks,
//! each a named test (`cargo test --test exec -- death_by_signal` runs one).

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::ExitCode;
use std::time::Duration;

use airlock::{Command, Event, ExitStatus, Sandbox};
use airlock_tests::sh;
use airlock_tests::shared_vm::{Order, Suite};

fn main() -> ExitCode {
    // In parallel: each check runs its own short commands and measures
    // nothing another check's commands could disturb.
    Suite::new(airlock_tests::boot, Order::Parallel)
        .checks(airlock_tests::checks![
            the_agent_reports_who_it_is,
            exit_code_and_separate_streams,
            death_by_signal,
            a_missing_program_is_a_prompt_clear_error,
            env_and_cwd_reach_the_program,
            output_right_before_exit_is_never_lost,
            commands_run_concurrently_over_one_connection,
            the_agent_says_where_an_execs_time_went,
        ])
        .run()
}

async fn the_agent_reports_who_it_is(sandbox: &Sandbox) {
    let health = sandbox.health().await.expect("health");
    assert_eq!(health.agent_version, env!("CARGO_PKG_VERSION"));
    assert!(health.serving_since_us >= health.init_started_us);
}

async fn exit_code_and_separate_streams(sandbox: &Sandbox) {
    let out = sandbox
        .exec(&sh("echo out; echo err >&2; exit 3"))
        .await
        .expect("start")
        .output()
        .await
        .expect("output");
    assert_eq!(out.status, ExitStatus::Code(3));
    assert_eq!(out.stdout, b"out\n");
    assert_eq!(out.stderr, b"err\n");
}

async fn death_by_signal(sandbox: &Sandbox) {
    let exit = sandbox
        .exec(&sh("kill -9 $$"))
        .await
        .expect("start")
        .wait()
        .await
        .expect("wait");
    assert_eq!(exit.status, ExitStatus::Signal(9));
    assert_eq!(exit.status.shell_code(), 137);
    assert!(!exit.timed_out);
}

async fn a_missing_program_is_a_prompt_clear_error(sandbox: &Sandbox) {
    let missing = tokio::time::timeout(
        Duration::from_secs(30),
        sandbox.exec(&Command::new("no-such-program-xyz")),
    )
    .await
    .expect("a missing program must not hang");
    let error = missing.expect_err("a missing program cannot start");
    assert_eq!(error.agent_code(), Some(airlock::Code::NotFound), "{error}");
    assert!(error.to_string().contains("no-such-program-xyz"), "{error}");
}

async fn env_and_cwd_reach_the_program(sandbox: &Sandbox) {
    let out = sandbox
        .exec(
            &sh("echo \"$GREETING from $(pwd)\"")
                .env("GREETING", "hi")
                .cwd("/tmp"),
        )
        .await
        .expect("start")
        .output()
        .await
        .expect("output");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi from /tmp\n");
}

/// Output written right before exit is never lost; events arrive in order.
async fn output_right_before_exit_is_never_lost(sandbox: &Sandbox) {
    for _ in 0..20 {
        let mut execution = sandbox.exec(&sh("echo last; exit 0")).await.expect("start");
        let mut events = Vec::new();
        while let Some(event) = execution.next_event().await.expect("event") {
            events.push(event);
        }
        assert_eq!(events.len(), 2, "{events:?}");
        assert_eq!(events[0], Event::Stdout("last\n".into()));
        assert!(
            matches!(events[1], Event::Exited(exit) if exit.status == ExitStatus::Code(0)),
            "{events:?}"
        );
    }
}

async fn commands_run_concurrently_over_one_connection(sandbox: &Sandbox) {
    let runs = (0..8).map(|i| {
        let command = sh(&format!("echo {i}; sleep 0.2; echo {i} >&2"));
        async move { sandbox.exec(&command).await?.output().await }
    });
    for (i, out) in futures::future::join_all(runs)
        .await
        .into_iter()
        .enumerate()
    {
        let out = out.expect("concurrent exec");
        assert_eq!(out.stdout, format!("{i}\n").as_bytes());
        assert_eq!(out.stderr, format!("{i}\n").as_bytes());
    }
}

async fn the_agent_says_where_an_execs_time_went(sandbox: &Sandbox) {
    let began = std::time::Instant::now();
    let exit = sandbox
        .exec(&sh("sleep 0.3; echo late"))
        .await
        .expect("start")
        .wait()
        .await
        .expect("exit");
    let host = began.elapsed();
    let stamps = exit.stamps.expect("the agent's stamps");
    // The program slept 300 ms before its output, then exited.
    let first = stamps.to_first_output.expect("it wrote output");
    assert!(first >= std::time::Duration::from_millis(300), "{stamps:?}");
    assert!(stamps.run >= first, "{stamps:?}");
    // The agent's parts fit in what the host saw.
    assert!(stamps.setup + stamps.run <= host, "{stamps:?} vs {host:?}");
    let silent = sandbox
        .exec(&sh("true"))
        .await
        .expect("start")
        .wait()
        .await
        .expect("exit");
    assert_eq!(silent.stamps.expect("stamps").to_first_output, None);
}
