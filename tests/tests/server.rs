//! The server as a remote user meets it, on real VMs: `airlock serve` with a
//! TLS listener, `airlock key create` on the owner's socket, and `airlock
//! sandbox` commands from "another machine" (`AIRLOCK_HOST`,
//! `AIRLOCK_API_KEY`, `AIRLOCK_CA_CERT`): what a key may do, what it is
//! refused, and a 1 GiB file through the API both ways.

#![allow(clippy::expect_used)]

use std::process::Output;
use std::time::Duration;

use airlock_tests::{sha256_hex, DaemonHome, TlsServer};

/// How long one client may take: a boot under TCG on a loaded host.
const LIMIT: Duration = Duration::from_secs(300);

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `airlock ARGS` as a remote client with `key` (or none).
fn remote(home: &DaemonHome, server: &TlsServer, key: Option<&str>, args: &[&str]) -> Output {
    let mut client = home.client(args).limit(LIMIT);
    for (name, value) in server.env() {
        client = client.env(&name, &value);
    }
    if let Some(key) = key {
        client = client.env("AIRLOCK_API_KEY", key);
    }
    client.output()
}

/// Like [`remote`], requiring success; returns stdout.
fn remote_ok(home: &DaemonHome, server: &TlsServer, key: &str, args: &[&str]) -> String {
    let out = remote(home, server, Some(key), args);
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
    let stdout = text(&out.stdout);
    let key = stdout.lines().last().unwrap_or_default().trim().to_owned();
    assert!(key.starts_with("ak_") && key.len() == 46, "{stdout:?}");
    key
}

/// Asserts that `out` failed with airlock's code and a message containing
/// `needle`.
fn refused(out: &Output, needle: &str) {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(stderr.contains(needle), "{needle:?} not in {stderr:?}");
}

#[test]
fn a_remote_key_creates_execs_and_copies_over_tls() {
    let home = DaemonHome::new();
    let server = TlsServer::start(&home, &[]);
    let key = make_key(&home, "alice", &[]);
    let id = remote_ok(
        &home,
        &server,
        &key,
        &["sandbox", "create", "--no-image", "--memory", "256"],
    );
    let id = id.trim();
    let out = remote_ok(
        &home,
        &server,
        &key,
        &[
            "sandbox",
            "exec",
            id,
            "--",
            "sh",
            "-c",
            "echo hi from $(hostname)",
        ],
    );
    assert_eq!(out, format!("hi from {id}\n"));
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("in.txt");
    std::fs::write(&file, b"over the wire\n").expect("write");
    let guest = format!("{id}:/tmp/in.txt");
    remote_ok(
        &home,
        &server,
        &key,
        &["sandbox", "cp", file.to_str().expect("utf-8"), &guest],
    );
    let back = dir.path().join("back.txt");
    remote_ok(
        &home,
        &server,
        &key,
        &["sandbox", "cp", &guest, back.to_str().expect("utf-8")],
    );
    assert_eq!(std::fs::read(&back).expect("read"), b"over the wire\n");
    let listed = remote_ok(&home, &server, &key, &["sandbox", "ls"]);
    assert!(listed.contains(id), "{listed}");
    remote_ok(&home, &server, &key, &["sandbox", "kill", id]);
}

/// The common names of the roots the guest's Python trusts by default.
const PYTHON_ROOTS: &str = "import ssl; \
    print('\\n'.join(dict(n[0] for n in c['subject']).get('commonName', '') \
    for c in ssl.create_default_context().get_ca_certs()))";

#[test]
fn a_ca_cert_given_to_a_remote_create_is_trusted_in_the_guest() {
    let home = DaemonHome::new();
    let server = TlsServer::start(&home, &[]);
    let key = make_key(&home, "alice", &[]);
    let ca = server.ca.to_str().expect("utf-8");
    let roots_of = |extra: &[&str]| {
        let mut args = vec!["sandbox", "create", "--memory", "512"];
        args.extend_from_slice(extra);
        let id = remote_ok(&home, &server, &key, &args).trim().to_owned();
        let roots = remote_ok(
            &home,
            &server,
            &key,
            &["sandbox", "exec", &id, "--", "python3", "-c", PYTHON_ROOTS],
        );
        remote_ok(&home, &server, &key, &["sandbox", "kill", &id]);
        roots
    };
    let with = roots_of(&["--ca-cert", ca]);
    assert!(
        with.lines().any(|cn| cn == "airlock test CA"),
        "the guest's Python does not trust the CA given: {with}"
    );
    // Its own roots stay.
    assert!(with.lines().count() > 50, "{with}");
    let without = roots_of(&[]);
    assert!(
        !without.lines().any(|cn| cn == "airlock test CA"),
        "a sandbox created without the CA trusts it: {without}"
    );
    // A file that is not a certificate is refused before the request.
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("key.pem");
    std::fs::write(
        &bad,
        "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
    )
    .expect("write");
    let out = remote(
        &home,
        &server,
        Some(&key),
        &[
            "sandbox",
            "create",
            "--ca-cert",
            bad.to_str().expect("utf-8"),
        ],
    );
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("private key"), "{stderr}");
}

#[test]
fn no_key_a_wrong_key_and_a_removed_key_are_refused() {
    let home = DaemonHome::new();
    let server = TlsServer::start(&home, &[]);
    let key = make_key(&home, "temp", &[]);
    refused(
        &remote(&home, &server, None, &["sandbox", "ls"]),
        "no API key",
    );
    let wrong = format!("ak_{}", "Z".repeat(43));
    refused(
        &remote(&home, &server, Some(&wrong), &["sandbox", "ls"]),
        "an unknown or removed API key",
    );
    remote_ok(&home, &server, &key, &["sandbox", "ls"]);
    let out = home.airlock(&["key", "rm", "temp"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    refused(
        &remote(&home, &server, Some(&key), &["sandbox", "ls"]),
        "an unknown or removed API key",
    );
    // The failures were logged, the keys never.
    let log = home.daemon_log();
    assert!(log.contains("authentication failed"), "{log}");
    assert!(
        !log.contains(&key[3..]) && !log.contains(&wrong[3..]),
        "a key in the log"
    );
}

#[test]
fn two_keys_cannot_see_or_touch_each_others_sandboxes() {
    let home = DaemonHome::new();
    let server = TlsServer::start(&home, &[]);
    let alice = make_key(&home, "alice", &[]);
    let bob = make_key(&home, "bob", &[]);
    let id = remote_ok(
        &home,
        &server,
        &alice,
        &["sandbox", "create", "--no-image", "--memory", "256"],
    );
    let id = id.trim();
    let not_found = format!("no sandbox {id}");
    let listed = remote_ok(&home, &server, &bob, &["sandbox", "ls", "--json"]);
    assert_eq!(listed.trim(), "[]", "bob lists alice's sandbox: {listed}");
    let dir = tempfile::tempdir().expect("tempdir");
    let host = dir.path().join("x");
    std::fs::write(&host, b"x").expect("write");
    let guest = format!("{id}:/tmp/x");
    for argv in [
        vec!["sandbox", "exec", id, "--", "true"],
        vec!["sandbox", "cp", host.to_str().expect("utf-8"), &guest],
        vec!["sandbox", "cp", &guest, host.to_str().expect("utf-8")],
        vec!["sandbox", "pause", id],
        vec!["sandbox", "kill", id],
    ] {
        refused(&remote(&home, &server, Some(&bob), &argv), &not_found);
    }
    // Alice's sandbox is as it was.
    let out = remote_ok(
        &home,
        &server,
        &alice,
        &["sandbox", "exec", id, "--", "echo", "still mine"],
    );
    assert_eq!(out, "still mine\n");
}

#[test]
fn a_key_over_its_quota_is_refused_with_the_figures() {
    let home = DaemonHome::new();
    let server = TlsServer::start(&home, &[]);
    let key = make_key(&home, "small", &["--max-sandboxes", "1"]);
    let id = remote_ok(
        &home,
        &server,
        &key,
        &["sandbox", "create", "--no-image", "--memory", "256"],
    );
    refused(
        &remote(
            &home,
            &server,
            Some(&key),
            &["sandbox", "create", "--no-image", "--memory", "256"],
        ),
        "may hold 1 sandboxes and holds 1",
    );
    remote_ok(&home, &server, &key, &["sandbox", "kill", id.trim()]);
    remote_ok(
        &home,
        &server,
        &key,
        &["sandbox", "create", "--no-image", "--memory", "256"],
    );
}

#[test]
fn a_gib_file_goes_up_and_down_through_the_api_unchanged() {
    let home = DaemonHome::new();
    let server = TlsServer::start(&home, &[]);
    let key = make_key(&home, "bulk", &[]);
    let id = remote_ok(
        &home,
        &server,
        &key,
        &["sandbox", "create", "--no-image", "--memory", "2560"],
    );
    let id = id.trim();
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("big.bin");
    // 1 GiB of bytes that are not all alike, written in 4 MiB pieces.
    {
        use std::io::Write;
        let mut out = std::io::BufWriter::new(std::fs::File::create(&file).expect("create"));
        let mut block = vec![0u8; 4 << 20];
        for round in 0u32..256 {
            for (i, byte) in block.iter_mut().enumerate() {
                *byte = (i as u32)
                    .wrapping_mul(2_654_435_761)
                    .wrapping_add(round)
                    .to_le_bytes()[1];
            }
            out.write_all(&block).expect("write");
        }
    }
    let expected = {
        use sha2::Digest;
        use std::io::Read;
        let mut hash = sha2::Sha256::new();
        let mut input = std::fs::File::open(&file).expect("open");
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = input.read(&mut buf).expect("read");
            if n == 0 {
                break;
            }
            hash.update(&buf[..n]);
        }
        hash.finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let guest = format!("{id}:/tmp/big.bin");
    remote_ok(
        &home,
        &server,
        &key,
        &["sandbox", "cp", file.to_str().expect("utf-8"), &guest],
    );
    let in_guest = remote_ok(
        &home,
        &server,
        &key,
        &["sandbox", "exec", id, "--", "sha256sum", "/tmp/big.bin"],
    );
    assert!(
        in_guest.starts_with(&expected),
        "guest {in_guest} host {expected}"
    );
    let back = dir.path().join("back.bin");
    remote_ok(
        &home,
        &server,
        &key,
        &["sandbox", "cp", &guest, back.to_str().expect("utf-8")],
    );
    std::fs::remove_file(&file).expect("remove");
    let data = std::fs::read(&back).expect("read back");
    assert_eq!(data.len(), 1 << 30);
    assert_eq!(sha256_hex(&data), expected);
}

/// A client of the TLS server with `key`, through the Rust client crate.
async fn api_client(server: &TlsServer, key: &str) -> airlock_client::Client {
    airlock_client::Endpoint::remote(
        &format!("https://localhost:{}", server.port),
        Some(key.to_owned()),
        Some(server.ca.clone()),
    )
    .expect("endpoint")
    .connect()
    .await
    .expect("connect")
}

#[test]
fn bad_input_is_refused_by_field_and_the_server_serves_on() {
    use airlock_client::api;
    let home = DaemonHome::new();
    let server = TlsServer::start(&home, &[]);
    let key = make_key(&home, "careless", &[]);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let client = api_client(&server, &key).await;
        let field = |status: tonic::Status| {
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
            airlock_client::reason::field_of(&status).map(str::to_owned)
        };
        let mut sandboxes = client.sandboxes();
        let bad_creates = [
            (
                api::CreateSandboxRequest {
                    memory_mib: 1,
                    no_image: true,
                    ..Default::default()
                },
                "memory_mib",
            ),
            (
                api::CreateSandboxRequest {
                    no_image: true,
                    allow_net: vec!["not a rule!".into()],
                    ..Default::default()
                },
                "allow_net",
            ),
            (
                api::CreateSandboxRequest {
                    no_image: true,
                    metadata: [("k y".into(), "v".into())].into(),
                    ..Default::default()
                },
                "metadata",
            ),
        ];
        for (request, expected) in bad_creates {
            let status = sandboxes.create(request).await.expect_err("refused");
            assert_eq!(field(status).as_deref(), Some(expected));
        }
        let id = sandboxes
            .create(api::CreateSandboxRequest {
                no_image: true,
                memory_mib: 256,
                ..Default::default()
            })
            .await
            .expect("create")
            .into_inner()
            .sandbox_id;
        let bad_start = client
            .start(api::StartProcess {
                sandbox_id: id.clone(),
                argv: vec!["true".into()],
                cwd: "relative/dir".into(),
                ..Default::default()
            })
            .await
            .expect_err("refused");
        assert_eq!(
            field(bad_start.status().expect("a status").clone()).as_deref(),
            Some("start.cwd")
        );
        let missing = client
            .start(api::StartProcess {
                sandbox_id: id.clone(),
                argv: vec!["no-such-program".into()],
                ..Default::default()
            })
            .await
            .expect_err("refused");
        assert_eq!(missing.code(), Some(tonic::Code::NotFound));
        assert_eq!(missing.reason(), Some(api::ErrorReason::GuestNotFound));
        let bad_path = client
            .files()
            .stat(api::StatRequest {
                sandbox_id: id.clone(),
                path: "etc/passwd".into(),
            })
            .await
            .expect_err("refused");
        assert_eq!(field(bad_path).as_deref(), Some("path"));
        // The same server, the same sandbox, answering.
        let mut stream = client
            .start(api::StartProcess {
                sandbox_id: id.clone(),
                argv: vec!["echo".into(), "still serving".into()],
                ..Default::default()
            })
            .await
            .expect("start");
        let mut out = Vec::new();
        while let Some(event) = stream.next_event().await.expect("events") {
            if let api::process_event::Event::Stdout(o) = event {
                out.extend_from_slice(&o.data);
            }
        }
        assert_eq!(out, b"still serving\n");
    });
}

/// `count` connections from `id` to 192.0.2.9:80, which no rule allows.
fn refused_connections(home: &DaemonHome, server: &TlsServer, key: &str, id: &str, count: u32) {
    let script = format!(
        "import socket\n\
         for _ in range({count}):\n\
         \x20   s = socket.create_connection(('192.0.2.9', 80), timeout=30)\n\
         \x20   s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n'); print(s.recv(100).split(b'\\r\\n')[0].decode())"
    );
    let out = remote_ok(
        home,
        server,
        key,
        &["sandbox", "exec", id, "--", "python3", "-c", &script],
    );
    assert_eq!(
        out.lines().filter(|l| l.contains(" 403 ")).count(),
        count as usize,
        "{out}"
    );
}

/// `id`'s audit as `(seq, at_unix_ms, destination and verdict)`.
fn audit(home: &DaemonHome, server: &TlsServer, key: &str, id: &str) -> Vec<(u64, u64, String)> {
    let listing = remote_ok(home, server, key, &["sandbox", "net", id, "--json"]);
    let json: serde_json::Value = serde_json::from_str(&listing).expect("JSON");
    json["audit"]
        .as_array()
        .expect("an audit")
        .iter()
        .map(|r| {
            (
                r["seq"].as_u64().unwrap_or_default(),
                r["at_unix_ms"].as_u64().unwrap_or_default(),
                format!(
                    "{} {}:{} {}",
                    r["protocol"].as_str().unwrap_or_default(),
                    r["addr"]
                        .as_str()
                        .or(r["name"].as_str())
                        .unwrap_or_default(),
                    r["port"],
                    r["verdict"].as_str().unwrap_or_default()
                ),
            )
        })
        .collect()
}

/// The counter a background loop in `id` has written.
fn count(home: &DaemonHome, server: &TlsServer, key: &str, id: &str) -> u64 {
    remote_ok(
        home,
        server,
        key,
        &["sandbox", "exec", id, "--", "cat", "/tmp/count"],
    )
    .trim()
    .parse()
    .expect("a count")
}

#[test]
fn a_server_killed_with_sigkill_is_replaced_by_one_that_adopts_its_sandboxes() {
    let home = DaemonHome::new();
    let ingress = ["--ingress", "127.0.0.1:0"];
    let mut server = TlsServer::start(&home, &ingress);
    let key = make_key(&home, "alice", &[]);
    let other = make_key(&home, "bob", &[]);
    // One sandbox counts in the background, with a label and a rule; the
    // other holds files in /root (the default image).
    let counter = remote_ok(
        &home,
        &server,
        &key,
        &[
            "sandbox",
            "create",
            "--no-image",
            "--memory",
            "256",
            "--metadata",
            "role=counter",
            "--allow-net",
            "192.0.2.1:80",
        ],
    );
    let counter = counter.trim().to_owned();
    remote_ok(
        &home,
        &server,
        &key,
        &[
            "sandbox",
            "exec",
            &counter,
            "--",
            "sh",
            "-c",
            "setsid sh -c 'i=0; while :; do echo $i >/tmp/count.new; mv /tmp/count.new /tmp/count; \
             i=$((i+1)); sleep 0.1; done' </dev/null >/dev/null 2>&1 &",
        ],
    );
    let files = remote_ok(
        &home,
        &server,
        &key,
        &[
            "sandbox",
            "create",
            "--memory",
            "512",
            "--metadata",
            "role=files",
            "--allow-net",
            "192.0.2.1:80",
        ],
    );
    let files = files.trim().to_owned();
    // Refused connections make audit records, kept with the sandbox.
    refused_connections(&home, &server, &key, &files, 3);
    let audit_before = audit(&home, &server, &key, &files);
    assert!(audit_before.len() >= 3, "{audit_before:?}");
    remote_ok(
        &home,
        &server,
        &key,
        &[
            "sandbox",
            "exec",
            &files,
            "--",
            "sh",
            "-c",
            "echo precious > /root/work.txt",
        ],
    );
    std::thread::sleep(Duration::from_millis(500));
    let before = count(&home, &server, &key, &counter);
    let token = |server: &TlsServer| {
        let exposed = remote_ok(
            &home,
            server,
            &key,
            &["sandbox", "expose", &files, "8000", "--json"],
        );
        let exposed: serde_json::Value = serde_json::from_str(&exposed).expect("JSON");
        exposed["token"].as_str().expect("a token").to_owned()
    };
    let token_before = token(&server);
    assert!(token_before.starts_with("at_"), "{token_before}");

    // kill -9: no chance to clean up. The VMs run on without a server.
    server.signal("KILL");
    for id in [&counter, &files] {
        assert!(
            !airlock_tests::processes_mentioning(&home.path().join(id)).is_empty(),
            "{id}'s VM died with its server"
        );
    }
    std::thread::sleep(Duration::from_secs(2));
    let mut server = TlsServer::start(&home, &ingress);

    // Both are back, with their owner and labels, and the traffic token.
    assert_eq!(token(&server), token_before, "the traffic token changed");
    let listed = remote_ok(&home, &server, &key, &["sandbox", "ls", "--json"]);
    let listed: serde_json::Value = serde_json::from_str(&listed).expect("JSON");
    let entries = listed.as_array().expect("a list");
    assert_eq!(entries.len(), 2, "{listed}");
    for (id, role) in [(&counter, "counter"), (&files, "files")] {
        let entry = entries
            .iter()
            .find(|e| e["id"] == id.as_str())
            .unwrap_or_else(|| panic!("{id} not listed: {listed}"));
        assert_eq!(entry["state"], "running", "{entry}");
        assert_eq!(entry["metadata"]["role"], role, "{entry}");
    }
    let strangers = remote_ok(&home, &server, &other, &["sandbox", "ls", "--json"]);
    assert_eq!(strangers.trim(), "[]", "bob sees alice's adopted sandboxes");
    // The counter went on while no server was there, and goes on.
    let after = count(&home, &server, &key, &counter);
    assert!(
        after > before + 10,
        "the counter stalled: {before} then {after}"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        count(&home, &server, &key, &counter) > after,
        "the counter stopped"
    );
    assert_eq!(
        remote_ok(
            &home,
            &server,
            &key,
            &["sandbox", "exec", &files, "--", "cat", "/root/work.txt"]
        ),
        "precious\n"
    );
    // The audit made before the kill is back, in order, and goes on.
    let audit_after = audit(&home, &server, &key, &files);
    assert_eq!(
        audit_after[..audit_before.len().min(audit_after.len())],
        audit_before[..],
        "the audit before the kill"
    );
    refused_connections(&home, &server, &key, &files, 1);
    let audit_now = audit(&home, &server, &key, &files);
    let last = audit_before.last().map_or(0, |record| record.0);
    let new: Vec<_> = audit_now.iter().filter(|r| r.0 > last).collect();
    assert!(!new.is_empty(), "{audit_now:?}");
    assert_eq!(new[0].0, last + 1, "numbering goes on: {audit_now:?}");
    assert!(
        new.iter().any(|r| r.2.contains("192.0.2.9:80")),
        "{audit_now:?}"
    );
    let seqs: Vec<u64> = audit_now.iter().map(|r| r.0).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
    // The network policy is in force again.
    let net = remote_ok(
        &home,
        &server,
        &key,
        &["sandbox", "net", &counter, "--json"],
    );
    let net: serde_json::Value = serde_json::from_str(&net).expect("JSON");
    assert_eq!(net["rules"], serde_json::json!(["192.0.2.1:80"]), "{net}");
    // And they end as any other.
    for id in [&counter, &files] {
        remote_ok(&home, &server, &key, &["sandbox", "kill", id]);
    }
    server.signal("TERM");
}
