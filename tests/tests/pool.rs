//! The `Sandboxes` manager's warm pool: a start from the pool hands out a
//! frozen clone and the pool refills; pooled sandboxes are distinct
//! machines; a member that died frozen is never handed out; a pooled
//! sandbox's lifetime counts from its handout; the pool stays within the
//! manager's maximum and gives way to starts; dropping the manager kills
//! the pool.
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

use airlock::{EndReason, Error, Origin, PoolStatus, SandboxBuilder, SandboxState, Sandboxes};
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
