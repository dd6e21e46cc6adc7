//! `airlock sandbox ...` as a user types it: one sandbox kept by the daemon
//! across separate CLI invocations, from `create` (which starts the daemon)
//! to SIGTERM on the daemon; and `sandbox exec` taking `airlock run`'s
//! program options (limits, privilege) and Ctrl-C as `run` does.

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use airlock_tests::interrupt::{interrupt_when_ready, TRAPPING_SCRIPT};
use airlock_tests::{airlock_bin, processes_mentioning, wait_until, DaemonHome};

/// Runs `airlock sandbox ARGS` in `home`, feeding `stdin` when given.
fn sandbox(home: &DaemonHome, args: &[&str], stdin: Option<&[u8]>) -> Output {
    let argv = [&["sandbox"], args].concat();
    let client = home.client(&argv);
    match stdin {
        Some(data) => client.stdin(data).output(),
        None => client.output(),
    }
}

/// The `ls` line of `id`, split into columns.
fn ls_line(table: &str, id: &str) -> Option<Vec<String>> {
    table
        .lines()
        .map(|line| {
            line.split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .find(|columns| columns.first().map(String::as_str) == Some(id))
}

#[test]
fn a_sandbox_lives_across_invocations_until_killed() {
    let home = DaemonHome::new();
    assert!(home.daemons().is_empty());

    // create starts the daemon on demand.
    let id = home.ok(&["create", "--no-image", "--memory", "256"]);
    let id = id.trim().to_owned();
    assert!(id.starts_with("sandbox-"), "id: {id:?}");
    assert_eq!(home.daemons().len(), 1, "one daemon runs");
    let socket_mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(home.socket()).unwrap().permissions(),
    );
    assert_eq!(socket_mode & 0o777, 0o600);

    let table = home.ok(&["ls"]);
    let line = ls_line(&table, &id).unwrap_or_else(|| panic!("{id} not listed:\n{table}"));
    assert_eq!(line[1], "running", "{table}");

    // Output on the right streams, the program's exit code.
    let script = "echo hi >/tmp/f; echo out; echo err >&2; exit 3";
    let out = sandbox(&home, &["exec", &id, "--", "sh", "-c", script], None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n", "{stderr}");
    assert!(stderr.lines().any(|l| l == "err"), "stderr: {stderr}");
    assert!(
        !stderr.contains("out"),
        "stdout leaked into stderr: {stderr}"
    );
    assert_eq!(out.status.code(), Some(3), "stderr: {stderr}");

    // Another invocation sees what the first wrote; piped stdin reaches it.
    let out = sandbox(
        &home,
        &["exec", &id, "--", "sh", "-c", "cat /tmp/f; cat"],
        Some(b"piped\n"),
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hi\npiped\n",
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success());

    // A host file in and back out, bytes equal.
    let files = tempfile::tempdir().unwrap();
    let original = files.path().join("in.bin");
    let data: Vec<u8> = (0..300_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&original, &data).unwrap();
    let guest = format!("{id}:/tmp/data.bin");
    home.ok(&["cp", original.to_str().unwrap(), &guest]);
    let back = files.path().join("out.bin");
    home.ok(&["cp", &guest, back.to_str().unwrap()]);
    assert!(std::fs::read(&back).unwrap() == data, "bytes differ");

    // Paused, listed so, and an exec resumes it.
    home.ok(&["pause", &id]);
    let table = home.ok(&["ls"]);
    assert_eq!(ls_line(&table, &id).unwrap()[1], "paused", "{table}");
    let out = home.ok(&["exec", &id, "--", "cat", "/tmp/f"]);
    assert_eq!(out, "hi\n");

    // Killed: gone from the list, its VM processes gone.
    home.ok(&["kill", &id]);
    let table = home.ok(&["ls"]);
    assert!(ls_line(&table, &id).is_none(), "still listed:\n{table}");
    let vm_dir = home.path().join(&id);
    assert!(
        wait_until(Duration::from_secs(20), || processes_mentioning(&vm_dir)
            .is_empty()),
        "VM processes remain: {:?}",
        processes_mentioning(&vm_dir)
    );

    // SIGTERM: the server leaves what runs for the next one (`--on-exit
    // leave`, the default), removes its socket and exits; the next call
    // starts a server that adopts the sandbox, running, with its files.
    let id2 = home.ok(&["create", "--no-image", "--memory", "256"]);
    let id2 = id2.trim();
    let vm_dir = home.path().join(id2);
    home.ok(&["exec", id2, "--", "sh", "-c", "echo kept > /tmp/kept"]);
    assert!(!processes_mentioning(&vm_dir).is_empty(), "second VM runs");
    assert!(home.signal_daemons("TERM"), "the daemon did not exit");
    assert!(!home.socket().exists(), "the socket is left behind");
    assert!(
        !processes_mentioning(&vm_dir).is_empty(),
        "the VM did not outlive its server"
    );
    let table = home.ok(&["ls"]);
    let line = ls_line(&table, id2).unwrap_or_else(|| panic!("not adopted:\n{table}"));
    assert_eq!(line.get(1).map(String::as_str), Some("running"), "{line:?}");
    assert_eq!(home.ok(&["exec", id2, "--", "cat", "/tmp/kept"]), "kept\n");
    home.ok(&["kill", id2]);
    assert!(
        wait_until(Duration::from_secs(20), || processes_mentioning(&vm_dir)
            .is_empty()),
        "VM processes remain: {:?}",
        processes_mentioning(&vm_dir)
    );
    assert!(home.signal_daemons("TERM"), "the daemon did not exit");
    assert!(
        processes_mentioning(home.path()).is_empty(),
        "processes remain: {:?}",
        processes_mentioning(home.path())
    );
    assert!(!vm_dir.exists(), "the second VM's state directory remains");
}

#[test]
fn a_sandbox_paused_to_disk_survives_a_killed_daemon_and_forks() {
    let home = DaemonHome::new();
    let id = home.ok(&["create", "--no-image", "--memory", "256"]);
    let id = id.trim().to_owned();
    // A file, and a program that keeps running in the background. It
    // renames each count into place: a `cat` between a truncating write's
    // open and its write would read nothing.
    home.ok(&[
        "exec",
        &id,
        "--",
        "sh",
        "-c",
        "echo kept >/tmp/kept; setsid sh -c 'i=0; while :; do echo $i >/tmp/count.new; \
         mv /tmp/count.new /tmp/count; i=$((i+1)); sleep 0.1; done' </dev/null >/dev/null 2>&1 &",
    ]);
    home.ok(&["pause", "--to-disk", &id]);
    let table = home.ok(&["ls"]);
    assert_eq!(ls_line(&table, &id).unwrap()[1], "on-disk", "{table}");
    let vm_dir = home.path().join(&id);
    assert!(
        processes_mentioning(&vm_dir).is_empty(),
        "QEMU still runs for a sandbox on disk"
    );

    // The daemon dies without a chance to clean up; the next call starts
    // a new one, which finds the sandbox on disk and restores it.
    assert!(home.signal_daemons("KILL"), "the daemon did not die");
    let table = home.ok(&["ls"]);
    assert_eq!(ls_line(&table, &id).unwrap()[1], "on-disk", "{table}");
    assert_eq!(home.ok(&["exec", &id, "--", "cat", "/tmp/kept"]), "kept\n");
    let count = || -> u64 {
        home.ok(&["exec", &id, "--", "cat", "/tmp/count"])
            .trim()
            .parse()
            .expect("a count")
    };
    let first = count();
    std::thread::sleep(Duration::from_secs(1));
    assert!(count() > first, "the background program stopped");
    let table = home.ok(&["ls"]);
    assert_eq!(ls_line(&table, &id).unwrap()[1], "running", "{table}");

    // Fork into two: each child has the file and its own name.
    let children = home.ok(&["fork", &id, "-n", "2"]);
    let children: Vec<&str> = children.lines().collect();
    assert_eq!(children.len(), 2, "{children:?}");
    for child in &children {
        assert_ne!(*child, id);
        assert_eq!(
            home.ok(&["exec", child, "--", "cat", "/tmp/kept"]),
            "kept\n"
        );
        assert_eq!(home.ok(&["exec", child, "--", "hostname"]).trim(), *child);
    }

    // Saved again, then killed: its files go.
    home.ok(&["pause", "--to-disk", &id]);
    assert!(home.saved_dir().join(&id).exists());
    home.ok(&["kill", &id]);
    assert!(!home.saved_dir().join(&id).exists(), "saved files left");
    let refused = sandbox(&home, &["exec", &id, "--", "true"], None);
    assert!(!refused.status.success());
}

#[test]
fn serve_with_a_pool_hands_out_a_frozen_sandbox() {
    let home = DaemonHome::new();
    let mut daemon = Command::new(airlock_bin())
        .args(["serve", "--pool", "1", "--max", "3", "--socket"])
        .arg(home.socket())
        .env("AIRLOCK_STATE_DIR", home.path())
        .env("AIRLOCK_SAVED_DIR", home.saved_dir())
        .env("AIRLOCK_SERVER_DIR", home.server_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(home.path().join("daemon.log")).expect("log"))
        .spawn()
        .expect("airlock serve");
    // The pool's member: a QEMU, frozen (SIGSTOP), whose sandbox nobody
    // has asked for yet.
    let frozen = |name: &str| {
        processes_mentioning(&home.path().join(name))
            .iter()
            .any(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .ok()
                    .and_then(|stat| {
                        stat.rsplit_once(") ")
                            .map(|(_, rest)| rest.starts_with('T'))
                    })
                    .unwrap_or(false)
            })
    };
    let vms = || {
        std::fs::read_dir(home.path())
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|name| name.starts_with("sandbox-"))
                    .filter(|name| !processes_mentioning(&home.path().join(name)).is_empty())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    assert!(
        wait_until(Duration::from_secs(120), || {
            let vms = vms();
            vms.len() == 1 && frozen(&vms[0])
        }),
        "the pool did not fill: {:?}",
        vms()
    );
    let member = vms().remove(0);
    assert!(
        ls_line(&home.ok(&["ls"]), &member).is_none(),
        "a pool member is listed"
    );

    // A create with no options takes it.
    let id = home.ok(&["create"]).trim().to_owned();
    assert_eq!(id, member, "daemon log:\n{}", home.daemon_log());
    assert_eq!(home.ok(&["exec", &id, "--", "echo", "pooled"]), "pooled\n");
    // And the pool refills beside it.
    assert!(
        wait_until(Duration::from_secs(120), || vms().len() == 2),
        "the pool did not refill: {:?}",
        vms()
    );
    // A create with other options boots its own.
    let other = home.ok(&["create", "--no-image", "--memory", "256"]);
    assert_ne!(other.trim(), id);
    let _ = Command::new("kill")
        .args(["-TERM", &daemon.id().to_string()])
        .status();
    let _ = daemon.wait();
}

/// What a program sees of its limits and privilege: its cgroup's
/// `memory.max`, its no_new_privs flag and its capabilities.
const LIMITS_AND_PRIVILEGE: &str = "cg=/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup); \
     echo \"memory.max $(cat $cg/memory.max)\"; \
     grep -E '^(NoNewPrivs|CapEff|CapBnd):' /proc/self/status";

#[test]
fn sandbox_exec_applies_limits_and_privilege_as_run_does() {
    let home = DaemonHome::new();
    let id = home.ok(&["create", "--no-image", "--memory", "256"]);
    let id = id.trim();
    let options = ["--limit-memory", "64M", "--privileged"];
    let script = ["--", "sh", "-c", LIMITS_AND_PRIVILEGE];

    let exec = home.ok(&[&["exec", id][..], &options, &script].concat());
    assert!(
        exec.lines().any(|l| l == "memory.max 67108864"),
        "the limit did not apply:\n{exec}"
    );
    assert!(
        exec.lines().any(|l| l == "NoNewPrivs:\t0"),
        "not privileged:\n{exec}"
    );

    // Exactly what `airlock run` gives a program with the same options.
    let run = Command::new(airlock_bin())
        .args(["run", "--no-image", "--memory", "256"])
        .args(options)
        .args(script)
        .env("AIRLOCK_STATE_DIR", home.path())
        .stdin(Stdio::null())
        .output()
        .expect("run airlock");
    assert!(
        run.status.success(),
        "airlock run failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&run.stdout), exec);

    // Without them: no limit of its own, no_new_privs, fewer capabilities.
    let plain = home.ok(&[&["exec", id][..], &script].concat());
    assert!(
        !plain.contains("67108864") && plain.lines().any(|l| l == "NoNewPrivs:\t1"),
        "{plain}"
    );
    let caps = |text: &str| {
        let line = text.lines().find(|l| l.starts_with("CapBnd:"));
        line.map(str::to_owned)
    };
    assert_ne!(caps(&plain), caps(&exec), "{plain}\n{exec}");

    // Past the limit the guest's OOM killer ends the program, reported as
    // `run` reports it.
    let hog = "BEGIN { s = sprintf(\"%1048576s\", \"\"); while (1) a[n++] = s n }";
    let out = sandbox(
        &home,
        &["exec", id, "--limit-memory", "32M", "--", "awk", hog],
        None,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(137), "stderr: {stderr}");
    assert!(stderr.contains("ran out of memory"), "stderr: {stderr}");
}

#[test]
fn sandbox_exec_forwards_ctrl_c_as_run_does() {
    let home = DaemonHome::new();
    let id = home.ok(&["create", "--no-image", "--memory", "256"]);
    let mut command = Command::new(airlock_bin());
    command
        .args([
            "sandbox",
            "exec",
            id.trim(),
            "--",
            "sh",
            "-c",
            TRAPPING_SCRIPT,
        ])
        .env("AIRLOCK_STATE_DIR", home.path());
    let out = interrupt_when_ready(command);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "stderr: {stderr}");
    assert!(stderr.contains("interrupting the command"), "{stderr}");
}
