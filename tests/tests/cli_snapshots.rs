//! Named snapshots as a user types them, on real VMs: `airlock sandbox
//! snapshot`, `airlock snapshot ls|rm` and `airlock sandbox create
//! --snapshot`, from a remote key (`AIRLOCK_HOST`, `AIRLOCK_API_KEY`) and
//! from the owner on the local socket, against one private server. A
//! snapshot of a sandbox with a file starts a clone that reads the file
//! under its own name; `ls` lists it with the sandboxes started from it;
//! `rm` removes the name while the clone runs on; an unknown name and
//! another key's snapshot are refused as not found.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::Output;
use std::time::Duration;

use airlock_tests::{DaemonHome, TlsServer};

/// How long one client may take: a boot under TCG on a loaded host.
const LIMIT: Duration = Duration::from_secs(300);

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `airlock ARGS` as a remote client with `key`.
fn remote(home: &DaemonHome, server: &TlsServer, key: &str, args: &[&str]) -> Output {
    let mut client = home.client(args).limit(LIMIT);
    for (name, value) in server.env() {
        client = client.env(&name, &value);
    }
    client.env("AIRLOCK_API_KEY", key).output()
}

/// Requires success of `out`; returns its stdout.
fn ok(home: &DaemonHome, args: &[&str], out: Output) -> String {
    assert!(
        out.status.success(),
        "airlock {args:?}: {}\nserver log:\n{}",
        text(&out.stderr),
        home.daemon_log()
    );
    text(&out.stdout)
}

/// Like [`remote`], requiring success; returns stdout.
fn remote_ok(home: &DaemonHome, server: &TlsServer, key: &str, args: &[&str]) -> String {
    ok(home, args, remote(home, server, key, args))
}

/// `airlock ARGS` as the owner on the local socket, requiring success.
fn local_ok(home: &DaemonHome, args: &[&str]) -> String {
    ok(home, args, home.client(args).limit(LIMIT).output())
}

/// Asserts that `out` failed with airlock's code and a message containing
/// `needle`.
fn refused(out: &Output, needle: &str) {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(stderr.contains(needle), "{needle:?} not in {stderr:?}");
}

/// `airlock key create NAME` on the owner's socket; the key.
fn make_key(home: &DaemonHome, name: &str) -> String {
    let out = home.airlock(&["key", "create", name]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout).lines().last().unwrap().trim().to_owned()
}

/// The `snapshot ls` line of `name`, split into columns.
fn ls_line(table: &str, name: &str) -> Option<Vec<String>> {
    table
        .lines()
        .map(|line| {
            line.split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .find(|columns| columns.first().map(String::as_str) == Some(name))
}

#[test]
fn a_snapshot_is_taken_listed_started_from_and_removed() {
    let home = DaemonHome::new();
    let server = TlsServer::start(&home, &[]);
    let alice = make_key(&home, "alice");
    let bob = make_key(&home, "bob");
    let create = ["sandbox", "create", "--no-image", "--memory", "256"];
    let source = remote_ok(&home, &server, &alice, &create).trim().to_owned();
    remote_ok(
        &home,
        &server,
        &alice,
        &[
            "sandbox",
            "exec",
            &source,
            "--",
            "sh",
            "-c",
            "echo kept > /tmp/note",
        ],
    );

    // Taken: its name on stdout, how long the sandbox stopped on stderr.
    let args = ["sandbox", "snapshot", &source, "--name", "web"];
    let out = remote(&home, &server, &alice, &args);
    assert_eq!(ok(&home, &args, out.clone()), "web\n");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!("snapshot web of {source}")) && stderr.contains(" ms"),
        "{stderr}"
    );

    // A clone of it reads the file, under its own name.
    let clone = remote_ok(
        &home,
        &server,
        &alice,
        &["sandbox", "create", "--snapshot", "web"],
    )
    .trim()
    .to_owned();
    assert_ne!(clone, source);
    let read = ["sandbox", "exec", &clone, "--", "cat", "/tmp/note"];
    assert_eq!(remote_ok(&home, &server, &alice, &read), "kept\n");
    let named = ["sandbox", "exec", &clone, "--", "hostname"];
    assert_eq!(remote_ok(&home, &server, &alice, &named).trim(), clone);

    // Listed with its source, size, stop and the clone started from it.
    let table = remote_ok(&home, &server, &alice, &["snapshot", "ls"]);
    let line = ls_line(&table, "web").unwrap_or_else(|| panic!("web not listed:\n{table}"));
    assert_eq!(line.len(), 6, "{table}");
    assert_eq!(line[1].len(), 12, "an id prefix: {table}");
    assert_eq!(line[2], source, "{table}");
    assert!(line[3].ends_with('M') && line[3] != "0M", "{table}");
    assert!(line[4].ends_with("ms"), "{table}");
    assert_eq!(line[5], "1", "{table}");
    let json = remote_ok(&home, &server, &alice, &["snapshot", "ls", "--json"]);
    let listed: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(listed[0]["name"], "web", "{json}");
    assert_eq!(listed[0]["memory_mib"], 256, "{json}");

    // Without --name the server names it.
    let unnamed = remote_ok(&home, &server, &alice, &["sandbox", "snapshot", &source]);
    let unnamed = unnamed.trim();
    let hex = unnamed.strip_prefix("snapshot-").unwrap_or_default();
    assert!(
        hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()),
        "{unnamed}"
    );
    // A name taken is refused.
    let again = remote(
        &home,
        &server,
        &alice,
        &["sandbox", "snapshot", &source, "--name", "web"],
    );
    refused(&again, "a snapshot named web");

    // Another key's snapshot is not found: not listed, not started from,
    // not removed.
    let theirs = remote_ok(&home, &server, &bob, &["snapshot", "ls"]);
    assert!(ls_line(&theirs, "web").is_none(), "{theirs}");
    let start = ["sandbox", "create", "--snapshot", "web"];
    refused(
        &remote(&home, &server, &bob, &start),
        "no snapshot named web",
    );
    let rm = ["snapshot", "rm", "web"];
    refused(&remote(&home, &server, &bob, &rm), "no snapshot named web");
    // An unknown name, likewise.
    refused(
        &remote(
            &home,
            &server,
            &alice,
            &["sandbox", "create", "--snapshot", "nope"],
        ),
        "no snapshot named nope",
    );

    // The owner, on the local socket: a snapshot of its own, apart from
    // the key's.
    let args = ["sandbox", "snapshot", &source, "--name", "owners"];
    assert_eq!(local_ok(&home, &args), "owners\n");
    let table = local_ok(&home, &["snapshot", "ls"]);
    assert!(ls_line(&table, "owners").is_some(), "{table}");
    assert!(ls_line(&table, "web").is_none(), "{table}");
    let table = remote_ok(&home, &server, &alice, &["snapshot", "ls"]);
    assert!(ls_line(&table, "owners").is_none(), "{table}");
    assert_eq!(
        local_ok(&home, &["snapshot", "rm", "owners"]),
        "removed owners\n"
    );

    // Removed: gone from the list, no longer started from; the clone runs on.
    assert_eq!(
        remote_ok(&home, &server, &alice, &["snapshot", "rm", "web", unnamed]),
        format!("removed web\nremoved {unnamed}\n")
    );
    let table = remote_ok(&home, &server, &alice, &["snapshot", "ls"]);
    assert!(ls_line(&table, "web").is_none(), "{table}");
    refused(
        &remote(&home, &server, &alice, &start),
        "no snapshot named web",
    );
    assert_eq!(remote_ok(&home, &server, &alice, &read), "kept\n");
}
