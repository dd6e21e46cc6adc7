//! Many sandboxes and many sessions: the `Sandboxes` manager starts several
//! VMs at once and keeps to its maximum, and one sandbox's single
//! connection carries hundreds of concurrent calls.

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use airlock::{Command, Error, SandboxState, Sandboxes};

#[tokio::test]
async fn four_sandboxes_start_concurrently_and_the_fifth_is_refused() {
    let manager = Sandboxes::new(4);
    let starts = (0..4).map(|_| manager.start(airlock_tests::builder()));
    let sandboxes: Vec<_> = futures::future::join_all(starts)
        .await
        .into_iter()
        .map(|started| started.expect("sandbox starts"))
        .collect();

    let refused = manager.start(airlock_tests::builder()).await.unwrap_err();
    assert!(
        matches!(refused, Error::TooManySandboxes { max: 4 }),
        "{refused}"
    );

    // Each is its own VM: a file written in one is absent from the others.
    for (i, sandbox) in sandboxes.iter().enumerate() {
        sandbox
            .fs()
            .write("/tmp/mine", format!("{i}"))
            .await
            .expect("write");
    }
    for (i, sandbox) in sandboxes.iter().enumerate() {
        let out = sandbox
            .exec(Command::new("cat").arg("/tmp/mine"))
            .await
            .expect("cat")
            .output()
            .await
            .expect("output");
        assert_eq!(String::from_utf8_lossy(&out.stdout), i.to_string());
    }
    let listed = manager.list();
    assert_eq!(listed.len(), 4);
    assert!(listed
        .iter()
        .all(|info| info.state == SandboxState::Running));

    // Killing one frees its slot for a new one.
    let victim = sandboxes[0].id().to_owned();
    manager.kill(&victim).expect("kill");
    assert!(matches!(sandboxes[0].state(), SandboxState::Ended(_)));
    assert!(matches!(
        manager.get(&victim).unwrap_err(),
        Error::NoSuchSandbox { .. }
    ));
    let fifth = manager
        .start(airlock_tests::builder())
        .await
        .expect("a slot was freed");
    assert_eq!(manager.list().len(), 4);
    // A graceful stop while the caller still holds a handle: the handle
    // sees the end, and the VM is gone.
    manager
        .stop(fifth.id(), Duration::from_secs(5))
        .await
        .expect("stop");
    assert_eq!(
        fifth.state(),
        SandboxState::Ended(airlock::EndReason::Stopped)
    );
    assert!(airlock_tests::processes_mentioning(fifth.state_dir()).is_empty());
    assert_eq!(manager.list().len(), 3);
    drop(fifth);

    let dirs: Vec<_> = sandboxes.iter().map(|s| s.state_dir().to_owned()).collect();
    drop(sandboxes);
    drop(manager);
    for dir in dirs {
        assert!(!dir.exists(), "{} left behind", dir.display());
        assert!(airlock_tests::processes_mentioning(&dir).is_empty());
    }
}

#[tokio::test]
async fn two_hundred_concurrent_execs_share_one_connection() {
    let sandbox = airlock_tests::boot().await;
    let runs = (0..200).map(|i| {
        let sandbox = &sandbox;
        async move {
            let out = sandbox
                .exec(Command::new("echo").arg(format!("session-{i}")))
                .await
                .expect("start")
                .output()
                .await
                .expect("output");
            assert!(out.status.success(), "{i}: {out:?}");
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                format!("session-{i}\n")
            );
        }
    });
    futures::future::join_all(runs).await;
}
