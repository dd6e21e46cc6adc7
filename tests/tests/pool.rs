//! The `Sandboxes` manager's warm pool: a start from the pool hands out a
//! frozen clone and the pool refills; pooled sandboxes are distinct
//! machines; a member that died frozen is never handed out; a pooled
//! sandbox's lifetime counts from its handout; the pool stays within the
//! manager's maximum and gives way to starts; dropping the manager kills
//! the pool; a member's warm-up leaves nothing a user could see, and one
//! that fails or leaves a file is reported and never handed out.
//!
//! Each test keeps its sandboxes' state directories under a directory of
//! its own, so it can count their QEMU processes. Templates live in the
//! default template directory, shared with later runs.

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use airlock::{
    EndReason, Error, Origin, PoolConfig, PoolStatus, Sandbox, SandboxBuilder, SandboxState,
    Sandboxes, WarmUp,
};
use airlock_tests::stdout_of;

/// How long a pool may take to fill: the first fill of a configuration
/// builds its template.
const FILL_TIMEOUT: Duration = Duration::from_secs(180);

/// A test configuration cloned from its template, with its state
/// directories under `base`.
fn pooled(base: &Path) -> SandboxBuilder {
    airlock_tests::builder()
        .from_template(true)
        .state_dir_base(base)
}

/// Waits until the pool holds `ready` frozen members and no fill.
async fn filled(manager: &Sandboxes, ready: usize) -> PoolStatus {
    let deadline = Instant::now() + FILL_TIMEOUT;
    loop {
        let status = manager.pool_status();
        if status.ready.len() == ready && status.filling == 0 {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "the pool did not fill to {ready} within {FILL_TIMEOUT:?}: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Live QEMU processes of the sandboxes under `base`.
fn vms_under(base: &Path) -> usize {
    airlock_tests::processes_mentioning(base).len()
}

#[tokio::test]
async fn a_start_from_the_pool_takes_a_frozen_clone_and_the_pool_refills() {
    let base = tempfile::tempdir().unwrap();
    let manager = Sandboxes::with_pool(4, pooled(base.path()), 2).unwrap();
    let before = filled(&manager, 2).await;
    assert!(
        before
            .ready
            .iter()
            .all(|member| member.state == SandboxState::Paused),
        "{before:?}"
    );
    assert!(manager.list().is_empty(), "members are not listed");

    let sandbox = manager.start_pooled().await.expect("start from the pool");
    assert_eq!(
        sandbox.id(),
        before.ready[0].id,
        "the oldest member goes first"
    );
    assert_eq!(sandbox.state(), SandboxState::Running);
    assert!(
        matches!(sandbox.origin(), Origin::Clone { .. }),
        "{:?}",
        sandbox.origin()
    );
    assert_eq!(stdout_of(&sandbox, "echo pooled").await, "pooled\n");
    assert_eq!(manager.list().len(), 1);
    assert_eq!(manager.get(sandbox.id()).unwrap().id(), sandbox.id());

    // The pool refills to its size with a new member.
    let after = filled(&manager, 2).await;
    assert_eq!(after.ready[0].id, before.ready[1].id);
    assert!(
        after.ready.iter().all(|member| member.id != sandbox.id()),
        "{after:?}"
    );
    assert_eq!(vms_under(base.path()), 3);
}

#[tokio::test]
async fn two_pooled_sandboxes_are_distinct_machines() {
    let base = tempfile::tempdir().unwrap();
    let manager = Sandboxes::with_pool(4, pooled(base.path()), 2).unwrap();
    filled(&manager, 2).await;
    let one = manager.start_pooled().await.expect("first");
    let two = manager.start_pooled().await.expect("second");
    assert_ne!(one.id(), two.id());

    let (host_one, host_two) = (
        stdout_of(&one, "hostname").await,
        stdout_of(&two, "hostname").await,
    );
    assert_ne!(host_one, host_two);
    stdout_of(&one, "echo mine > /tmp/only-here").await;
    let elsewhere = stdout_of(&two, "cat /tmp/only-here 2>/dev/null || echo absent").await;
    assert_eq!(elsewhere, "absent\n");
    assert_eq!(stdout_of(&one, "cat /tmp/only-here").await, "mine\n");
}

#[tokio::test]
async fn a_member_that_died_frozen_is_never_handed_out() {
    let base = tempfile::tempdir().unwrap();
    let manager = Sandboxes::with_pool(4, pooled(base.path()), 1).unwrap();
    let dead = filled(&manager, 1).await.ready[0].id.clone();
    let pids = airlock_tests::processes_mentioning(&base.path().join(&dead));
    assert!(!pids.is_empty(), "no QEMU for {dead}");
    for pid in pids {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap());
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
    }

    let sandbox = manager.start_pooled().await.expect("start from the pool");
    assert_ne!(sandbox.id(), dead);
    assert_eq!(stdout_of(&sandbox, "echo alive").await, "alive\n");
    let status = filled(&manager, 1).await;
    assert!(status.ready.iter().all(|member| member.id != dead));
}

#[tokio::test]
async fn a_pooled_sandbox_lives_its_lifetime_from_its_handout() {
    let base = tempfile::tempdir().unwrap();
    let lifetime = Duration::from_secs(8);
    let builder = pooled(base.path()).max_lifetime(Some(lifetime));
    let manager = Sandboxes::with_pool(2, builder, 1).unwrap();
    filled(&manager, 1).await;
    // Long enough in the pool that a ceiling counted from the start would
    // end it well before the checks below.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let status = manager.pool_status();
    let waited = status.ready[0].usage.wall;
    assert!(waited >= Duration::from_secs(4), "{status:?}");

    let sandbox = manager.start_pooled().await.expect("start from the pool");
    assert!(
        sandbox.usage().wall < Duration::from_secs(2),
        "wall time counts from the handout: {:?}",
        sandbox.usage()
    );
    tokio::time::sleep(lifetime - Duration::from_secs(2)).await;
    assert_eq!(
        sandbox.state(),
        SandboxState::Running,
        "ended before its lifetime from the handout"
    );
    assert_eq!(stdout_of(&sandbox, "echo still").await, "still\n");
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        sandbox.end_reason(),
        Some(EndReason::LifetimeExceeded { limit: lifetime })
    );
}

#[tokio::test]
async fn the_pool_stays_within_the_maximum_and_gives_way_to_starts() {
    let base = tempfile::tempdir().unwrap();
    let manager = Sandboxes::with_pool(2, pooled(base.path()), 2).unwrap();

    // Count the QEMU processes all along.
    let peak = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, done, base) = (Arc::clone(&peak), Arc::clone(&done), base.path().to_owned());
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                peak.fetch_max(vms_under(&base), Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };

    filled(&manager, 2).await;
    let first = manager.start_pooled().await.expect("first");
    // One slot left for the pool.
    filled(&manager, 1).await;
    let second = manager.start_pooled().await.expect("second");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(manager.pool_status().ready.len(), 0, "no slot to refill in");

    // Every slot holds a sandbox handed out: a start is refused.
    let refused = manager.start_pooled().await.unwrap_err();
    assert!(
        matches!(refused, Error::TooManySandboxes { max: 2 }),
        "{refused}"
    );
    let refused = manager.start(pooled(base.path())).await.unwrap_err();
    assert!(
        matches!(refused, Error::TooManySandboxes { max: 2 }),
        "{refused}"
    );

    // A freed slot goes back to the pool ...
    manager.kill(first.id()).unwrap();
    let member = filled(&manager, 1).await.ready[0].id.clone();
    // ... which gives it up for a start rather than fail.
    let third = manager
        .start(pooled(base.path()))
        .await
        .expect("a pool member makes room");
    assert_ne!(third.id(), member);
    assert!(manager.list().iter().all(|info| info.id != member));
    assert_eq!(stdout_of(&third, "echo room").await, "room\n");
    assert_eq!(stdout_of(&second, "echo kept").await, "kept\n");

    done.store(true, Ordering::SeqCst);
    sampler.join().unwrap();
    let peak = peak.load(Ordering::SeqCst);
    assert!(peak <= 2, "{peak} VMs ran at once in a manager of 2");
    assert!(peak >= 2, "the sampler saw {peak} VMs");
}

#[tokio::test]
async fn dropping_the_manager_kills_the_pool() {
    let base = tempfile::tempdir().unwrap();
    let manager = Sandboxes::with_pool(4, pooled(base.path()), 2).unwrap();
    filled(&manager, 2).await;
    assert_eq!(vms_under(base.path()), 2);

    drop(manager);
    assert_eq!(vms_under(base.path()), 0, "pool VMs outlived the manager");
    // And no refill starts another.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(vms_under(base.path()), 0);
    let left = std::fs::read_dir(base.path()).unwrap().count();
    assert_eq!(left, 0, "state directories left behind");
}

/// Waits until the pool reports a failed fill; returns its status.
async fn failed(manager: &Sandboxes) -> PoolStatus {
    let deadline = Instant::now() + FILL_TIMEOUT;
    loop {
        let status = manager.pool_status();
        if status.last_error.is_some() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "no fill failed within {FILL_TIMEOUT:?}: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What a user looking around a fresh sandbox sees: the files in the
/// places people look, the variables a program gets, whether anything of
/// the warm-up runs, and the programs the agent lists.
async fn first_look(sandbox: &Sandbox) -> (String, String, String, usize) {
    // Before anything else runs in it: the agent lists nothing yet.
    let listed = sandbox.list().await.expect("list").len();
    let files = stdout_of(
        sandbox,
        "ls -A /root /tmp /home /var/tmp; cat /root/.bash_history 2>&1 || true",
    )
    .await;
    let env = stdout_of(sandbox, "env | sort").await;
    // A process whose whole command line is the warm-up's background one.
    let leftovers = stdout_of(
        sandbox,
        "for p in /proc/[0-9]*; do \
           [ \"$(tr '\\0' ' ' < $p/cmdline 2>/dev/null)\" = 'sleep 6767 ' ] && echo $p; \
         done; true",
    )
    .await;
    (files, env, leftovers, listed)
}

#[tokio::test]
async fn a_warmed_pool_member_shows_nothing_of_its_warm_up() {
    let base = tempfile::tempdir().unwrap();
    let builder = pooled(base.path()).image(airlock_tests::default_image());
    // Everything a careless warm-up leaves: files in its HOME and TMPDIR,
    // shell history, a variable, a program still running.
    let warm_up = WarmUp::standard().shell(
        "echo history > \"$HOME/.bash_history\"; echo x > \"$TMPDIR/left\"; \
         mkdir -p \"$HOME/.cache/warm\"; export WARM_LEAK=1; \
         sleep 6767 >/dev/null 2>&1 & python3 -c 'import json, os'",
    );
    let manager = Sandboxes::new(4);
    manager
        .configure_pool(PoolConfig::new(builder.clone(), 2).warm_up(warm_up))
        .unwrap();
    let plain = builder
        .start()
        .await
        .expect("a sandbox started without the pool");
    filled(&manager, 2).await;
    let one = manager.start_pooled().await.expect("first from the pool");
    let two = manager.start_pooled().await.expect("second from the pool");

    let (files, env, leftovers, listed) = first_look(&plain).await;
    assert_eq!((leftovers.as_str(), listed), ("", 0), "a plain sandbox");
    for pooled in [&one, &two] {
        let (pooled_files, pooled_env, pooled_leftovers, pooled_listed) = first_look(pooled).await;
        assert_eq!(pooled_listed, 0, "the agent lists the warm-up's programs");
        assert_eq!(pooled_leftovers, "", "the warm-up's program still runs");
        assert_eq!(pooled_files, files, "files differ from a plain sandbox's");
        assert!(!pooled_files.contains("left"), "{pooled_files}");
        assert_eq!(
            pooled_env, env,
            "the environment differs from a plain sandbox's"
        );
        assert!(!pooled_env.contains("WARM_LEAK"), "{pooled_env}");
    }

    // Each its own machine: its hostname is its id, its entropy its own.
    assert_eq!(stdout_of(&one, "hostname").await.trim(), one.id());
    assert_eq!(stdout_of(&two, "hostname").await.trim(), two.id());
    let random = "head -c 32 /dev/urandom | od -An -tx1; cat /proc/sys/kernel/random/uuid";
    let (random_one, random_two) = (stdout_of(&one, random).await, stdout_of(&two, random).await);
    assert_ne!(
        random_one, random_two,
        "two pooled sandboxes drew the same bytes"
    );
}

#[tokio::test]
async fn a_failing_warm_up_is_reported_and_its_member_never_handed_out() {
    let base = tempfile::tempdir().unwrap();
    let warm_up = WarmUp::none().shell("echo not-ready >&2; exit 3");
    let manager = Sandboxes::new(2);
    manager
        .configure_pool(PoolConfig::new(pooled(base.path()), 1).warm_up(warm_up))
        .unwrap();
    let status = failed(&manager).await;
    let error = status.last_error.clone().unwrap();
    assert!(
        error.contains("exit code 3") && error.contains("not-ready"),
        "{status:?}"
    );
    assert!(status.ready.is_empty(), "{status:?}");
    // The failed member was killed.
    assert!(airlock_tests::wait_until(
        Duration::from_secs(10),
        || vms_under(base.path()) == 0
    ));
}

#[tokio::test]
async fn a_warm_up_that_leaves_a_file_is_refused() {
    let base = tempfile::tempdir().unwrap();
    let warm_up = WarmUp::none().shell("echo x > /tmp/left-behind");
    let manager = Sandboxes::new(2);
    manager
        .configure_pool(PoolConfig::new(pooled(base.path()), 1).warm_up(warm_up))
        .unwrap();
    let status = failed(&manager).await;
    let error = status.last_error.clone().unwrap();
    assert!(error.contains("/tmp/left-behind"), "{status:?}");
    assert!(status.ready.is_empty(), "{status:?}");
}
