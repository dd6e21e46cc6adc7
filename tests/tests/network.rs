//! Network for sandboxed code, end to end: a real guest's programs reach
//! test servers on the host's loopback only as the host's policy allows,
//! and a secret reaches its upstream without entering the guest. Names
//! resolve through a fixed table (`*.test` → 127.0.0.1), and a CIDR rule
//! lets them resolve to loopback. The test servers' CA is the sandbox's
//! (`SandboxBuilder::ca_cert`), which the host's checks of secret-bound
//! servers use; a server under another CA is refused, and the audit says
//! why. One VM serves all the checks, in order:
//! some change the policy, and the last one breaks the guest's redirect.

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, OnceLock};

use airlock::{
    CaCert, HostAccess, NetProtocol, NetRule, NetworkOptions, NetworkPolicy, Refusal, Sandbox,
    Secret, StaticResolver, Verdict,
};
use airlock_tests::shared_vm::{Order, Suite};
use airlock_tests::tls_index::TlsIndex;
use airlock_tests::{stdout_of, testkit};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

/// The secret's value: it must reach the upstream and nothing in the guest.
const SECRET_VALUE: &str = "sk-live-0123456789abcdef-never-in-the-guest";

/// The sandbox's bound on open connections.
const MAX_CONNECTIONS: usize = 12;

/// The loopback servers the checks talk to.
#[derive(Debug)]
struct Servers {
    http: SocketAddr,
    https: SocketAddr,
    /// Every request head the servers received, in order.
    heads: Mutex<Vec<String>>,
    /// The test CA (PEM), for a guest program that checks the servers'
    /// own certificates.
    ca_pem: String,
}

static SERVERS: OnceLock<Arc<Servers>> = OnceLock::new();
/// A secret-bound server under a CA the sandbox is not given.
static UNTRUSTED: OnceLock<TlsIndex> = OnceLock::new();
/// Where the shared sandbox is saved when paused to disk.
static SAVED_DIR: OnceLock<tempfile::TempDir> = OnceLock::new();

fn servers() -> &'static Servers {
    SERVERS.get().expect("servers started in boot")
}

fn heads_containing(needle: &str) -> Vec<String> {
    let heads = servers().heads.lock().unwrap();
    heads
        .iter()
        .filter(|h| h.contains(needle))
        .cloned()
        .collect()
}

fn main() -> ExitCode {
    Suite::new(boot, Order::Sequential)
        .checks(airlock_tests::checks![
            an_allowed_name_resolves_and_a_refused_one_does_not,
            plain_http_to_an_allowed_name_works_directly_and_through_the_proxy,
            https_to_a_secret_bound_host_carries_the_real_secret,
            a_secret_bound_server_under_an_unknown_ca_is_refused_and_recorded,
            https_to_an_allowed_host_without_secrets_passes_through,
            a_placeholder_sent_to_another_host_is_blocked,
            a_code_context_gets_the_network_environment,
            a_wrong_server_name_for_an_allowed_address_is_refused,
            a_raw_address_and_a_refused_name_reach_nothing,
            loopback_needs_a_cidr_rule,
            a_connection_flood_is_bounded_and_recorded,
            a_malformed_handshake_or_an_endless_head_is_cut_off_and_recorded,
            the_secret_is_nowhere_in_the_guest,
            the_secret_is_not_in_a_snapshot_and_the_network_survives_a_resume,
            guest_root_removing_the_redirect_reaches_nothing_new,
        ])
        .run()
}

fn policy() -> NetworkPolicy {
    NetworkPolicy::new()
        .allow("api.test".parse().unwrap())
        .allow("plain.test".parse().unwrap())
        .allow("other.test".parse().unwrap())
        .allow("untrusted.test".parse().unwrap())
        .allow("127.0.0.1/32".parse().unwrap())
}

async fn boot() -> Sandbox {
    let (servers, test_ca) = start_servers().await;
    SERVERS.set(servers).expect("one boot");
    let untrusted = TlsIndex::start("untrusted.test").await;
    let untrusted = UNTRUSTED.get_or_init(|| untrusted);
    let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let resolver = StaticResolver::new()
        .with("api.test", loopback)
        .with("plain.test", loopback)
        .with("other.test", loopback)
        .with(&untrusted.name, loopback);
    let secret = Secret::new("API_KEY", SECRET_VALUE)
        .expect("secret")
        .host("api.test");
    let untrusted_secret = Secret::new("UNTRUSTED_KEY", "sk-for-the-untrusted-server")
        .expect("secret")
        .host(&untrusted.name);
    // The test servers are on the host's loopback.
    let options = NetworkOptions::new()
        .policy(policy())
        .host_access(HostAccess::Allowed)
        .resolver(Arc::new(resolver))
        .secret(secret)
        .secret(untrusted_secret)
        .max_connections(MAX_CONNECTIONS);
    let saved = SAVED_DIR.get_or_init(|| tempfile::tempdir().expect("saved dir"));
    match airlock_tests::builder()
        .image(airlock_tests::default_image())
        .saved_dir(saved.path())
        .network(options)
        .ca_cert(CaCert::from_der(test_ca.to_vec()).expect("the test CA"))
        .start()
        .await
    {
        Ok(sandbox) => sandbox,
        Err(error) => panic!("sandbox did not start: {}", airlock::error_chain(&error)),
    }
}

/// An HTTP server and an HTTPS server (for `api.test` and `other.test`,
/// signed by a test CA) on loopback that record each request head and
/// answer `ok <path>`.
async fn start_servers() -> (Arc<Servers>, rustls::pki_types::CertificateDer<'static>) {
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let https = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let issued = testkit::tls::issue("network test CA", &["api.test", "other.test"]);
    let servers = Arc::new(Servers {
        http: http.local_addr().unwrap(),
        https: https.local_addr().unwrap(),
        heads: Mutex::default(),
        ca_pem: issued.ca_pem.clone(),
    });
    let acceptor = issued.acceptor();

    let recorder = Arc::clone(&servers);
    tokio::spawn(async move {
        loop {
            let (stream, _) = http.accept().await.unwrap();
            tokio::spawn(answer(stream, Arc::clone(&recorder)));
        }
    });
    let recorder = Arc::clone(&servers);
    tokio::spawn(async move {
        loop {
            let (stream, _) = https.accept().await.unwrap();
            let (acceptor, recorder) = (acceptor.clone(), Arc::clone(&recorder));
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(stream).await {
                    answer(tls, recorder).await;
                }
            });
        }
    });
    (servers, issued.ca_der.into())
}

/// Reads request heads and answers each with `ok <request line>`.
async fn answer<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, servers: Arc<Servers>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end);
        let line = head.lines().next().unwrap_or_default().to_owned();
        servers.heads.lock().unwrap().push(head);
        let body = format!("ok {line}");
        let response = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: text/plain\r\n\r\n{body}",
            body.len()
        );
        if stream.write_all(response.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// Python in the guest; its stdout, trimmed.
async fn python(sandbox: &Sandbox, code: &str) -> String {
    let out = sandbox
        .exec(airlock::Command::new("python3").arg("-c").arg(code))
        .await
        .expect("python starts")
        .output()
        .await
        .expect("python output");
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(
        out.status.success(),
        "python failed ({:?}): {stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn refusals(sandbox: &Sandbox, name: Option<&str>) -> Vec<Refusal> {
    sandbox
        .network_audit()
        .expect("audit")
        .into_iter()
        .filter(|r| r.name.as_deref() == name)
        .filter_map(|r| match r.verdict {
            Verdict::Refused(refusal) => Some(refusal),
            Verdict::Allowed => None,
        })
        .collect()
}

async fn an_allowed_name_resolves_and_a_refused_one_does_not(sandbox: &Sandbox) {
    let out = python(
        sandbox,
        "import socket\n\
         print(socket.gethostbyname('api.test'))\n\
         try:\n    socket.gethostbyname('refused.test'); print('resolved')\n\
         except socket.gaierror as e: print('refused', e.errno)",
    )
    .await;
    let mut lines = out.lines();
    let addr: Ipv4Addr = lines.next().unwrap().parse().expect("an IPv4 address");
    assert!(
        ipnet_contains(addr),
        "api.test resolved to {addr}, not an address standing for it"
    );
    let refused = lines.next().unwrap_or_default();
    assert!(refused.starts_with("refused"), "{out}");
    let audit = sandbox.network_audit().unwrap();
    assert!(audit.iter().any(|r| r.protocol == NetProtocol::Dns
        && r.name.as_deref() == Some("refused.test")
        && !r.verdict.is_allowed()));
}

fn ipnet_contains(addr: Ipv4Addr) -> bool {
    let [a, b, ..] = addr.octets();
    a == 198 && (b == 18 || b == 19)
}

async fn plain_http_to_an_allowed_name_works_directly_and_through_the_proxy(sandbox: &Sandbox) {
    let port = servers().http.port();
    // urllib uses the proxy variables the sandbox sets; the opener built
    // with an empty ProxyHandler connects directly (the redirect).
    let out = python(
        sandbox,
        &format!(
            "import urllib.request as u\n\
             print(u.urlopen('http://plain.test:{port}/via-proxy').read().decode())\n\
             direct = u.build_opener(u.ProxyHandler({{}}))\n\
             print(direct.open('http://plain.test:{port}/direct').read().decode())"
        ),
    )
    .await;
    assert_eq!(
        out, "ok GET /via-proxy HTTP/1.1\nok GET /direct HTTP/1.1",
        "both requests reach the server in origin form"
    );
    let heads = heads_containing("/direct");
    assert!(heads[0].to_ascii_lowercase().contains("host: plain.test"));
}

async fn https_to_a_secret_bound_host_carries_the_real_secret(sandbox: &Sandbox) {
    let port = servers().https.port();
    let out = python(
        sandbox,
        &format!(
            "import os, urllib.request as u\n\
             key = os.environ['API_KEY']\n\
             print(key.startswith('airlock-placeholder-'))\n\
             r = u.Request('https://api.test:{port}/v1/models', headers={{'Authorization': 'Bearer ' + key}})\n\
             print(u.urlopen(r).read().decode())\n\
             direct = u.build_opener(u.ProxyHandler({{}}))\n\
             print(direct.open(r).read().decode())"
        ),
    )
    .await;
    assert_eq!(
        out,
        "True\nok GET /v1/models HTTP/1.1\nok GET /v1/models HTTP/1.1"
    );
    let heads = heads_containing("/v1/models");
    assert_eq!(heads.len(), 2, "one request through the proxy, one direct");
    for head in &heads {
        assert!(
            head.contains(&format!("Bearer {SECRET_VALUE}")),
            "the upstream sees the real secret: {head}"
        );
        assert!(!head.contains("airlock-placeholder-"), "{head}");
    }
}

async fn a_secret_bound_server_under_an_unknown_ca_is_refused_and_recorded(sandbox: &Sandbox) {
    let untrusted = UNTRUSTED.get().expect("started in boot");
    let url = untrusted.url("/hello");
    let out = python(
        sandbox,
        &format!(
            "import os, urllib.request as u, urllib.error as e\n\
             r = u.Request('{url}', headers={{'Authorization': 'Bearer ' + os.environ['UNTRUSTED_KEY']}})\n\
             try:\n    u.urlopen(r); print('reached')\n\
             except e.HTTPError as error: print(error.code)"
        ),
    )
    .await;
    assert_eq!(out, "502", "the host refuses the server's certificate");
    assert!(untrusted.requests().is_empty(), "no request reached it");
    let refused = refusals(sandbox, Some(untrusted.name.as_str()));
    assert!(
        refused
            .iter()
            .any(|r| matches!(r, Refusal::UpstreamUntrusted { .. })),
        "{refused:?}"
    );
    let said = refused
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        said.contains("--ca-cert"),
        "the record says what to do: {said}"
    );
}

async fn https_to_an_allowed_host_without_secrets_passes_through(sandbox: &Sandbox) {
    // The guest trusts only the test servers' CA here: the handshake
    // succeeds only if the host passes the server's own certificate
    // through, untouched.
    sandbox
        .fs()
        .write("/tmp/test-ca.pem", servers().ca_pem.as_bytes())
        .await
        .expect("upload the test CA");
    let port = servers().https.port();
    let out = python(
        sandbox,
        &format!(
            "import ssl, urllib.request as u\n\
             ctx = ssl.create_default_context(cafile='/tmp/test-ca.pem')\n\
             print(u.urlopen('https://other.test:{port}/through-proxy', context=ctx).read().decode())\n\
             direct = u.build_opener(u.ProxyHandler({{}}), u.HTTPSHandler(context=ctx))\n\
             print(direct.open('https://other.test:{port}/direct-tls').read().decode())"
        ),
    )
    .await;
    assert_eq!(
        out,
        "ok GET /through-proxy HTTP/1.1\nok GET /direct-tls HTTP/1.1"
    );
}

async fn a_placeholder_sent_to_another_host_is_blocked(sandbox: &Sandbox) {
    let port = servers().http.port();
    let out = python(
        sandbox,
        &format!(
            "import os, urllib.request as u, urllib.error as e\n\
             r = u.Request('http://other.test:{port}/leak', headers={{'X-Key': os.environ['API_KEY']}})\n\
             try:\n    u.urlopen(r); print('sent')\n\
             except e.HTTPError as err: print(err.code)"
        ),
    )
    .await;
    assert_eq!(out, "403");
    assert!(
        heads_containing("/leak").is_empty(),
        "nothing reached the server"
    );
    assert!(refusals(sandbox, Some("other.test"))
        .iter()
        .any(|r| matches!(r, Refusal::PlaceholderElsewhere { secret } if secret == "API_KEY")));
}

async fn a_code_context_gets_the_network_environment(sandbox: &Sandbox) {
    let contexts = sandbox.contexts();
    contexts
        .create(&airlock::ContextOptions::new(airlock::Language::Python).id("net"))
        .await
        .expect("create a context");
    let port = servers().https.port();
    let code = format!(
        "import os, urllib.request as u\n\
         r = u.Request('https://api.test:{port}/from-a-cell', headers={{'Authorization': 'Bearer ' + os.environ['API_KEY']}})\n\
         u.urlopen(r).read().decode()"
    );
    let out = sandbox
        .run_code(airlock::Cell::new(code).context("net"))
        .await
        .expect("run a cell")
        .output()
        .await
        .expect("cell output");
    assert_eq!(
        out.text(),
        Some("'ok GET /from-a-cell HTTP/1.1'"),
        "{out:?}"
    );
    let heads = heads_containing("/from-a-cell");
    assert!(
        heads[0].contains(SECRET_VALUE),
        "the upstream sees the secret"
    );
}

async fn a_wrong_server_name_for_an_allowed_address_is_refused(sandbox: &Sandbox) {
    // At once, and after staying silent for 1.5 s (past the wait after
    // which a silent connection is dialed as a server-speaks-first one),
    // directly and through the proxy's CONNECT.
    let port = servers().https.port();
    let before = refusals(sandbox, Some("other.test")).len();
    let out = python(
        sandbox,
        &format!(
            "import socket, ssl, time\n\
             ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE\n\
             def direct():\n\
             \x20   return socket.create_connection(('other.test', {port}), timeout=20)\n\
             def connect():\n\
             \x20   s = socket.create_connection(('198.18.0.1', 3128), timeout=20)\n\
             \x20   s.sendall(b'CONNECT other.test:{port} HTTP/1.1\\r\\nHost: other.test:{port}\\r\\n\\r\\n')\n\
             \x20   reply = b''\n\
             \x20   while not reply.endswith(b'\\r\\n\\r\\n'): reply += s.recv(1)\n\
             \x20   return s\n\
             for open_ in (direct, connect):\n\
             \x20   for delay in (0, 1.5):\n\
             \x20       s = open_(); time.sleep(delay)\n\
             \x20       try:\n\
             \x20           ctx.wrap_socket(s, server_hostname='evil.example'); print('handshake done')\n\
             \x20       except (ssl.SSLError, OSError) as err: print('refused')"
        ),
    )
    .await;
    assert_eq!(out, "refused\nrefused\nrefused\nrefused");
    let mismatches = refusals(sandbox, Some("other.test"))[before..]
        .iter()
        .filter(|r| {
            matches!(
                r,
                Refusal::ServerNameMismatch { server_name: Some(sn) } if sn == "evil.example"
            )
        })
        .count();
    assert_eq!(mismatches, 4, "each attempt recorded");
}

async fn a_raw_address_and_a_refused_name_reach_nothing(sandbox: &Sandbox) {
    // Plain HTTP is answered with the refusal; other bytes are reset.
    let out = python(
        sandbox,
        "import socket\n\
         for target, data in [(('192.0.2.77', 80), b'GET / HTTP/1.0\\r\\n\\r\\n'), (('93.184.216.34', 443), b'\\x00raw')]:\n\
         \x20   try:\n\
         \x20       s = socket.create_connection(target, timeout=20); s.sendall(data)\n\
         \x20       print('reply', s.recv(100).split(b'\\r\\n')[0].decode())\n\
         \x20   except OSError as err: print('refused')",
    )
    .await;
    assert_eq!(
        out, "reply HTTP/1.1 403 airlock: no rule allows 192.0.2.77:80\nrefused",
        "{out}"
    );
    let audit = sandbox.network_audit().unwrap();
    for raw in ["192.0.2.77", "93.184.216.34"] {
        let addr: IpAddr = raw.parse().unwrap();
        assert!(
            audit.iter().any(|r| r.addr == Some(addr)
                && r.verdict == Verdict::Refused(Refusal::NotAllowed)),
            "{raw} refused and audited"
        );
    }
}

async fn loopback_needs_a_cidr_rule(sandbox: &Sandbox) {
    let without_cidr = NetworkPolicy::from_rules(
        policy()
            .rules()
            .iter()
            .filter(|rule| !matches!(rule, NetRule::Network { .. }))
            .cloned(),
    );
    sandbox.set_network_policy(without_cidr).unwrap();
    let port = servers().http.port();
    let out = python(
        sandbox,
        &format!(
            "import urllib.request as u\n\
             direct = u.build_opener(u.ProxyHandler({{}}))\n\
             try:\n    direct.open('http://plain.test:{port}/loopback', timeout=20); print('reached')\n\
             except u.HTTPError as err: print(err.code, err.reason)"
        ),
    )
    .await;
    sandbox.set_network_policy(policy()).unwrap();
    let why = format!(
        "403 airlock: plain.test:{port} resolves to a restricted address (loopback, private, link-local or metadata) and no CIDR rule allows it"
    );
    assert_eq!(out, why);
    assert!(heads_containing("/loopback").is_empty());
    assert!(refusals(sandbox, Some("plain.test"))
        .iter()
        .any(|r| matches!(r, Refusal::RestrictedAddress { .. })));
}

async fn a_connection_flood_is_bounded_and_recorded(sandbox: &Sandbox) {
    let port = servers().http.port();
    let flood = MAX_CONNECTIONS * 3;
    // The host refuses a connection over the limit as soon as it is
    // carried, so its reset can reach the guest before a busy guest's
    // connect() returns: a failed connect counts as cut off too.
    let out = python(
        sandbox,
        &format!(
            "import socket, time\n\
             held, cut = [], 0\n\
             for _ in range({flood}):\n\
             \x20   try: held.append(socket.create_connection(('plain.test', {port}), timeout=20))\n\
             \x20   except OSError: cut += 1\n\
             time.sleep(3)\n\
             for s in held:\n\
             \x20   try:\n\
             \x20       s.settimeout(5); s.sendall(b'GET /flood HTTP/1.1\\r\\nHost: plain.test\\r\\n\\r\\n')\n\
             \x20       cut += 0 if s.recv(100).startswith(b'HTTP/1.1 200') else 1\n\
             \x20   except OSError: cut += 1\n\
             \x20   s.close()\n\
             print(cut)"
        ),
    )
    .await;
    let cut: usize = out.parse().expect("a count");
    assert!(
        cut >= flood - MAX_CONNECTIONS,
        "{cut} of {flood} connections were cut off, with room for {MAX_CONNECTIONS}"
    );
    let flooded = sandbox
        .network_audit()
        .unwrap()
        .into_iter()
        .filter(|r| {
            matches!(
                r.verdict,
                Verdict::Refused(Refusal::TooManyConnections { .. })
            )
        })
        .count();
    assert!(
        flooded >= flood - MAX_CONNECTIONS,
        "{flooded} refusals recorded"
    );
    // The host is fine afterwards: the next request is answered.
    let out = python(
        sandbox,
        &format!(
            "import urllib.request as u\n\
             print(u.urlopen('http://plain.test:{port}/after-flood', timeout=30).read().decode())"
        ),
    )
    .await;
    assert_eq!(out, "ok GET /after-flood HTTP/1.1");
}

async fn a_malformed_handshake_or_an_endless_head_is_cut_off_and_recorded(sandbox: &Sandbox) {
    let (https, http) = (servers().https.port(), servers().http.port());
    let out = python(
        sandbox,
        &format!(
            "import socket\n\
             def attempt(port, data):\n\
             \x20   s = socket.create_connection(('plain.test', port), timeout=30)\n\
             \x20   try:\n\
             \x20       s.sendall(data); reply = s.recv(100)\n\
             \x20       return 'cut' if not reply.startswith(b'HTTP/1.1 200') else 'answered'\n\
             \x20   except OSError: return 'cut'\n\
             print(attempt({https}, b'\\x16\\x03\\x01\\x00\\x30' + b'\\xff' * 48))\n\
             print(attempt({http}, b'GET /endless HTTP/1.1\\r\\nHost: plain.test\\r\\nX-Long: ' + b'a' * 200000))"
        ),
    )
    .await;
    assert_eq!(out, "cut\ncut", "{out}");
    assert!(heads_containing("/endless").is_empty());
    let malformed = refusals(sandbox, Some("plain.test"))
        .into_iter()
        .filter(|r| matches!(r, Refusal::Malformed { .. }))
        .count();
    assert!(malformed >= 2, "both recorded as malformed: {malformed}");
}

async fn the_secret_is_nowhere_in_the_guest(sandbox: &Sandbox) {
    // Only the value's first part goes into the guest: the guest prints
    // whatever follows it in the environment, every /proc/*/environ and
    // every file, and the host looks for the whole value in that.
    let (front, _) = SECRET_VALUE.split_at(12);
    let script = format!(
        "env | grep -a -o -F '{front}'; \
         cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -a -o -E '{front}.{{0,64}}'; \
         grep -r -a -o -E '{front}.{{0,64}}' / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev 2>/dev/null; \
         echo searched"
    );
    let out = stdout_of(sandbox, &script).await;
    assert!(
        out.trim_end().ends_with("searched"),
        "the search ran: {out}"
    );
    assert!(
        !out.contains(SECRET_VALUE),
        "the secret is in the guest's environment or files: {out}"
    );
}

/// Whether any file under `dir` holds `needle`.
fn files_holding(dir: &std::path::Path, needle: &[u8]) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(files_holding(&path, needle));
        } else if let Ok(bytes) = std::fs::read(&path) {
            if bytes.windows(needle.len()).any(|w| w == needle) {
                found.push(path);
            }
        }
    }
    found
}

async fn the_secret_is_not_in_a_snapshot_and_the_network_survives_a_resume(sandbox: &Sandbox) {
    // A marker in the guest's memory (tmpfs) shows the search would find
    // a string that is there.
    let marker = "airlock-network-test-marker-4e1c";
    let (front, back) = marker.split_at(10);
    stdout_of(
        sandbox,
        &format!("printf '%s%s' '{front}' '{back}' > /dev/shm/marker; sync"),
    )
    .await;
    sandbox.pause_to_disk().await.expect("pause to disk");
    let dir = SAVED_DIR.get().unwrap().path();
    assert!(
        !files_holding(dir, marker.as_bytes()).is_empty(),
        "the snapshot holds the guest's memory"
    );
    assert_eq!(
        files_holding(dir, SECRET_VALUE.as_bytes()),
        Vec::<std::path::PathBuf>::new(),
        "no snapshot file holds the secret"
    );
    sandbox.resume().await.expect("resume");
    let port = servers().http.port();
    let out = python(
        sandbox,
        &format!(
            "import urllib.request as u\n\
             direct = u.build_opener(u.ProxyHandler({{}}))\n\
             print(direct.open('http://plain.test:{port}/after-resume', timeout=30).read().decode())"
        ),
    )
    .await;
    assert_eq!(out, "ok GET /after-resume HTTP/1.1");
}

async fn guest_root_removing_the_redirect_reaches_nothing_new(sandbox: &Sandbox) {
    let before = servers().heads.lock().unwrap().len();
    // Root deletes the agent's nftables table with a raw netlink batch,
    // then tries the servers' addresses and an allowed name's address.
    let port = servers().http.port();
    let out = python(
        sandbox,
        &format!(
            "import socket, struct\n\
             def msg(kind, flags, seq, family, body=b''):\n\
             \x20   gen = struct.pack('=BBH', family, 0, socket.htons(10) if kind in (16, 17) else 0)\n\
             \x20   data = gen + body\n\
             \x20   return struct.pack('=IHHII', 16 + len(data), kind, flags, seq, 0) + data\n\
             name = b'airlock\\0'\n\
             attr = struct.pack('=HH', 4 + len(name), 1) + name + b'\\0' * (-len(name) % 4)\n\
             nl = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12)\n\
             nl.bind((0, 0))\n\
             nl.send(msg(16, 1, 1, 0) + msg((10 << 8) | 2, 1 | 4, 2, 2, attr) + msg(17, 1, 3, 0))\n\
             ack = nl.recv(4096)\n\
             print('deleted', struct.unpack('=i', ack[16:20])[0])\n\
             addr = '198.18.0.2'\n\
             for target in [(addr, {port}), ('127.0.0.1', {port}), ('192.0.2.1', 80)]:\n\
             \x20   try:\n\
             \x20       s = socket.create_connection(target, timeout=5); s.sendall(b'GET /after-flush HTTP/1.0\\r\\n\\r\\n')\n\
             \x20       print('reply', s.recv(100))\n\
             \x20   except OSError: print('nothing')"
        ),
    )
    .await;
    assert_eq!(out, "deleted 0\nnothing\nnothing\nnothing", "{out}");
    // Nothing else could carry a packet out: the guest's only network
    // devices are virtual ones (loopback and dummy links), and it has no
    // IPv6 default route.
    let devices = stdout_of(sandbox, "readlink -f /sys/class/net/* | tr '\\n' ' '").await;
    assert!(
        devices
            .split_whitespace()
            .all(|d| d.starts_with("/sys/devices/virtual/net/")),
        "a device that is not virtual: {devices}"
    );
    assert!(devices.contains("/airlock0"), "{devices}");
    let default_v6 = stdout_of(
        sandbox,
        "grep '^00000000000000000000000000000000 00 ' /proc/net/ipv6_route | grep -vc ' lo$' || true",
    )
    .await;
    assert_eq!(
        default_v6.trim(),
        "0",
        "no IPv6 default route but loopback's"
    );
    assert_eq!(servers().heads.lock().unwrap().len(), before);
    assert!(heads_containing("/after-flush").is_empty());
}
