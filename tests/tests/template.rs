//! Templates and clones: each clone is its own machine, templates follow
//! their inputs, a broken template means a cold boot (never a failed
//! start), and a template build killed half way leaves nothing `airlock gc`
//! does not remove.
//!
//! Every test keeps its templates in a directory of its own.

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::HashSet;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use airlock::template::TemplateStore;
use airlock::{Origin, Sandbox, SandboxBuilder};
use airlock_tests::stdout_of;

/// A test sandbox on the default image, from templates kept in `dir`.
fn cloned(dir: &Path) -> SandboxBuilder {
    airlock_tests::builder()
        .image(airlock_tests::default_image())
        .from_template(true)
        .template_dir(dir)
}

async fn start(builder: SandboxBuilder) -> Sandbox {
    builder.start().await.expect("sandbox starts")
}

fn is_clone(sandbox: &Sandbox, built: bool) -> bool {
    matches!(sandbox.origin(), Origin::Clone { built: b, .. } if *b == built)
}

/// What should differ between two machines.
async fn identity(sandbox: &Sandbox) -> (String, String, String) {
    let uuid = stdout_of(sandbox, "cat /proc/sys/kernel/random/uuid").await;
    let random = stdout_of(
        sandbox,
        "python3 -c 'import os; print(os.urandom(16).hex())'",
    )
    .await;
    let hostname = stdout_of(sandbox, "hostname").await;
    (uuid, random, hostname)
}

#[tokio::test]
async fn three_clones_are_three_machines_that_share_nothing_they_write() {
    let templates = tempfile::tempdir().unwrap();
    let first = start(cloned(templates.path())).await;
    assert!(is_clone(&first, true), "{:?}", first.origin());
    let second = start(cloned(templates.path())).await;
    let third = start(cloned(templates.path())).await;
    for clone in [&second, &third] {
        assert!(is_clone(clone, false), "{:?}", clone.origin());
        let timings = clone.boot_timings();
        assert_eq!(
            (timings.before_guest_clock, timings.serving_to_answer),
            (None, None),
            "a clone's guest clock is its template's: {timings:?}"
        );
    }

    let mut uuids = HashSet::new();
    let mut randoms = HashSet::new();
    let mut hostnames = HashSet::new();
    for clone in [&first, &second, &third] {
        let (uuid, random, hostname) = identity(clone).await;
        assert_eq!(
            hostname.trim(),
            clone.id(),
            "the hostname is the sandbox id"
        );
        uuids.insert(uuid);
        randoms.insert(random);
        hostnames.insert(hostname);
    }
    assert_eq!(uuids.len(), 3, "{uuids:?}");
    assert_eq!(randoms.len(), 3, "{randoms:?}");
    assert_eq!(hostnames.len(), 3, "{hostnames:?}");

    // The guest's clock is the host's, not the template's.
    let guest_secs: u64 = stdout_of(&second, "date +%s").await.trim().parse().unwrap();
    let host_secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(
        guest_secs.abs_diff(host_secs) <= 5,
        "guest {guest_secs}, host {host_secs}"
    );

    stdout_of(
        &first,
        "echo mine > /root/mark && echo tmp > /tmp/mark && sync",
    )
    .await;
    for clone in [&second, &third] {
        let seen = stdout_of(clone, "ls /root/mark /tmp/mark 2>/dev/null; true").await;
        assert_eq!(seen, "", "a sibling sees the first clone's files");
    }
    drop(first);
    let next = start(cloned(templates.path())).await;
    assert!(is_clone(&next, false), "{:?}", next.origin());
    let seen = stdout_of(&next, "ls /root/mark /tmp/mark 2>/dev/null; true").await;
    assert_eq!(seen, "", "the next clone sees an earlier clone's files");
    assert_eq!(
        TemplateStore::new(templates.path()).list().unwrap().len(),
        1
    );
}

#[tokio::test]
async fn another_agent_build_gets_its_own_template() {
    let templates = tempfile::tempdir().unwrap();
    let copy = tempfile::tempdir().unwrap();
    // The same bytes in another file: to the cache, another build.
    let initramfs = copy.path().join("initramfs.cpio");
    std::fs::copy(airlock::artifacts::default_initramfs(), &initramfs).unwrap();
    let builder = || {
        airlock_tests::builder()
            .from_template(true)
            .template_dir(templates.path())
    };
    let a = start(builder()).await;
    let b = start(builder().initramfs(&initramfs)).await;
    let (
        Origin::Clone {
            key: key_a,
            built: true,
        },
        Origin::Clone {
            key: key_b,
            built: true,
        },
    ) = (a.origin().clone(), b.origin().clone())
    else {
        panic!("{:?} and {:?}", a.origin(), b.origin());
    };
    assert_ne!(key_a, key_b);
    drop(b);
    // A rebuilt initramfs (new file) makes the old template stale.
    std::fs::remove_file(&initramfs).unwrap();
    std::fs::copy(airlock::artifacts::default_initramfs(), &initramfs).unwrap();
    let store = TemplateStore::new(templates.path());
    let stale: Vec<_> = store
        .list()
        .unwrap()
        .into_iter()
        .filter(|entry| !entry.current)
        .map(|entry| entry.key)
        .collect();
    assert_eq!(stale, vec![key_b.clone()]);
    assert_eq!(store.collect().unwrap().templates, vec![key_b.clone()]);
    let c = start(builder().initramfs(&initramfs)).await;
    assert!(is_clone(&c, true), "{:?}", c.origin());
}

#[tokio::test]
async fn a_corrupt_or_truncated_template_boots_cold_once_then_is_made_again() {
    let templates = tempfile::tempdir().unwrap();
    let builder = || {
        airlock_tests::builder()
            .from_template(true)
            .template_dir(templates.path())
    };
    let made = start(builder()).await;
    let Origin::Clone { key, .. } = made.origin().clone() else {
        panic!("{:?}", made.origin());
    };
    drop(made);
    let dir = templates.path().join(&key);

    // A flipped byte in the saved state.
    let mut state = std::fs::read(dir.join("state")).unwrap();
    let middle = state.len() / 2;
    state[middle] ^= 0xff;
    std::fs::write(dir.join("state"), &state).unwrap();
    let cold = start(builder()).await;
    let Origin::ColdFallback { reason } = cold.origin() else {
        panic!("{:?}", cold.origin());
    };
    assert!(reason.contains("corrupt"), "{reason}");
    assert_eq!(stdout_of(&cold, "echo ok").await, "ok\n");
    drop(cold);
    let again = start(builder()).await;
    assert!(is_clone(&again, true), "{:?}", again.origin());
    drop(again);

    // A truncated memory file.
    let memory = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("memory"))
        .unwrap();
    memory.set_len(1 << 20).unwrap();
    let cold = start(builder()).await;
    assert!(
        matches!(cold.origin(), Origin::ColdFallback { reason } if reason.contains("memory")),
        "{:?}",
        cold.origin()
    );
    assert_eq!(stdout_of(&cold, "echo ok").await, "ok\n");
}

#[tokio::test]
async fn a_workspace_sandbox_boots_cold_and_keeps_its_files() {
    let templates = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let workspace = work.path().join("ws.img");
    let builder = || cloned(templates.path()).workspace(&workspace);
    let first = start(builder()).await;
    assert_eq!(first.origin(), &Origin::Cold);
    // A cold boot's parts: the host's time before the guest's clock, then
    // the guest's own account, add up to the first answer.
    let timings = first.boot_timings();
    let before = timings
        .before_guest_clock
        .expect("a cold boot's time before its clock");
    let serving = timings
        .serving_to_answer
        .expect("a cold boot's serving to answer");
    assert!(
        before > timings.vmm_started,
        "the guest runs after QEMU: {timings:?}"
    );
    let parts = before + timings.kernel_to_init + timings.init_to_serving + serving;
    assert!(
        parts.abs_diff(timings.answered) < Duration::from_millis(1),
        "{timings:?}"
    );
    assert!(timings.answered <= timings.ready, "{timings:?}");
    stdout_of(&first, "echo kept > /root/kept && sync").await;
    first.shutdown(Duration::from_secs(10)).await.unwrap();
    let second = start(builder()).await;
    assert_eq!(stdout_of(&second, "cat /root/kept").await, "kept\n");
    assert!(TemplateStore::new(templates.path())
        .list()
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn a_template_build_killed_half_way_leaves_nothing_gc_does_not_remove() {
    let templates = tempfile::tempdir().unwrap();
    let states = tempfile::tempdir().unwrap();
    let airlock = airlock_tests::airlock_bin();
    let mut run = std::process::Command::new(&airlock)
        .args(["run", "--no-image", "--memory", "256", "--", "true"])
        .env("AIRLOCK_TEMPLATE_DIR", templates.path())
        .env("AIRLOCK_STATE_DIR", states.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the template VM is being made, then kill the owner.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let building = std::fs::read_dir(templates.path())
            .map(|dir| {
                dir.flatten()
                    .any(|e| e.file_name().to_string_lossy().contains(".building-"))
            })
            .unwrap_or(false);
        if building {
            break;
        }
        assert!(Instant::now() < deadline, "no template build started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    run.kill().unwrap();
    run.wait().unwrap();

    let gc = std::process::Command::new(&airlock)
        .args(["gc", "--grace", "0"])
        .env("AIRLOCK_TEMPLATE_DIR", templates.path())
        .env("AIRLOCK_STATE_DIR", states.path())
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&gc.stdout);
    assert!(
        gc.status.success(),
        "{report}{}",
        String::from_utf8_lossy(&gc.stderr)
    );
    assert!(report.contains("an unfinished template"), "{report}");

    let left: Vec<_> = std::fs::read_dir(templates.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| !name.ends_with(".lock"))
        .collect();
    assert!(left.is_empty(), "left in the template directory: {left:?}");
    let states_left: Vec<_> = std::fs::read_dir(states.path())
        .unwrap()
        .flatten()
        .collect();
    assert!(
        states_left.is_empty(),
        "state directories left: {states_left:?}"
    );
    for dir in [templates.path(), states.path()] {
        let processes = airlock_tests::processes_mentioning(dir);
        assert!(
            processes.is_empty(),
            "processes {processes:?} outlived the kill"
        );
    }
}

#[tokio::test]
async fn another_qemu_gets_its_own_template() {
    let templates = tempfile::tempdir().unwrap();
    let states = tempfile::tempdir().unwrap();
    let bin = tempfile::tempdir().unwrap();
    // Another QEMU: here a wrapper that runs the installed one (a copy of
    // Debian's binary would not find its accelerator modules).
    let qemu = bin.path().join("qemu-system-x86_64");
    let installed = which("qemu-system-x86_64");
    std::fs::write(
        &qemu,
        format!("#!/bin/sh\nexec {} \"$@\"\n", installed.display()),
    )
    .unwrap();
    std::fs::set_permissions(&qemu, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let run = |qemu: &Path| {
        let out = std::process::Command::new(airlock_tests::airlock_bin())
            .args(["run", "--no-image", "--memory", "256", "--", "echo", "hi"])
            .env("AIRLOCK_TEMPLATE_DIR", templates.path())
            .env("AIRLOCK_STATE_DIR", states.path())
            .env("AIRLOCK_QEMU", qemu)
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "hi\n",
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&installed);
    run(&installed);
    assert_eq!(
        TemplateStore::new(templates.path()).list().unwrap().len(),
        1
    );
    run(&qemu);
    let entries = TemplateStore::new(templates.path()).list().unwrap();
    assert_eq!(entries.len(), 2);
    let qemus: HashSet<_> = entries
        .iter()
        .map(|entry| entry.meta.as_ref().unwrap().inputs.qemu.path.clone())
        .collect();
    assert!(qemus.contains(&qemu.canonicalize().unwrap()), "{qemus:?}");
}

fn which(program: &str) -> std::path::PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| panic!("{program} not on PATH"))
}

/// `airlock run --verbose` says where a start came from: the start that
/// made the template, a clone of it, a cold boot with the guest's own boot
/// figures (a clone's would be its template's).
#[tokio::test]
async fn run_verbose_names_the_origin_of_the_start() {
    let templates = tempfile::tempdir().unwrap();
    let states = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        let output = std::process::Command::new(airlock_tests::airlock_bin())
            .args(["run", "--no-image", "--memory", "256", "--verbose"])
            .args(extra)
            .args(["--", "true"])
            .env("AIRLOCK_TEMPLATE_DIR", templates.path())
            .env("AIRLOCK_STATE_DIR", states.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "{stderr}");
        stderr
            .lines()
            .find(|line| line.starts_with("airlock: accel"))
            .unwrap_or_else(|| panic!("no timing line in {stderr}"))
            .to_owned()
    };
    let made = run(&[]);
    assert!(made.contains("made by this start"), "{made}");
    let cloned = run(&[]);
    assert!(cloned.contains("| clone of template "), "{cloned}");
    assert!(!cloned.contains("made by this start"), "{cloned}");
    assert!(!cloned.contains("guest kernel"), "{cloned}");
    let cold = run(&["--cold"]);
    assert!(cold.contains("cold boot: guest kernel to agent"), "{cold}");
    assert!(cold.contains("| before the guest's clock "), "{cold}");
    assert!(!cloned.contains("before the guest's clock"), "{cloned}");
}
