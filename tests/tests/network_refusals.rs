//! Refusals a program can read, end to end: in a real guest with pip,
//! curl and Python's requests (an image built here on first use, as
//! matplotlib.rs builds its own), a request the sandbox's rules refuse is
//! answered with a status and a reason that names the destination where
//! the protocol has a way to answer (the proxy's `CONNECT` and
//! absolute-form requests, a plain HTTP request on a direct connection),
//! and otherwise reset, with the reason in the guest's refusal log. Names
//! resolve through a fixed table (`plain.test`, `down.test` → 127.0.0.1);
//! `blocked.test` and `files.blocked.test` have no rule. One VM serves all
//! the checks, in order (one holds every connection the sandbox may open).

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use airlock::{Command, ExitStatus, NetworkOptions, NetworkPolicy, Sandbox, StaticResolver};
use airlock_proto::contract::paths::REFUSAL_LOG;
use airlock_rootfs::image::{self, BuildOptions, DebianSpec, Source};
use airlock_tests::shared_vm::{Order, Suite};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The sandbox's bound on open connections.
const MAX_CONNECTIONS: usize = 6;

/// The loopback servers the checks talk to.
#[derive(Debug)]
struct Servers {
    /// A package index for `six` whose only file is on a host no rule
    /// allows; it answers every request with that page.
    index: SocketAddr,
    /// A port nothing listens on, behind the allowed name `down.test`.
    closed: u16,
    /// The request lines the index server received.
    requests: Mutex<Vec<String>>,
}

static SERVERS: OnceLock<Arc<Servers>> = OnceLock::new();

fn servers() -> &'static Servers {
    SERVERS.get().expect("servers started in boot")
}

fn main() -> ExitCode {
    Suite::new(boot, Order::Sequential)
        .checks(airlock_tests::checks![
            a_refused_connect_is_answered_403_naming_the_destination,
            a_refused_absolute_form_request_is_answered_403,
            urllib_and_requests_show_the_403_and_its_reason,
            curl_shows_the_403_and_its_reason,
            pip_names_the_blocked_destination_from_its_first_attempt,
            pip_names_a_blocked_file_host_in_its_error,
            an_unreachable_upstream_is_a_502_with_the_reason,
            a_direct_plain_http_request_is_answered_not_reset,
            raw_tcp_and_refused_tls_reset_and_are_in_the_refusal_log,
            a_refused_name_is_in_the_refusal_log,
            a_proxy_request_past_the_connection_limit_is_a_429,
            an_allowed_request_through_the_proxy_still_works,
        ])
        .run()
}

/// The image: the default packages plus pip, requests and curl, named
/// `test-net-tools` in the default store (cached after the first build,
/// which needs debootstrap, root and Debian's mirror, as scripts/setup's
/// default image does).
fn tools_image() -> PathBuf {
    let extra = ["python3-pip", "python3-requests", "curl"].map(str::to_owned);
    let spec = DebianSpec::new(
        image::debian::DEFAULT_SUITE,
        image::debian::DEFAULT_MIRROR,
        &extra,
    );
    let options = BuildOptions {
        name: Some("test-net-tools".into()),
        ..BuildOptions::new(Source::Debian(spec))
    };
    match image::build(&options) {
        Ok(built) => built.info.path,
        Err(error) => panic!(
            "cannot build the pip/curl image: {}",
            airlock::error_chain(&error)
        ),
    }
}

async fn boot() -> Sandbox {
    let image = tokio::task::spawn_blocking(tools_image).await.unwrap();
    SERVERS.set(start_servers().await).expect("one boot");
    let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let resolver = StaticResolver::new()
        .with("plain.test", loopback)
        .with("down.test", loopback);
    let policy = NetworkPolicy::new()
        .allow("plain.test".parse().unwrap())
        .allow("down.test".parse().unwrap())
        .allow("127.0.0.1/32".parse().unwrap());
    // The test servers are on the host's loopback.
    let options = NetworkOptions::new()
        .policy(policy)
        .host_access(airlock::HostAccess::Allowed)
        .resolver(Arc::new(resolver))
        .max_connections(MAX_CONNECTIONS);
    match airlock_tests::builder()
        .image(image)
        .memory_mib(512)
        .network(options)
        .start()
        .await
    {
        Ok(sandbox) => sandbox,
        Err(error) => panic!("sandbox did not start: {}", airlock::error_chain(&error)),
    }
}

async fn start_servers() -> Arc<Servers> {
    let index = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let closed = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let servers = Arc::new(Servers {
        index: index.local_addr().unwrap(),
        closed,
        requests: Mutex::default(),
    });
    let recorder = Arc::clone(&servers);
    tokio::spawn(async move {
        loop {
            let (stream, _) = index.accept().await.unwrap();
            tokio::spawn(serve_index(stream, Arc::clone(&recorder)));
        }
    });
    servers
}

/// Answers each request with the index page (keep-alive).
async fn serve_index(mut stream: TcpStream, servers: Arc<Servers>) {
    let page = "<!DOCTYPE html><html><body>\n\
                <a href=\"https://files.blocked.test/packages/six-1.16.0-py2.py3-none-any.whl\">six-1.16.0-py2.py3-none-any.whl</a>\n\
                </body></html>\n";
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
        servers.requests.lock().unwrap().push(line);
        let response = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\r\n{page}",
            page.len()
        );
        if stream.write_all(response.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// A guest program's output, as text.
struct Ran {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

async fn run(sandbox: &Sandbox, command: Command) -> Ran {
    let out = airlock_tests::run(sandbox, command).await;
    Ran {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Python in the guest; its stdout, trimmed. It must exit 0.
async fn python(sandbox: &Sandbox, code: &str) -> String {
    let ran = run(sandbox, Command::new("python3").arg("-c").arg(code)).await;
    assert_eq!(
        ran.status,
        ExitStatus::Code(0),
        "python failed: {}\n{}",
        ran.stdout,
        ran.stderr
    );
    ran.stdout
}

/// A Python function `exchange(request)` that sends raw bytes to `addr`
/// and returns the answer up to the end of the stream, or `reset`.
fn exchange_py(addr: &str) -> String {
    format!(
        "import socket\n\
         def exchange(request, addr=({addr})):\n\
         \x20   s = socket.create_connection(addr, timeout=30)\n\
         \x20   s.sendall(request)\n\
         \x20   answer = b''\n\
         \x20   try:\n\
         \x20       while True:\n\
         \x20           got = s.recv(65536)\n\
         \x20           if not got: return answer.decode()\n\
         \x20           answer += got\n\
         \x20   except ConnectionResetError:\n\
         \x20       return 'reset'\n"
    )
}

/// The proxy's address in Python.
const PROXY: &str = "'198.18.0.1', 3128";

/// The guest's refusal log, read by a program that is not root.
async fn refusal_log(sandbox: &Sandbox) -> String {
    let ran = run(sandbox, Command::new("cat").arg(REFUSAL_LOG).user("nobody")).await;
    assert_eq!(ran.status, ExitStatus::Code(0), "{}", ran.stderr);
    ran.stdout
}

/// Whether the refusal log has a line ending with `tail`.
async fn logged(sandbox: &Sandbox, tail: &str) -> bool {
    refusal_log(sandbox)
        .await
        .lines()
        .any(|line| line.ends_with(tail))
}

async fn a_refused_connect_is_answered_403_naming_the_destination(sandbox: &Sandbox) {
    let out = python(
        sandbox,
        &format!(
            "{}print(exchange(b'CONNECT blocked.test:443 HTTP/1.1\\r\\nHost: blocked.test:443\\r\\n\\r\\n'))",
            exchange_py(PROXY)
        ),
    )
    .await;
    let mut lines = out.lines();
    assert_eq!(
        lines.next(),
        Some("HTTP/1.1 403 airlock: no rule allows blocked.test:443"),
        "{out}"
    );
    assert!(!out.contains(" 200 "), "never 200: {out}");
    assert!(
        out.contains("\r\n\r\nairlock: no rule allows blocked.test:443\n")
            && out.contains("network rules"),
        "the body says why: {out}"
    );
    assert!(
        logged(
            sandbox,
            " 198.18.0.1:3128 answered HTTP 403: no rule allows blocked.test:443"
        )
        .await
    );
}

async fn a_refused_absolute_form_request_is_answered_403(sandbox: &Sandbox) {
    let out = python(
        sandbox,
        &format!(
            "{}print(exchange(b'GET http://blocked.test/x HTTP/1.1\\r\\nHost: blocked.test\\r\\n\\r\\n'))",
            exchange_py(PROXY)
        ),
    )
    .await;
    assert!(
        out.starts_with("HTTP/1.1 403 airlock: no rule allows blocked.test:80\r\n"),
        "{out}"
    );
    assert!(
        out.ends_with("Only a rule added to the sandbox can allow it."),
        "{out}"
    );
}

async fn urllib_and_requests_show_the_403_and_its_reason(sandbox: &Sandbox) {
    let out = python(
        sandbox,
        "import urllib.request as u, requests\n\
         for url in ['https://blocked.test/', 'http://blocked.test/x']:\n\
         \x20   try: u.urlopen(url, timeout=30); print('fetched')\n\
         \x20   except Exception as err: print('urllib', err)\n\
         try: requests.get('https://blocked.test/', timeout=30); print('fetched')\n\
         except Exception as err: print('requests', type(err).__name__, err)\n\
         r = requests.get('http://blocked.test/x', timeout=30)\n\
         print('requests', r.status_code, r.reason)",
    )
    .await;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "urllib <urlopen error Tunnel connection failed: 403 airlock: no rule allows blocked.test:443>"
    );
    assert_eq!(
        lines[1],
        "urllib HTTP Error 403: airlock: no rule allows blocked.test:80"
    );
    assert!(
        lines[2].starts_with("requests ProxyError ")
            && lines[2]
                .contains("Tunnel connection failed: 403 airlock: no rule allows blocked.test:443"),
        "{out}"
    );
    assert_eq!(
        lines[3],
        "requests 403 airlock: no rule allows blocked.test:80"
    );
}

async fn curl_shows_the_403_and_its_reason(sandbox: &Sandbox) {
    // HTTPS: curl's own message for a refused CONNECT names the status
    // only; -v shows the status line with the reason.
    let https = run(
        sandbox,
        Command::new("curl").args(["-sS", "-v", "https://blocked.test/"]),
    )
    .await;
    assert_eq!(https.status, ExitStatus::Code(56), "{}", https.stderr);
    assert!(
        https
            .stderr
            .contains("curl: (56) CONNECT tunnel failed, response 403"),
        "{}",
        https.stderr
    );
    assert!(
        https
            .stderr
            .contains("< HTTP/1.1 403 airlock: no rule allows blocked.test:443"),
        "{}",
        https.stderr
    );
    // HTTP: the answer's body is what curl prints, and --fail names 403.
    let http = run(
        sandbox,
        Command::new("curl").args(["-sS", "http://blocked.test/x"]),
    )
    .await;
    assert_eq!(http.status, ExitStatus::Code(0), "{}", http.stderr);
    assert!(
        http.stdout
            .starts_with("airlock: no rule allows blocked.test:80\n"),
        "{}",
        http.stdout
    );
    let failed = run(
        sandbox,
        Command::new("curl").args(["-fsS", "http://blocked.test/x"]),
    )
    .await;
    assert_eq!(failed.status, ExitStatus::Code(22));
    assert!(failed.stderr.contains("error: 403"), "{}", failed.stderr);
}

async fn pip_names_the_blocked_destination_from_its_first_attempt(sandbox: &Sandbox) {
    // pip retries whatever fails on its proxy's CONNECT (see
    // docs/network.md): each retry's warning carries the 403 and reason of
    // the attempt before, so the first warning already names it.
    let began = Instant::now();
    let pip = run(
        sandbox,
        Command::new("python3").args([
            "-m",
            "pip",
            "install",
            "--no-cache-dir",
            "--disable-pip-version-check",
            "--target",
            "/tmp/pip-target",
            "--index-url",
            "https://blocked.test/simple/",
            "six",
        ]),
    )
    .await;
    let took = began.elapsed();
    assert_ne!(pip.status, ExitStatus::Code(0), "{}", pip.stderr);
    let first_warning = pip
        .stderr
        .lines()
        .find(|l| l.starts_with("WARNING: Retrying"))
        .unwrap_or_else(|| panic!("no retry warning: {}", pip.stderr));
    assert!(
        first_warning
            .contains("Tunnel connection failed: 403 airlock: no rule allows blocked.test:443"),
        "{first_warning}"
    );
    println!(
        "pip gave up on a refused index after {took:?} and {} retries",
        pip.stderr.matches("WARNING: Retrying").count()
    );
}

async fn pip_names_a_blocked_file_host_in_its_error(sandbox: &Sandbox) {
    // The index is allowed (plain HTTP through the proxy); the file it
    // points at is on a host no rule allows.
    let index = format!("http://plain.test:{}/simple/", servers().index.port());
    let pip = run(
        sandbox,
        Command::new("python3").args([
            "-m",
            "pip",
            "install",
            "--no-cache-dir",
            "--disable-pip-version-check",
            "--no-deps",
            "--target",
            "/tmp/pip-target",
            "--trusted-host",
            "plain.test",
            "--index-url",
            &index,
            "six",
        ]),
    )
    .await;
    assert_ne!(pip.status, ExitStatus::Code(0), "{}", pip.stderr);
    let error = pip
        .stderr
        .lines()
        .filter(|l| l.starts_with("ERROR:"))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        error.starts_with("ERROR: Could not install packages due to an OSError: HTTPSConnectionPool(host='files.blocked.test', port=443)")
            && error.contains("403 airlock: no rule allows files.blocked.test:443"),
        "pip's error names the blocked host: {}",
        pip.stderr
    );
    assert!(
        servers()
            .requests
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.starts_with("GET /simple/six/")),
        "the allowed index was read"
    );
}

async fn an_unreachable_upstream_is_a_502_with_the_reason(sandbox: &Sandbox) {
    let port = servers().closed;
    let out = python(
        sandbox,
        &format!(
            "{}print(exchange(b'CONNECT down.test:{port} HTTP/1.1\\r\\n\\r\\n').splitlines()[0])\n\
             print(exchange(b'GET http://down.test:{port}/ HTTP/1.1\\r\\nHost: down.test:{port}\\r\\nConnection: close\\r\\n\\r\\n').splitlines()[0])",
            exchange_py(PROXY)
        ),
    )
    .await;
    let expected = format!(
        "HTTP/1.1 502 airlock: down.test:{port} could not be reached: Connection refused (os error 111)"
    );
    assert_eq!(out, format!("{expected}\n{expected}"));
}

async fn a_direct_plain_http_request_is_answered_not_reset(sandbox: &Sandbox) {
    let port = servers().index.port();
    let out = python(
        sandbox,
        &format!(
            "{}print(exchange(b'GET / HTTP/1.0\\r\\n\\r\\n', ('192.0.2.77', 80)).splitlines()[0])\n\
             print(exchange(b'GET / HTTP/1.1\\r\\nHost: blocked.test\\r\\nConnection: close\\r\\n\\r\\n', ('plain.test', {port})))",
            exchange_py(PROXY)
        ),
    )
    .await;
    let mut lines = out.lines();
    assert_eq!(
        lines.next(),
        Some("HTTP/1.1 403 airlock: no rule allows 192.0.2.77:80")
    );
    let why = format!(
        "HTTP host \"blocked.test\" is not plain.test:{port}, the name this connection was allowed for"
    );
    assert!(
        lines
            .next()
            .is_some_and(|l| l.starts_with(&format!("HTTP/1.1 421 airlock: {why}"))),
        "{out}"
    );
    assert!(out.contains(&format!("\r\n\r\nairlock: {why}")), "{out}");
    assert!(
        !servers()
            .requests
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.starts_with("GET / ")),
        "the misdirected request never reached the server"
    );
    assert!(
        logged(
            sandbox,
            " 192.0.2.77:80 answered HTTP 403: no rule allows 192.0.2.77:80"
        )
        .await
    );
}

async fn raw_tcp_and_refused_tls_reset_and_are_in_the_refusal_log(sandbox: &Sandbox) {
    let port = servers().index.port();
    let out = python(
        sandbox,
        &format!(
            "import socket, ssl\n\
             {}print(exchange(b'SSH-2.0-OpenSSH_9.2\\r\\n', ('192.0.2.77', 22)))\n\
             ctx = ssl.create_default_context()\n\
             s = socket.create_connection(('plain.test', {port}), timeout=30)\n\
             try: ctx.wrap_socket(s, server_hostname='evil.example'); print('handshake done')\n\
             except (ssl.SSLError, OSError) as err: print(type(err).__name__)",
            exchange_py(PROXY)
        ),
    )
    .await;
    assert_eq!(out, "reset\nConnectionResetError", "{out}");
    let log = refusal_log(sandbox).await;
    let ssh = log
        .lines()
        .find(|l| l.contains(" 192.0.2.77:22 "))
        .unwrap_or_else(|| panic!("no line for 192.0.2.77:22 in:\n{log}"));
    let (time, rest) = ssh.split_once(' ').unwrap();
    assert!(
        time.len() == 20 && time.ends_with('Z') && time.contains('T'),
        "{ssh}"
    );
    assert_eq!(
        rest,
        "192.0.2.77:22 connection reset: no rule allows 192.0.2.77:22"
    );
    let tls = format!(
        " connection reset: TLS server name \"evil.example\" is not plain.test:{port}, the name this connection was allowed for"
    );
    assert!(log.lines().any(|l| l.ends_with(&tls)), "{log}");
}

async fn a_refused_name_is_in_the_refusal_log(sandbox: &Sandbox) {
    let out = python(
        sandbox,
        "import socket\n\
         try: socket.gethostbyname('blocked.test'); print('resolved')\n\
         except socket.gaierror: print('not resolved')",
    )
    .await;
    assert_eq!(out, "not resolved");
    assert!(
        logged(
            sandbox,
            " dns answered NXDOMAIN: no rule allows blocked.test"
        )
        .await
    );
}

async fn a_proxy_request_past_the_connection_limit_is_a_429(sandbox: &Sandbox) {
    // Silent connections to an allowed server hold every place.
    let port = servers().index.port();
    let out = python(
        sandbox,
        &format!(
            "import socket, time\n\
             {}held = [socket.create_connection(('plain.test', {port}), timeout=30) for _ in range({MAX_CONNECTIONS})]\n\
             time.sleep(2)\n\
             print(exchange(b'CONNECT blocked.test:443 HTTP/1.1\\r\\n\\r\\n').splitlines()[0])\n\
             for s in held: s.close()",
            exchange_py(PROXY)
        ),
    )
    .await;
    assert_eq!(
        out,
        format!(
            "HTTP/1.1 429 airlock: no connection to blocked.test:443: the sandbox already has {MAX_CONNECTIONS} open, its limit"
        )
    );
}

async fn an_allowed_request_through_the_proxy_still_works(sandbox: &Sandbox) {
    let port = servers().index.port();
    let curl = run(
        sandbox,
        Command::new("curl").args(["-sS", &format!("http://plain.test:{port}/simple/six/")]),
    )
    .await;
    assert_eq!(curl.status, ExitStatus::Code(0), "{}", curl.stderr);
    assert!(curl.stdout.contains("six-1.16.0"), "{}", curl.stdout);
    // A tunnel to an allowed name is established, and carries HTTP.
    let out = python(
        sandbox,
        &format!(
            "{}print(exchange(b'CONNECT plain.test:{port} HTTP/1.1\\r\\n\\r\\nGET /tunnel HTTP/1.1\\r\\nHost: plain.test\\r\\nConnection: close\\r\\n\\r\\n'))",
            exchange_py(PROXY)
        ),
    )
    .await;
    assert!(
        out.starts_with("HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.1 200 OK\r\n"),
        "{out}"
    );
}
