//! A crashed embedder never leaves a VM running: after the owner of a
//! sandbox is killed with SIGKILL, `airlock gc` kills its VMM processes and
//! removes its state directory, and leaves a live sandbox in the same base
//! alone.

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use airlock::state_dir::owner::OwnerRecord;
use airlock::state_dir::STATE_DIR_ENV;

/// How long the killed owner's VM may take to come up.
const UP_TIMEOUT: Duration = airlock_tests::BOOT_TIMEOUT;

#[tokio::test]
async fn gc_ends_the_sandboxes_of_a_killed_owner_and_keeps_live_ones() {
    let base = tempfile::tempdir().expect("base");
    let live = airlock_tests::builder()
        .state_dir_base(base.path())
        .start()
        .await
        .expect("live sandbox");
    let live_dir = live.state_dir().to_owned();

    // An embedding process holding a sandbox, killed once its VM is up.
    let (mut owner, orphan_dir) = start_owner(base.path()).await;
    owner.kill().expect("SIGKILL the owner");
    owner.wait().expect("reap the owner");

    let orphans = airlock_tests::processes_mentioning(&orphan_dir);
    assert_eq!(
        orphans.len(),
        1,
        "qemu outlives a killed owner: {orphans:?}"
    );

    let dry = gc(base.path(), &["--dry-run"]);
    assert!(
        dry.contains(&format!("would remove {}", orphan_dir.display())),
        "{dry}"
    );
    assert_eq!(airlock_tests::processes_mentioning(&orphan_dir).len(), 1);
    assert!(orphan_dir.exists(), "a dry run removes nothing");

    let report = gc(base.path(), &[]);
    assert!(
        report.contains(&format!("removed {}", orphan_dir.display())),
        "{report}"
    );
    assert!(
        report.contains(&format!("kept {}: owner pid", live_dir.display())),
        "{report}"
    );
    let left = airlock_tests::processes_mentioning(&orphan_dir);
    assert!(left.is_empty(), "VMM processes left behind: {left:?}");
    assert!(
        !orphan_dir.exists(),
        "state dir left behind: {}",
        orphan_dir.display()
    );

    // The live sandbox is untouched and still answers.
    assert!(live_dir.is_dir());
    assert_eq!(airlock_tests::processes_mentioning(&live_dir).len(), 1);
    let out = live
        .exec(airlock::Command::new("echo").arg("alive"))
        .await
        .expect("exec")
        .output()
        .await
        .expect("output");
    assert_eq!(out.stdout, b"alive\n");

    // Nothing more to collect.
    let again = gc(base.path(), &[]);
    assert!(!again.contains("removed"), "{again}");
    drop(live);
    assert!(!live_dir.exists());
}

#[tokio::test]
async fn collect_orphans_on_start_ends_what_a_dead_owner_left() {
    let base = tempfile::tempdir().expect("base");
    let (mut owner, orphan_dir) = start_owner(base.path()).await;
    owner.kill().expect("SIGKILL the owner");
    owner.wait().expect("reap the owner");
    assert_eq!(airlock_tests::processes_mentioning(&orphan_dir).len(), 1);

    let sandbox = airlock_tests::builder()
        .state_dir_base(base.path())
        .collect_orphans(true)
        .start()
        .await
        .expect("start");
    assert!(!orphan_dir.exists(), "the orphan's state dir is gone");
    let left = airlock_tests::processes_mentioning(&orphan_dir);
    assert!(left.is_empty(), "VMM processes left behind: {left:?}");
    assert!(sandbox.state_dir().is_dir());
}

/// Runs `airlock gc ARGS` on `base` and returns its stdout; it must exit 0.
fn gc(base: &Path, args: &[&str]) -> String {
    let Output {
        status,
        stdout,
        stderr,
    } = Command::new(airlock_tests::airlock_bin())
        .arg("gc")
        .args(args)
        .env(STATE_DIR_ENV, base)
        .output()
        .expect("airlock gc");
    let stdout = String::from_utf8_lossy(&stdout).into_owned();
    assert!(
        status.success(),
        "airlock gc {args:?}: {status}\n{stdout}\n{}",
        String::from_utf8_lossy(&stderr)
    );
    stdout
}

/// Starts `airlock run` on `base` with a command that says it runs and
/// then sleeps, and waits for that word: the owner's VM is then up. Returns
/// the owner and its sandbox's state directory.
async fn start_owner(base: &Path) -> (Child, PathBuf) {
    let mut owner = Command::new(airlock_tests::airlock_bin())
        .args([
            "run",
            "--no-image",
            "--",
            "sh",
            "-c",
            "echo running; exec sleep 1000",
        ])
        .env(STATE_DIR_ENV, base)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("airlock run");
    let stdout = owner.stdout.take().expect("piped stdout");
    let (said, word) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = said.send(line);
    });
    let line = tokio::task::spawn_blocking(move || word.recv_timeout(UP_TIMEOUT))
        .await
        .expect("waiting for the command")
        .unwrap_or_else(|_| panic!("the owner's command did not run within {UP_TIMEOUT:?}"));
    assert_eq!(line, "running\n");
    let dir = std::fs::read_dir(base)
        .expect("list base")
        .flatten()
        .map(|entry| entry.path())
        .find(|dir| OwnerRecord::read(dir).is_ok_and(|record| record.owner.pid == owner.id()))
        .expect("the owner's state directory");
    let record = OwnerRecord::read(&dir).expect("owner record");
    assert!(!record.vmm.is_empty(), "the owner's VMM is recorded");
    (owner, dir)
}
