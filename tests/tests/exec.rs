//! A booted VM runs commands: exit codes, signals, stream separation, clear
//! errors for programs that cannot start. One VM serves all these checks.

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use airlock::{Command, Event, ExitStatus};
use airlock_tests::sh;

#[tokio::test]
async fn commands_in_one_vm() {
    let sandbox = airlock_tests::boot().await;

    // The agent reports who it is.
    let health = sandbox.health().await.expect("health");
    assert_eq!(health.agent_version, env!("CARGO_PKG_VERSION"));
    assert!(health.serving_since_us >= health.init_started_us);

    // Exit codes and stream separation.
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

    // Death by signal.
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

    // A program that does not exist: a clear error, promptly, not a hang.
    let missing = tokio::time::timeout(
        Duration::from_secs(30),
        sandbox.exec(&Command::new("no-such-program-xyz")),
    )
    .await
    .expect("a missing program must not hang");
    let error = missing.expect_err("a missing program cannot start");
    assert_eq!(error.agent_code(), Some(airlock::Code::NotFound), "{error}");
    assert!(error.to_string().contains("no-such-program-xyz"), "{error}");

    // Environment and working directory reach the program.
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

    // Output written right before exit is never lost; events arrive in order.
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

    // Commands run concurrently over the one connection.
    let runs = (0..8).map(|i| {
        let command = sh(&format!("echo {i}; sleep 0.2; echo {i} >&2"));
        let sandbox = &sandbox;
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

    sandbox
        .shutdown(Duration::from_secs(10))
        .await
        .expect("shutdown");
}
