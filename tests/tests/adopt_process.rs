//! Sandboxes that outlive their owner, on the process backend (the agent
//! as a host process, `SandboxBuilder::process_backend`): an owner killed
//! with SIGKILL leaves its adoptable sandbox running, `gc` keeps it, and
//! `SandboxBuilder::adopt` takes it over with its programs still running;
//! a paused one comes back paused and its lifetime still ends it; detach
//! and adopt in one process and between two managers; the lifetime
//! changed while it runs; the builder's environment in programs and
//! contexts. The same on real VMs is `adopt.rs`; this file takes seconds.
//!
//! Needs `target/debug/airlock-agent` (`cargo build -p airlock-agent`;
//! `scripts/test` builds it).

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use airlock::adopt::AdoptError;
use airlock::gc::{GcOptions, KeepReason};
use airlock::{
    Cell, ContextOptions, EndReason, Error, Language, Origin, Sandbox, SandboxBuilder,
    SandboxState, Sandboxes,
};
use airlock_tests::owner::{self, Leftovers, Owner};
use airlock_tests::{process_builder, sh, stdout_of};

/// How long anything here may take to happen before the test fails.
const PATIENCE: Duration = Duration::from_secs(20);
/// The paused owner's lifetime ceiling.
const SHORT_LIFE: Duration = Duration::from_secs(8);

fn main() -> ExitCode {
    if let Some(role) = owner::role() {
        owner::block_on(hold_a_sandbox(&role));
        return ExitCode::SUCCESS;
    }
    owner::run(airlock_tests::owner_tests![
        a_killed_owners_sandbox_is_adopted_with_its_programs_running,
        a_paused_sandbox_comes_back_paused_and_its_lifetime_still_ends_it,
        detach_then_adopt_in_one_process,
        a_manager_detaches_its_sandboxes_for_another_to_adopt,
        a_sandbox_that_is_not_adoptable_refuses_to_detach,
        the_lifetime_can_be_extended_removed_or_ended,
        the_builders_environment_reaches_programs_and_contexts,
    ])
}

/// A program that appends a number to `dir/count` five times a second.
fn counter(dir: &Path) -> airlock::Command {
    sh(&format!(
        "i=0; while :; do echo $i >> {}/count; i=$((i+1)); sleep 0.2; done",
        dir.display()
    ))
    .tag("counter")
}

fn count(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("count"))
        .unwrap_or_default()
        .lines()
        .count()
}

fn unix_ms(time: SystemTime) -> u64 {
    u64::try_from(time.duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + PATIENCE;
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not within {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An adoptable sandbox on the process backend under `base`.
fn adoptable(base: &Path) -> SandboxBuilder {
    process_builder()
        .state_dir_base(base)
        .adoptable(true)
        .env("GREETING", "hello from the builder")
}

/// The owner process: an adoptable sandbox running the counter in
/// `$ADOPT_WORK`; with role `paused`, paused and with a short lifetime.
async fn hold_a_sandbox(role: &str) {
    let base = PathBuf::from(std::env::var("ADOPT_BASE").expect("ADOPT_BASE"));
    let work = PathBuf::from(std::env::var("ADOPT_WORK").expect("ADOPT_WORK"));
    let lifetime = match role {
        "paused" => SHORT_LIFE,
        _ => Duration::from_secs(600),
    };
    let sandbox = adoptable(&base)
        .max_lifetime(Some(lifetime))
        .start()
        .await
        .expect("the owner's sandbox");
    drop(sandbox.exec(counter(&work)).await.expect("counter"));
    until("the counter counts", || count(&work) >= 3).await;
    if role == "paused" {
        sandbox.pause().await.expect("pause");
    }
    owner::announce(&[sandbox.id(), &unix_ms(sandbox.started_at()).to_string()]);
    std::future::pending::<()>().await;
}

/// Starts an owner in `role` and kills it once its sandbox runs; returns
/// the sandbox's id and start (Unix ms).
fn orphan(role: &str, base: &Path, work: &Path) -> (String, u64) {
    let mut owner = Owner::spawn(
        role,
        &[
            ("ADOPT_BASE", base.display().to_string()),
            ("ADOPT_WORK", work.display().to_string()),
        ],
    );
    let ready = owner.ready(PATIENCE);
    owner.kill();
    (ready[0].clone(), ready[1].parse().expect("start in ms"))
}

/// The agent process of the sandbox in `dir` (its command line names it).
fn agent_of(dir: &Path) -> Vec<u32> {
    airlock_tests::processes_mentioning(dir)
}

/// The one-letter state of process `pid` (`T` when stopped).
fn process_state(pid: u32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit(')')
        .next()
        .and_then(|rest| rest.trim_start().chars().next())
        .unwrap_or('?')
}

/// After the sandbox in `dir` was killed and dropped: no agent, no state
/// directory, the counter in `work` stopped.
async fn nothing_left(dir: &Path, work: &Path) {
    until("the agent ends", || agent_of(dir).is_empty()).await;
    assert!(!dir.exists(), "state directory left: {}", dir.display());
    let stopped = count(work);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(count(work), stopped, "the counter outlived its sandbox");
}

async fn a_killed_owners_sandbox_is_adopted_with_its_programs_running() {
    let base = tempfile::tempdir().unwrap();
    let _leftovers = Leftovers::under(base.path());
    let work = tempfile::tempdir().unwrap();
    let _programs = Leftovers::under(work.path());
    let (id, started_ms) = orphan("counter", base.path(), work.path());
    let dir = base.path().join(&id);
    assert_eq!(agent_of(&dir).len(), 1, "the agent outlives its owner");

    // gc leaves it alone: it waits for adoption.
    let report = airlock::gc::collect(base.path(), &GcOptions::new()).unwrap();
    assert!(report.removed.is_empty(), "{report:?}");
    assert!(
        matches!(report.kept[0].why, KeepReason::AwaitingAdoption { .. }),
        "{report:?}"
    );
    let orphans = airlock::adopt::orphans(base.path()).unwrap();
    assert_eq!(orphans.len(), 1, "{orphans:?}");
    assert_eq!(orphans[0].id, id);
    assert!(!orphans[0].paused);
    assert_eq!(unix_ms(orphans[0].started_at), started_ms);

    let before = count(work.path());
    let sandbox = process_builder()
        .state_dir_base(base.path())
        .adopt(&id)
        .await
        .expect("adopt");
    assert_eq!(sandbox.origin(), &Origin::Adopted);
    assert_eq!(sandbox.id(), id);
    assert_eq!(sandbox.state(), SandboxState::Running);
    assert_eq!(unix_ms(sandbox.started_at()), started_ms);
    let lived = SystemTime::now()
        .duration_since(UNIX_EPOCH + Duration::from_millis(started_ms))
        .unwrap();
    assert!(
        sandbox.usage().wall + Duration::from_millis(50) >= lived,
        "usage goes on from the start: {:?} < {lived:?}",
        sandbox.usage()
    );

    // The counter never stopped, and is still the agent's program.
    until("the counter goes on", || count(work.path()) > before + 5).await;
    let programs = sandbox.list().await.expect("list");
    assert!(
        programs.iter().any(|p| p.tag.as_deref() == Some("counter")
            && matches!(p.state, airlock::ProcessState::Running)),
        "{programs:?}"
    );
    // The recorded environment, and a new program.
    assert_eq!(
        stdout_of(&sandbox, "echo $GREETING").await,
        "hello from the builder\n"
    );

    // One owner at a time.
    let again = process_builder()
        .state_dir_base(base.path())
        .adopt(&id)
        .await
        .unwrap_err();
    assert!(
        matches!(&again, Error::Adopt(AdoptError::Held { pid, .. }) if *pid == std::process::id()),
        "{again}"
    );
    let report = airlock::gc::collect(base.path(), &GcOptions::new()).unwrap();
    assert!(
        matches!(report.kept[0].why, KeepReason::OwnerAlive { .. }),
        "{report:?}"
    );

    sandbox.kill();
    drop(sandbox);
    nothing_left(&dir, work.path()).await;
}

async fn a_paused_sandbox_comes_back_paused_and_its_lifetime_still_ends_it() {
    let base = tempfile::tempdir().unwrap();
    let _leftovers = Leftovers::under(base.path());
    let work = tempfile::tempdir().unwrap();
    let _programs = Leftovers::under(work.path());
    let (id, started_ms) = orphan("paused", base.path(), work.path());
    let dir = base.path().join(&id);
    // SIGSTOP takes effect when the agent is next scheduled; then it stays
    // stopped although its owner died.
    let agent = agent_of(&dir)[0];
    until("the agent stops", || process_state(agent) == 'T').await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(process_state(agent), 'T', "stopped after its owner died");
    let orphans = airlock::adopt::orphans(base.path()).unwrap();
    assert!(orphans[0].paused, "{orphans:?}");

    let sandbox = process_builder()
        .state_dir_base(base.path())
        .adopt(&id)
        .await
        .expect("adopt");
    assert_eq!(sandbox.state(), SandboxState::Paused);
    let ends_at = sandbox.ends_at().expect("a lifetime ceiling");
    assert_eq!(
        unix_ms(ends_at),
        started_ms + u64::try_from(SHORT_LIFE.as_millis()).unwrap()
    );
    // Frozen: the counter stands still.
    let frozen = count(work.path());
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(count(work.path()), frozen, "a paused sandbox runs nothing");

    // A call resumes it (the recorded PausedCalls::Resume).
    assert_eq!(stdout_of(&sandbox, "echo awake").await, "awake\n");
    assert_eq!(sandbox.state(), SandboxState::Running);
    until("the counter goes on", || count(work.path()) > frozen + 2).await;

    // Its recorded ceiling ends it.
    let reason = loop {
        if let Some(reason) = sandbox.end_reason() {
            break reason;
        }
        assert!(
            SystemTime::now() < ends_at + PATIENCE,
            "still running past its lifetime"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(reason, EndReason::LifetimeExceeded { limit: SHORT_LIFE });
    assert!(
        SystemTime::now() + Duration::from_millis(100) >= ends_at,
        "ended before its time"
    );
    drop(sandbox);
    nothing_left(&dir, work.path()).await;
}

async fn detach_then_adopt_in_one_process() {
    let base = tempfile::tempdir().unwrap();
    let _leftovers = Leftovers::under(base.path());
    let work = tempfile::tempdir().unwrap();
    let _programs = Leftovers::under(work.path());
    let sandbox = adoptable(base.path()).start().await.expect("start");
    assert!(sandbox.is_adoptable());
    drop(sandbox.exec(counter(work.path())).await.expect("counter"));
    until("the counter counts", || count(work.path()) >= 3).await;
    let dir = sandbox.state_dir().to_owned();

    let id = sandbox.detach().await.expect("detach");
    assert_eq!(agent_of(&dir).len(), 1, "a detached sandbox runs on");
    assert!(dir.join(airlock::adopt::ADOPT_FILE).is_file());
    let before = count(work.path());
    until("the counter goes on unheld", || {
        count(work.path()) > before + 2
    })
    .await;
    let report = airlock::gc::collect(base.path(), &GcOptions::new()).unwrap();
    assert!(
        matches!(report.kept[0].why, KeepReason::AwaitingAdoption { .. }),
        "{report:?}"
    );

    let sandbox = adoptable(base.path()).adopt(&id).await.expect("adopt");
    let programs = sandbox.list().await.expect("list");
    assert!(
        programs.iter().any(|p| p.tag.as_deref() == Some("counter")),
        "{programs:?}"
    );
    // And once more.
    let id = sandbox.detach().await.expect("detach again");
    let sandbox = adoptable(base.path())
        .adopt(&id)
        .await
        .expect("adopt again");
    assert_eq!(stdout_of(&sandbox, "echo again").await, "again\n");
    drop(sandbox);
    nothing_left(&dir, work.path()).await;
}

async fn a_manager_detaches_its_sandboxes_for_another_to_adopt() {
    let base = tempfile::tempdir().unwrap();
    let _leftovers = Leftovers::under(base.path());
    let manager = Sandboxes::new(3);
    let first = manager.start(adoptable(base.path())).await.expect("first");
    let second = manager.start(adoptable(base.path())).await.expect("second");
    let plain = manager
        .start(process_builder().state_dir_base(base.path()))
        .await
        .expect("plain");
    let ids = [first.id().to_owned(), second.id().to_owned()];
    let plain_dir = plain.state_dir().to_owned();
    drop((second, plain));

    let mut results = manager.detach_all().await;
    results.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(results.len(), 3);
    for (id, result) in &results {
        if ids.contains(id) {
            assert!(result.is_ok(), "{id}: {result:?}");
        } else {
            assert!(
                matches!(result, Err(Error::Adopt(AdoptError::NotAdoptable { .. }))),
                "{id}: {result:?}"
            );
        }
    }
    assert!(manager.list().is_empty());
    // A handle held meanwhile sees its sandbox detached.
    assert_eq!(first.state(), SandboxState::Ended(EndReason::Detached));
    let error = first.exec(sh("true")).await.unwrap_err();
    assert!(
        matches!(
            error,
            Error::SandboxEnded {
                reason: EndReason::Detached
            }
        ),
        "{error}"
    );
    drop(first);
    // The one that could not be detached was ended.
    until("the plain sandbox ends", || agent_of(&plain_dir).is_empty()).await;

    let next = Sandboxes::new(3);
    for id in &ids {
        let adopted = next
            .adopt(process_builder().state_dir_base(base.path()), id)
            .await
            .expect("adopt");
        assert_eq!(stdout_of(&adopted, "echo adopted").await, "adopted\n");
        let tracked = next
            .adopt(process_builder().state_dir_base(base.path()), id)
            .await
            .expect("the tracked one");
        assert!(Arc::ptr_eq(&adopted, &tracked));
    }
    assert_eq!(next.list().len(), 2);
    // One at a time, too.
    next.detach(&ids[0]).await.expect("detach one");
    assert!(matches!(
        next.get(&ids[0]),
        Err(Error::NoSuchSandbox { .. })
    ));
    let back = next
        .adopt(process_builder().state_dir_base(base.path()), &ids[0])
        .await
        .expect("adopt it back");
    assert_eq!(stdout_of(&back, "echo back").await, "back\n");
    drop(back);
    drop(next);
    for id in &ids {
        let dir = base.path().join(id);
        until("adopted sandboxes end with their manager", || {
            agent_of(&dir).is_empty() && !dir.exists()
        })
        .await;
    }
    drop(manager);
}

async fn a_sandbox_that_is_not_adoptable_refuses_to_detach() {
    let base = tempfile::tempdir().unwrap();
    let _leftovers = Leftovers::under(base.path());
    let sandbox = process_builder()
        .state_dir_base(base.path())
        .start()
        .await
        .expect("start");
    assert!(!sandbox.is_adoptable());
    let dir = sandbox.state_dir().to_owned();
    let error = sandbox.detach().await.unwrap_err();
    assert!(
        matches!(error, Error::Adopt(AdoptError::NotAdoptable { .. })),
        "{error}"
    );
    assert!(error.to_string().contains("adoptable"), "{error}");
    // Consumed, it ended as a dropped sandbox does.
    until("its agent ends", || agent_of(&dir).is_empty()).await;
    assert!(!dir.exists());
    assert!(airlock::adopt::orphans(base.path()).unwrap().is_empty());
}

async fn the_lifetime_can_be_extended_removed_or_ended() {
    let base = tempfile::tempdir().unwrap();
    let _leftovers = Leftovers::under(base.path());
    let sandbox: Sandbox = adoptable(base.path())
        .max_lifetime(Some(Duration::from_secs(2)))
        .start()
        .await
        .expect("start");
    let started = sandbox.started_at();
    assert_eq!(sandbox.ends_at(), Some(started + Duration::from_secs(2)));
    let hour = Duration::from_secs(3600);
    sandbox.set_max_lifetime(Some(hour));
    assert_eq!(sandbox.ends_at(), Some(started + hour));
    // The record keeps it: a new owner would enforce the new ceiling.
    let record =
        std::fs::read_to_string(sandbox.state_dir().join(airlock::adopt::ADOPT_FILE)).unwrap();
    assert!(record.contains("\"max_lifetime_ms\":3600000"), "{record}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(sandbox.state(), SandboxState::Running, "extended past 2 s");
    sandbox.set_max_lifetime(None);
    assert_eq!(sandbox.ends_at(), None);

    let passed = Duration::from_millis(1);
    sandbox.set_max_lifetime(Some(passed));
    assert_eq!(
        sandbox.end_reason(),
        Some(EndReason::LifetimeExceeded { limit: passed }),
        "a ceiling already passed ends it now"
    );
    let dir = sandbox.state_dir().to_owned();
    until("its agent ends", || agent_of(&dir).is_empty()).await;
}

async fn the_builders_environment_reaches_programs_and_contexts() {
    let base = tempfile::tempdir().unwrap();
    let _leftovers = Leftovers::under(base.path());
    let sandbox = process_builder()
        .state_dir_base(base.path())
        .envs([("GREETING", "from the builder"), ("SHADOWED", "builder")])
        .start()
        .await
        .expect("start");
    let out = airlock_tests::run(
        &sandbox,
        sh("echo \"$GREETING/$SHADOWED\"").env("SHADOWED", "command"),
    )
    .await;
    assert_eq!(out.stdout, b"from the builder/command\n", "{out:?}");

    // The default Python context (made by the host, with the environment).
    let cell = sandbox
        .run_code("import os; os.environ['GREETING']")
        .await
        .expect("run_code")
        .output()
        .await
        .expect("cell");
    assert_eq!(cell.text(), Some("'from the builder'"), "{cell:?}");
    // A context made explicitly; its own variables win.
    let contexts = sandbox.contexts();
    let bash = contexts
        .create(&ContextOptions::new(Language::Bash).env("SHADOWED", "context"))
        .await
        .expect("context");
    let cell = contexts
        .run(Cell::new("echo \"$GREETING/$SHADOWED\"").context(bash.id.clone()))
        .await
        .expect("run")
        .output()
        .await
        .expect("cell");
    assert_eq!(cell.stdout, b"from the builder/context\n", "{cell:?}");
    // The default bash context, deleted and made again, keeps it.
    let cell = sandbox
        .run_code(Cell::new("echo $GREETING").language(Language::Bash))
        .await
        .expect("bash default")
        .output()
        .await
        .expect("cell");
    assert_eq!(cell.stdout, b"from the builder\n", "{cell:?}");
    contexts.delete("bash").await.expect("delete the default");
    let cell = sandbox
        .run_code(Cell::new("echo $GREETING").language(Language::Bash))
        .await
        .expect("bash default again")
        .output()
        .await
        .expect("cell");
    assert_eq!(cell.stdout, b"from the builder\n", "{cell:?}");
}
