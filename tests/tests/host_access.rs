//! The host is no key's to reach (issue #51, item 1), on real VMs through
//! a real server: `airlock serve --host-access` with a TLS listener and two
//! keys. A key's rule of the host's loopback or own address is refused at
//! create and at `Network.ChangePolicy`, naming the field and why; a key's
//! sandbox allowed `0.0.0.0/0` still reaches neither a TCP server on the
//! host's loopback nor the host's own address, nor a name the host
//! resolves to loopback, each refusal in its audit, while another key is
//! served; and the owner, whose sandboxes the server lets reach the host,
//! reaches the loopback server.

#![allow(clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{IpAddr, TcpListener};
use std::process::Output;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use airlock_tests::{DaemonHome, TlsServer};

/// How long one client may take: a boot under TCG on a loaded host.
const LIMIT: Duration = Duration::from_secs(300);

/// What the host's service answers.
const ANSWER: &str = "HTTP/1.0 200 OK\r\n\r\nhost-service\n";

/// A guest program: each argument `connect:HOST:PORT` asks the sandbox's
/// HTTP proxy for a tunnel (the way a guest names the host's loopback, its
/// own loopback being its own), `direct:IP:PORT` connects straight to an
/// address and sends a request; one line of what came back each.
const PROBE: &str = r#"
import os, socket, sys
proxy = os.environ["HTTP_PROXY"].split("//")[1].rstrip("/")
phost, pport = proxy.rsplit(":", 1)
for arg in sys.argv[1:]:
    how, target = arg.split(":", 1)
    try:
        if how == "connect":
            s = socket.create_connection((phost, int(pport)), timeout=30)
            s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
            head = s.recv(400)
            if b" 200 " in head.split(b"\r\n")[0]:
                s.sendall(b"GET / HTTP/1.0\r\n\r\n")
                head = s.recv(400)
        else:
            ip, port = target.rsplit(":", 1)
            s = socket.create_connection((ip, int(port)), timeout=30)
            s.sendall(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")
            head = s.recv(400)
        print(arg, "=>", head.decode(errors="replace").replace("\r\n", " | ") or "closed")
    except OSError as e:
        print(arg, "=>", "error", e)
"#;

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

/// `airlock ARGS` as the owner, on the server's Unix socket; stdout.
fn owner_ok(home: &DaemonHome, args: &[&str]) -> String {
    let out = home.client(args).limit(LIMIT).output();
    assert!(
        out.status.success(),
        "airlock {args:?}: {}\nserver log:\n{}",
        text(&out.stderr),
        home.daemon_log()
    );
    text(&out.stdout)
}

/// `airlock key create NAME` on the owner's socket; the key.
fn make_key(home: &DaemonHome, name: &str) -> String {
    let out = home.airlock(&["key", "create", name]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    stdout.lines().last().unwrap_or_default().trim().to_owned()
}

/// A TCP service on every address of the host (its loopback and its own
/// addresses), answering [`ANSWER`]; the port and how many it served.
fn host_service() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("0.0.0.0:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    let served = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&served);
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            counter.fetch_add(1, Ordering::SeqCst);
            let mut buf = [0u8; 512];
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(ANSWER.as_bytes());
        }
    });
    (port, served)
}

/// An IPv4 address of the host's own interfaces other than loopback.
fn own_address() -> IpAddr {
    airlock::network::host::own_addresses()
        .into_iter()
        .find(|addr| addr.is_ipv4() && !addr.is_loopback())
        .expect(
            "the host has a non-loopback IPv4 address (a test of the host's own address needs one)",
        )
}

/// The audit's refusals, as `(addr or name, verdict)`.
fn audit(listing: &str) -> Vec<(String, String)> {
    let json: serde_json::Value = serde_json::from_str(listing).expect("JSON");
    json["audit"]
        .as_array()
        .expect("an audit")
        .iter()
        .filter(|r| r["allowed"] == false)
        .map(|r| {
            let what = r["name"]
                .as_str()
                .or(r["addr"].as_str())
                .unwrap_or_default()
                .to_owned();
            (what, r["verdict"].as_str().unwrap_or_default().to_owned())
        })
        .collect()
}

#[test]
fn a_keys_sandbox_never_reaches_the_host_and_the_owners_may() {
    let home = DaemonHome::new();
    let mut server = TlsServer::start(&home, &["--host-access"]);
    let mallory = make_key(&home, "mallory");
    let bob = make_key(&home, "bob");
    let (port, served) = host_service();
    let own = own_address();
    let loopback_rule = format!("127.0.0.1/32:{port}");
    let own_rule = format!("{own}:{port}");

    // At create: a rule of the host's loopback, or of its own address.
    for rule in [loopback_rule.as_str(), "[::1]:22", own_rule.as_str()] {
        let out = remote(
            &home,
            &server,
            &mallory,
            &[
                "sandbox",
                "create",
                "--no-image",
                "--allow-net",
                "0.0.0.0/0",
                "--allow-net",
                rule,
            ],
        );
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "{rule} accepted");
        assert!(stderr.contains("allow_net[1]"), "{rule}: {stderr}");
        assert!(
            stderr.contains("airlock serve --host-access"),
            "{rule}: {stderr}"
        );
    }

    // A sandbox the world is open to, and a name the host resolves to its
    // loopback.
    let id = remote_ok(
        &home,
        &server,
        &mallory,
        &[
            "sandbox",
            "create",
            "--memory",
            "512",
            "--allow-net",
            "0.0.0.0/0",
            "--allow-net",
            "localhost",
        ],
    );
    let id = id.trim().to_owned();

    // Network.ChangePolicy as the issue reproduced it: refused, naming
    // the field and why.
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let client = airlock_client::Endpoint::remote(
            &format!("https://localhost:{}", server.port),
            Some(mallory.clone()),
            Some(server.ca.clone()),
        )
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
        for (allow, kind) in [
            (vec![loopback_rule.clone()], "the host's loopback"),
            (
                vec!["192.0.2.0/24".to_owned(), "169.254.169.254/32".to_owned()],
                "link-local",
            ),
            (vec![own_rule.clone()], "the host's own interfaces"),
        ] {
            let status = client
                .network()
                .change_policy(airlock_client::api::ChangePolicyRequest {
                    sandbox_id: id.clone(),
                    allow: allow.clone(),
                    deny: Vec::new(),
                })
                .await
                .expect_err("a rule of the host's is refused");
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
            let field = airlock_client::reason::field_of(&status).map(str::to_owned);
            let expected = format!("allow[{}]", allow.len() - 1);
            assert_eq!(field.as_deref(), Some(expected.as_str()), "{status:?}");
            assert!(status.message().contains(kind), "{status:?}");
        }
    });
    let rules = remote_ok(&home, &server, &mallory, &["sandbox", "net", &id, "--json"]);
    let rules: serde_json::Value = serde_json::from_str(&rules).expect("JSON");
    assert_eq!(
        rules["rules"],
        serde_json::json!(["0.0.0.0/0", "localhost"]),
        "nothing changed"
    );

    // From inside: the loopback through the proxy, the host's own address
    // directly and through the proxy, and a name resolving to loopback.
    let targets = [
        format!("connect:127.0.0.1:{port}"),
        format!("direct:{own}:{port}"),
        format!("connect:{own}:{port}"),
        format!("connect:localhost:{port}"),
    ];
    let mut argv = vec!["sandbox", "exec", &id, "--", "python3", "-c", PROBE];
    argv.extend(targets.iter().map(String::as_str));
    let probed = remote_ok(&home, &server, &mallory, &argv);
    let lines: Vec<&str> = probed.lines().collect();
    assert_eq!(lines.len(), targets.len(), "{probed}");
    for line in &lines {
        assert!(
            line.contains("403 airlock:") && !line.contains("host-service"),
            "reached the host: {line}\n{probed}"
        );
    }
    assert!(lines[0].contains("the host's loopback"), "{probed}");
    assert!(lines[1].contains("the host's own interfaces"), "{probed}");
    assert!(lines[3].contains("the host's loopback"), "{probed}");
    assert_eq!(
        served.load(Ordering::SeqCst),
        0,
        "the host's service was reached"
    );

    // Each refusal is in the audit, with why.
    let listing = remote_ok(&home, &server, &mallory, &["sandbox", "net", &id, "--json"]);
    let refusals = audit(&listing);
    let host_refusals: Vec<_> = refusals
        .iter()
        .filter(|(_, verdict)| verdict.contains("may not reach the host"))
        .collect();
    assert!(host_refusals.len() >= 4, "{refusals:?}");
    let own_text = own.to_string();
    for what in ["127.0.0.1", own_text.as_str(), "localhost"] {
        assert!(
            host_refusals.iter().any(|(w, _)| w == what),
            "no refusal of {what}: {refusals:?}"
        );
    }

    // Another key is served meanwhile, and sees none of it.
    assert_eq!(
        remote_ok(&home, &server, &bob, &["sandbox", "ls", "--json"]).trim(),
        "[]"
    );

    // The owner's sandbox, on a server started with --host-access, may
    // reach the host's loopback by a rule.
    let mine = owner_ok(
        &home,
        &[
            "sandbox",
            "create",
            "--memory",
            "512",
            "--allow-net",
            &loopback_rule,
        ],
    );
    let mine = mine.trim().to_owned();
    let target = format!("connect:127.0.0.1:{port}");
    let reached = owner_ok(
        &home,
        &[
            "sandbox", "exec", &mine, "--", "python3", "-c", PROBE, &target,
        ],
    );
    assert!(reached.contains("host-service"), "{reached}");
    assert_eq!(served.load(Ordering::SeqCst), 1);

    for (who, sandbox) in [(Some(&mallory), &id), (None, &mine)] {
        match who {
            Some(key) => drop(remote_ok(
                &home,
                &server,
                key,
                &["sandbox", "kill", sandbox],
            )),
            None => drop(owner_ok(&home, &["sandbox", "kill", sandbox])),
        }
    }
    server.signal("TERM");
}
