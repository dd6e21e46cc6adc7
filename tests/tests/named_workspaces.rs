//! Named workspaces through the server, on real VMs, as a key's user meets
//! them (`airlock serve` with TLS, `airlock sandbox` and `airlock workspace`
//! commands with an API key): a key's sandbox on a named workspace runs
//! QEMU as the unprivileged user (65534) and what it writes is there in the
//! next sandbox on that workspace; a workspace a sandbox holds is not
//! removed; a guest that fills its workspace stops at the workspace's size
//! (the disk is full in the guest) and the host's file stays within it;
//! removing the workspace gives that space back; other keys are served
//! meanwhile.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use airlock_tests::{DaemonHome, TlsServer};

/// How long one client may take: a boot under TCG on a loaded host.
const LIMIT: Duration = Duration::from_secs(300);
const MIB: u64 = 1 << 20;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A home whose state and data directories an unprivileged VMM can pass
/// through, as the Airlock home is (a temporary directory is 0700).
fn reachable_home() -> DaemonHome {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test checks the switch to an unprivileged VMM user, which needs root"
    );
    let home = DaemonHome::new();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    home
}

/// `airlock ARGS` as a remote client with `key`.
fn remote(home: &DaemonHome, server: &TlsServer, key: &str, args: &[&str]) -> Output {
    let mut client = home.client(args).limit(LIMIT);
    for (name, value) in server.env() {
        client = client.env(&name, &value);
    }
    client.env("AIRLOCK_API_KEY", key).output()
}

/// Like [`remote`], requiring success; returns stdout.
fn remote_ok(home: &DaemonHome, server: &TlsServer, key: &str, args: &[&str]) -> String {
    let out = remote(home, server, key, args);
    assert!(
        out.status.success(),
        "airlock {args:?}: {}\nserver log:\n{}",
        text(&out.stderr),
        home.daemon_log()
    );
    text(&out.stdout)
}

/// `airlock key create NAME EXTRA...` on the owner's socket; the key.
fn make_key(home: &DaemonHome, name: &str, extra: &[&str]) -> String {
    let argv = [&["key", "create", name], extra].concat();
    let out = home.airlock(&argv);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout).lines().last().unwrap().trim().to_owned()
}

/// `airlock workspace ls --json` for `key`.
fn listed(home: &DaemonHome, server: &TlsServer, key: &str) -> Vec<serde_json::Value> {
    let json = remote_ok(home, server, key, &["workspace", "ls", "--json"]);
    serde_json::from_str(&json).unwrap()
}

/// The uid QEMU of sandbox `id` runs as.
fn qemu_uid(home: &DaemonHome, id: &str) -> u32 {
    let pids = airlock_tests::processes_mentioning(&home.path().join(id));
    assert_eq!(pids.len(), 1, "one QEMU for {id}: {pids:?}");
    let status = std::fs::read_to_string(format!("/proc/{}/status", pids[0])).unwrap();
    let uids = status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .unwrap();
    let uids: Vec<u32> = uids
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    assert!(uids.iter().all(|&u| u == uids[0]), "{uids:?}");
    uids[0]
}

/// Processes with `path` open (a removed file's space is given back once
/// none has).
fn holders_of(path: &Path) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            if target
                .to_string_lossy()
                .starts_with(&*path.to_string_lossy())
            {
                found.push(pid);
            }
        }
    }
    found
}

fn workspace_file(home: &DaemonHome, key: &str, name: &str) -> PathBuf {
    home.server_dir()
        .join("workspaces")
        .join(key)
        .join(format!("{name}.ext4"))
}

#[test]
fn a_keys_workspace_runs_an_unprivileged_vmm_and_keeps_its_files() {
    let home = reachable_home();
    let server = TlsServer::start(&home, &[]);
    let alice = make_key(&home, "alice", &[]);
    let bob = make_key(&home, "bob", &[]);
    let create = [
        "sandbox",
        "create",
        "--memory",
        "256",
        "--workspace",
        "notes",
        "--workspace-size",
        "64M",
    ];
    let first = remote_ok(&home, &server, &alice, &create).trim().to_owned();
    assert_eq!(qemu_uid(&home, &first), 65534, "QEMU dropped to nobody");
    let file = workspace_file(&home, "alice", "notes");
    let meta = std::fs::metadata(&file).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o777, meta.len()),
        (0, 65534, 0o660, 64 * MIB),
        "the server's file, shared with the VMM's group only"
    );
    remote_ok(
        &home,
        &server,
        &alice,
        // Synced: a kill is abrupt, so what the guest has not written out yet
        // does not reach the disk.
        &[
            "sandbox",
            "exec",
            &first,
            "--",
            "sh",
            "-c",
            "echo kept > /root/note && sync",
        ],
    );

    // Held: listed with its sandbox, and not removed.
    let workspaces = listed(&home, &server, &alice);
    assert_eq!(workspaces.len(), 1, "{workspaces:?}");
    assert_eq!(workspaces[0]["name"], "notes");
    assert_eq!(workspaces[0]["sandbox"], first.as_str());
    assert_eq!(workspaces[0]["size_bytes"], 64 * MIB);
    let refused = remote(&home, &server, &alice, &["workspace", "rm", "notes"]);
    assert_eq!(refused.status.code(), Some(125));
    let stderr = text(&refused.stderr);
    assert!(
        stderr.contains(&format!("in use by sandbox {first}")),
        "{stderr}"
    );
    assert!(file.is_file());

    // Bob neither sees nor removes it, and is served meanwhile.
    assert!(listed(&home, &server, &bob).is_empty());
    let theirs = remote(&home, &server, &bob, &["workspace", "rm", "notes"]);
    assert!(
        text(&theirs.stderr).contains("no workspace named notes"),
        "{}",
        text(&theirs.stderr)
    );
    let other = remote_ok(
        &home,
        &server,
        &bob,
        &["sandbox", "create", "--no-image", "--memory", "256"],
    );
    let out = remote_ok(
        &home,
        &server,
        &bob,
        &["sandbox", "exec", other.trim(), "--", "echo", "bob"],
    );
    assert_eq!(out, "bob\n");

    // The next sandbox on it reads what the first wrote, unprivileged too.
    remote_ok(&home, &server, &alice, &["sandbox", "kill", &first]);
    let second = remote_ok(
        &home,
        &server,
        &alice,
        &[
            "sandbox",
            "create",
            "--memory",
            "256",
            "--workspace",
            "notes",
        ],
    )
    .trim()
    .to_owned();
    assert_eq!(qemu_uid(&home, &second), 65534);
    let out = remote_ok(
        &home,
        &server,
        &alice,
        &["sandbox", "exec", &second, "--", "cat", "/root/note"],
    );
    assert_eq!(out, "kept\n");

    // A sandbox ended by its lifetime lets the workspace go at once, though
    // the server keeps listing it as ended for minutes.
    remote_ok(&home, &server, &alice, &["sandbox", "kill", &second]);
    let short = remote_ok(
        &home,
        &server,
        &alice,
        &[
            "sandbox",
            "create",
            "--memory",
            "256",
            "--workspace",
            "notes",
            "--max-lifetime",
            "4",
        ],
    )
    .trim()
    .to_owned();
    let held = |workspaces: &[serde_json::Value]| {
        !(workspaces[0]["sandbox"].is_null() || workspaces[0]["sandbox"] == "")
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let workspaces = listed(&home, &server, &alice);
        assert_eq!(workspaces.len(), 1, "{workspaces:?}");
        if !held(&workspaces) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{short} outlived its 4 s lifetime: {workspaces:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let third = remote_ok(
        &home,
        &server,
        &alice,
        &[
            "sandbox",
            "create",
            "--memory",
            "256",
            "--workspace",
            "notes",
        ],
    )
    .trim()
    .to_owned();
    let out = remote_ok(
        &home,
        &server,
        &alice,
        &["sandbox", "exec", &third, "--", "cat", "/root/note"],
    );
    assert_eq!(out, "kept\n");
}

#[test]
fn a_guest_filling_its_workspace_stops_at_its_size_and_removal_frees_the_disk() {
    let home = reachable_home();
    let server = TlsServer::start(&home, &[]);
    let alice = make_key(&home, "alice", &["--max-workspace-mib", "64"]);
    let id = remote_ok(
        &home,
        &server,
        &alice,
        &[
            "sandbox",
            "create",
            "--memory",
            "256",
            "--workspace",
            "fill",
            "--workspace-size",
            "64M",
        ],
    )
    .trim()
    .to_owned();
    // 128 MiB of random bytes into a 64 MiB disk.
    let out = remote(
        &home,
        &server,
        &alice,
        &[
            "sandbox",
            "exec",
            &id,
            "--",
            "sh",
            "-c",
            "dd if=/dev/urandom of=/root/fill bs=1M count=128; echo dd=$?; sync; \
             df -k /root | tail -1",
        ],
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        stderr.contains("No space left on device"),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    assert!(stdout.contains("dd=1"), "{stdout}");
    let file = workspace_file(&home, "alice", "fill");
    let meta = std::fs::metadata(&file).unwrap();
    let used = meta.blocks() * 512;
    assert_eq!(meta.len(), 64 * MIB, "the disk did not grow");
    // The host's allocation: what the guest filled, within the size (and
    // a little for the host filesystem's own extent blocks).
    assert!(
        (40 * MIB..=65 * MIB).contains(&used),
        "{used} bytes allocated for a 64 MiB workspace"
    );
    // Its quota is full: a second workspace is refused with the figures.
    let second = remote(
        &home,
        &server,
        &alice,
        &["workspace", "create", "more", "--size", "16M"],
    );
    assert_eq!(second.status.code(), Some(125));
    assert!(
        text(&second.stderr).contains("may keep 64 MiB of workspaces and keeps 64 MiB"),
        "{}",
        text(&second.stderr)
    );

    // Removing it once its sandbox is gone gives the space back: the file
    // goes, and no process keeps it open.
    remote_ok(&home, &server, &alice, &["sandbox", "kill", &id]);
    let removed = remote_ok(&home, &server, &alice, &["workspace", "rm", "fill"]);
    assert_eq!(
        removed,
        format!("removed fill ({}M freed)\n", used.div_ceil(MIB))
    );
    assert!(!file.exists());
    assert!(holders_of(&file).is_empty(), "{:?}", holders_of(&file));
    assert!(listed(&home, &server, &alice).is_empty());
    remote_ok(
        &home,
        &server,
        &alice,
        &["workspace", "create", "more", "--size", "16M"],
    );
}
