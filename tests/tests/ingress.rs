//! Ingress on real VMs, as a user meets it: a private daemon (which serves
//! ingress on a loopback port of its own), `airlock sandbox create`, servers
//! started in the guest, and `airlock sandbox expose` printing the URL a
//! browser would open; the requests go to that URL (connecting to the
//! address its host resolves to, as browsers resolve `*.localhost`).
//!
//! The checks share one sandbox (the default image, no network at all),
//! created by the first of them, and run in order: the last one pauses it
//! to disk. A second sandbox (no image) lends its token for the 401 check.

// A test panics with its reason.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, ExitCode, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use airlock_client::{api, Client, Endpoint};
use airlock_tests::{airlock_bin, sha256_hex, testkit, DaemonHome};
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use libtest_mimic::{Arguments, Failed, Trial};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;

/// The guest's ports.
const HTTP_PORT: u16 = 8000;
const WS_PORT: u16 = 8001;
const SSE_PORT: u16 = 8002;
const ECHO_PORT: u16 = 8003;
/// The connections one sandbox may have open through the ingress.
const MAX_CONNECTIONS: usize = airlock_server::ingress::bounds::MAX_CONNECTIONS_PER_SANDBOX;
/// The big file `python3 -m http.server` serves.
const BIG_BYTES: usize = 32 * 1024 * 1024;
/// How long a server in the guest may take to listen (Python under TCG).
const LISTEN_LIMIT: Duration = Duration::from_secs(120);

/// A WebSocket echo server on the standard library alone (the image has
/// no websocket module).
const WS_SERVER: &str = r#"
import base64, hashlib, socket, struct, threading
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
def serve(c):
    # Closed when its client is done, whatever the loop below still holds.
    with c:
        talk(c)
def talk(c):
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        b = c.recv(1)
        if not b:
            return
        head += b
    key = [l.split(b":", 1)[1].strip() for l in head.split(b"\r\n") if l.lower().startswith(b"sec-websocket-key:")][0]
    accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
    c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n")
    def read(n):
        data = b""
        while len(data) < n:
            more = c.recv(n - len(data))
            if not more:
                raise EOFError
            data += more
        return data
    while True:
        h = read(2)
        op, n = h[0] & 15, h[1] & 127
        if n == 126:
            n = struct.unpack(">H", read(2))[0]
        elif n == 127:
            n = struct.unpack(">Q", read(8))[0]
        mask = read(4) if h[1] & 128 else b"\0\0\0\0"
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(read(n)))
        if op == 8:
            c.sendall(b"\x88\x00")
            return
        if op in (1, 2):
            size = bytes([n]) if n < 126 else bytes([126]) + struct.pack(">H", n)
            c.sendall(bytes([0x80 | op]) + size + payload)
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8001))
s.listen(64)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

/// Server-sent events: event 0 at once, then event k only after a request
/// to /go?k, which the test sends only once it has read event k-1. A proxy
/// that held the stream back would deadlock the test into its time limit.
const SSE_SERVER: &str = r#"
import http.server, threading
gates = [threading.Event() for _ in range(5)]
class H(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def do_GET(self):
        if self.path.startswith("/go?"):
            gates[int(self.path[4:])].set()
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        for i in range(5):
            if i and not gates[i].wait(120):
                return
            self.wfile.write(b"data: %d\n\n" % i)
            self.wfile.flush()
http.server.ThreadingHTTPServer(("127.0.0.1", 8002), H).serve_forever()
"#;

/// A TCP echo server.
const ECHO_SERVER: &str = r#"
import socket, threading
def serve(c):
    while True:
        data = c.recv(65536)
        if not data:
            c.shutdown(socket.SHUT_WR)
            return
        c.sendall(data)
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 8003))
s.listen(16)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

/// The sandbox the checks share.
struct Shared {
    home: DaemonHome,
    id: String,
    client: Client,
    runtime: tokio::runtime::Runtime,
    /// The SHA-256 of /tmp/www/big, as the guest computed it.
    big_sha256: String,
}

/// `airlock sandbox expose ID PORT --json`, as the server answered it.
#[derive(Debug, Clone)]
struct Exposed {
    /// The URL to open.
    url: String,
    /// Its host (`PORT-ID.airlock.localhost:N`).
    host: String,
    /// Where that host resolves to (a browser's `*.localhost`).
    addr: SocketAddr,
    token: String,
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn expose(home: &DaemonHome, id: &str, port: u16) -> Exposed {
    let json: serde_json::Value =
        serde_json::from_str(&home.ok(&["expose", id, &port.to_string(), "--json"])).unwrap();
    let url = json["url"].as_str().unwrap().to_owned();
    let host = json["host"].as_str().unwrap().to_owned();
    assert!(url.starts_with(&format!("http://{host}/")), "{url}");
    let ingress_port = host.rsplit_once(':').unwrap().1.parse::<u16>().unwrap();
    Exposed {
        url,
        host,
        addr: SocketAddr::from(([127, 0, 0, 1], ingress_port)),
        token: json["token"].as_str().unwrap().to_owned(),
    }
}

/// A GET of `path` on `exposed`'s host with `headers`.
async fn get(
    exposed: &Exposed,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<(StatusCode, HeaderMap, Bytes), String> {
    let response = send(exposed, path, headers).await?;
    let (parts, body) = response.into_parts();
    let body = body
        .collect()
        .await
        .map_err(|e| format!("reading the body: {e}"))?
        .to_bytes();
    Ok((parts.status, parts.headers, body))
}

/// Sends a GET and answers the response with its body unread.
async fn send(
    exposed: &Exposed,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<http::Response<hyper::body::Incoming>, String> {
    let stream = tokio::net::TcpStream::connect(exposed.addr)
        .await
        .map_err(|e| format!("connecting to {}: {e}", exposed.addr))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let mut request = Request::get(path).header("host", &exposed.host);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    sender
        .send_request(request.body(Empty::<Bytes>::new()).unwrap())
        .await
        .map_err(|e| format!("GET {path}: {e}"))
}

/// The token header of `exposed`.
fn token(exposed: &Exposed) -> [(&'static str, &str); 1] {
    [("x-airlock-token", exposed.token.as_str())]
}

/// Waits until the guest's server on `exposed` answers other than 502.
async fn wait_listening(exposed: &Exposed, path: &str) -> Result<(), String> {
    let began = Instant::now();
    loop {
        let (status, _, body) = get(exposed, path, &token(exposed)).await?;
        if status != StatusCode::BAD_GATEWAY {
            return Ok(());
        }
        if began.elapsed() > LISTEN_LIMIT {
            return Err(format!(
                "nothing listened within {LISTEN_LIMIT:?}: {}",
                text(&body)
            ));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Starts `argv` in the sandbox and leaves it running.
async fn start(client: &Client, id: &str, argv: &[&str]) {
    // The call ends; the program runs on.
    drop(testkit::start(client, id, argv).await);
}

fn create_shared() -> Result<Shared, String> {
    let home = DaemonHome::new();
    let id = home.ok(&["create", "--memory", "512"]).trim().to_owned();
    let digest = home.ok(&[
        "exec",
        &id,
        "--",
        "sh",
        "-c",
        &format!(
            "mkdir -p /tmp/www && head -c {BIG_BYTES} /dev/urandom > /tmp/www/big && \
             echo hello > /tmp/www/small && sha256sum /tmp/www/big"
        ),
    ]);
    let big_sha256 = digest
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned();
    let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    let client = runtime
        .block_on(
            Endpoint::Local {
                socket: home.socket(),
            }
            .connect(),
        )
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let port = HTTP_PORT.to_string();
        start(
            &client,
            &id,
            &[
                "python3",
                "-m",
                "http.server",
                &port,
                "--bind",
                "127.0.0.1",
                "--directory",
                "/tmp/www",
            ],
        )
        .await;
        start(&client, &id, &["python3", "-c", WS_SERVER]).await;
        start(&client, &id, &["python3", "-c", SSE_SERVER]).await;
        start(&client, &id, &["python3", "-c", ECHO_SERVER]).await;
    });
    Ok(Shared {
        home,
        id,
        client,
        runtime,
        big_sha256,
    })
}

fn main() -> ExitCode {
    let mut args = Arguments::from_args();
    // The checks on the shared sandbox depend on their order.
    args.test_threads = Some(1);
    let sandbox: Arc<OnceLock<Result<Shared, String>>> = Arc::default();
    let on_shared = |name: &'static str, check: fn(&Shared) -> Result<(), String>| {
        let sandbox = Arc::clone(&sandbox);
        Trial::test(name, move || {
            let shared = sandbox.get_or_init(create_shared);
            check(shared.as_ref().map_err(Failed::from)?).map_err(Failed::from)
        })
    };
    let trials = vec![
        on_shared(
            "http_server_answers_a_32_mib_file_through_the_exposed_url",
            http_server_answers_a_32_mib_file_through_the_exposed_url,
        ),
        on_shared(
            "no_token_or_another_sandboxs_token_is_401",
            no_token_or_another_sandboxs_token_is_401,
        ),
        on_shared(
            "a_closed_port_is_502_naming_sandbox_and_port",
            a_closed_port_is_502_naming_sandbox_and_port,
        ),
        on_shared(
            "a_websocket_echo_answers_1000_messages_in_order",
            a_websocket_echo_answers_1000_messages_in_order,
        ),
        on_shared(
            "server_sent_events_arrive_one_by_one",
            server_sent_events_arrive_one_by_one,
        ),
        on_shared(
            "port_forward_reaches_a_guest_tcp_echo",
            port_forward_reaches_a_guest_tcp_echo,
        ),
        on_shared(
            "fifty_concurrent_clients_are_all_answered",
            fifty_concurrent_clients_are_all_answered,
        ),
        on_shared(
            "a_connection_past_the_bound_is_503_until_one_closes",
            a_connection_past_the_bound_is_503_until_one_closes,
        ),
        on_shared(
            "a_sandbox_paused_to_disk_answers_its_first_request",
            a_sandbox_paused_to_disk_answers_its_first_request,
        ),
    ];
    let conclusion = libtest_mimic::run(&args, trials);
    drop(sandbox);
    conclusion.exit_code()
}

fn http_server_answers_a_32_mib_file_through_the_exposed_url(
    shared: &Shared,
) -> Result<(), String> {
    let exposed = expose(&shared.home, &shared.id, HTTP_PORT);
    assert!(
        exposed
            .url
            .ends_with(&format!("/?airlock_token={}", exposed.token)),
        "{}",
        exposed.url
    );
    shared.runtime.block_on(async {
        wait_listening(&exposed, "/small").await?;
        // The URL as a browser opens it: the token in the query is
        // answered with a cookie and a redirect without it.
        let path = &exposed.url[exposed.url.find(&exposed.host).unwrap() + exposed.host.len()..];
        let (status, headers, _) = get(&exposed, path, &[]).await?;
        assert_eq!(status, StatusCode::SEE_OTHER);
        assert_eq!(headers["location"], "/");
        let cookie = headers["set-cookie"].to_str().unwrap();
        let pair = cookie.split(';').next().unwrap().to_owned();
        let (status, headers, body) = get(&exposed, "/big", &[("cookie", &pair)]).await?;
        assert_eq!(status, StatusCode::OK, "{}", text(&body));
        assert_eq!(headers["content-length"], BIG_BYTES.to_string().as_str());
        assert_eq!(body.len(), BIG_BYTES);
        assert_eq!(sha256_hex(&body), shared.big_sha256, "the bytes differ");
        Ok(())
    })
}

fn no_token_or_another_sandboxs_token_is_401(shared: &Shared) -> Result<(), String> {
    let exposed = expose(&shared.home, &shared.id, HTTP_PORT);
    let other = shared.home.ok(&["create", "--no-image"]).trim().to_owned();
    let others = expose(&shared.home, &other, HTTP_PORT);
    assert_ne!(others.token, exposed.token);
    shared.runtime.block_on(async {
        let (status, _, body) = get(&exposed, "/small", &[]).await?;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{}", text(&body));
        assert!(text(&body).contains(&shared.id), "{}", text(&body));
        let (status, _, _) = get(&exposed, "/small", &token(&others)).await?;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        let (status, _, body) = get(&exposed, "/small", &token(&exposed)).await?;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(&body[..], b"hello\n");
        Ok::<_, String>(())
    })?;
    shared.home.ok(&["kill", &other]);
    // Each refusal is in the sandbox's audit log, beside the accepted ones.
    let audit = shared.runtime.block_on(async {
        shared
            .client
            .network()
            .audit(api::AuditRequest {
                sandbox_id: shared.id.clone(),
                after_seq: 0,
            })
            .await
            .unwrap()
            .into_inner()
            .records
    });
    let verdicts: Vec<&str> = audit.iter().map(|r| r.verdict.as_str()).collect();
    assert!(
        verdicts.contains(&"refused: no traffic token for a private port"),
        "{verdicts:?}"
    );
    assert!(
        verdicts.contains(&"refused: the traffic token is not this sandbox's"),
        "{verdicts:?}"
    );
    assert!(verdicts.contains(&"allowed"), "{verdicts:?}");
    Ok(())
}

fn a_closed_port_is_502_naming_sandbox_and_port(shared: &Shared) -> Result<(), String> {
    let exposed = expose(&shared.home, &shared.id, 9);
    shared.runtime.block_on(async {
        let (status, _, body) = get(&exposed, "/", &token(&exposed)).await?;
        assert_eq!(status, StatusCode::BAD_GATEWAY);
        let body = text(&body);
        assert!(
            body.contains(&format!(
                "sandbox {} port 9: nothing listens on guest port 9",
                shared.id
            )),
            "{body}"
        );
        Ok(())
    })
}

fn a_websocket_echo_answers_1000_messages_in_order(shared: &Shared) -> Result<(), String> {
    let exposed = expose(&shared.home, &shared.id, WS_PORT);
    shared.runtime.block_on(async {
        let began = Instant::now();
        let socket = loop {
            let stream = tokio::net::TcpStream::connect(exposed.addr)
                .await
                .map_err(|e| e.to_string())?;
            let request = Request::get(format!("ws://{}/echo", exposed.host))
                .header("host", &exposed.host)
                .header("x-airlock-token", &exposed.token)
                .header("connection", "Upgrade")
                .header("upgrade", "websocket")
                .header("sec-websocket-version", "13")
                .header(
                    "sec-websocket-key",
                    tokio_tungstenite::tungstenite::handshake::client::generate_key(),
                )
                .body(())
                .unwrap();
            match tokio_tungstenite::client_async(request, stream).await {
                Ok((socket, _)) => break socket,
                Err(error) if began.elapsed() < LISTEN_LIMIT => {
                    tracing_or_sleep(&error.to_string()).await;
                }
                Err(error) => return Err(format!("the WebSocket handshake failed: {error}")),
            }
        };
        let (mut write, mut read) = socket.split();
        let sender = tokio::spawn(async move {
            for i in 0..1000 {
                write
                    .send(Message::text(format!("message {i}")))
                    .await
                    .unwrap();
            }
            write
        });
        for i in 0..1000 {
            let message = tokio::time::timeout(Duration::from_secs(60), read.next())
                .await
                .map_err(|_| format!("no echo of message {i} within 60 s"))?
                .ok_or(format!("the socket ended before message {i}"))?
                .map_err(|e| e.to_string())?;
            assert_eq!(
                message,
                Message::text(format!("message {i}")),
                "out of order"
            );
        }
        let mut write = sender.await.unwrap();
        write
            .send(Message::Close(None))
            .await
            .map_err(|e| e.to_string())?;
        Ok(())
    })
}

/// A pause between attempts at a server that is not up yet.
async fn tracing_or_sleep(_why: &str) {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

fn server_sent_events_arrive_one_by_one(shared: &Shared) -> Result<(), String> {
    let exposed = expose(&shared.home, &shared.id, SSE_PORT);
    shared.runtime.block_on(async {
        wait_listening(&exposed, "/go?0").await?;
        let response = send(&exposed, "/events", &token(&exposed)).await?;
        assert_eq!(response.status(), StatusCode::OK);
        let mut body = response.into_body();
        let mut seen = String::new();
        for i in 0..5 {
            let want = format!("data: {i}\n\n");
            while !seen.contains(&want) {
                let frame = tokio::time::timeout(Duration::from_secs(60), body.frame())
                    .await
                    .map_err(|_| format!("event {i} did not arrive (held back?); so far {seen:?}"))?
                    .ok_or(format!("the stream ended before event {i}"))?
                    .map_err(|e| e.to_string())?;
                if let Ok(data) = frame.into_data() {
                    seen.push_str(&text(&data));
                }
            }
            // Event i+1 is sent only after this request.
            if i < 4 {
                let (status, _, _) =
                    get(&exposed, &format!("/go?{}", i + 1), &token(&exposed)).await?;
                assert_eq!(status, StatusCode::OK);
            }
        }
        Ok(())
    })
}

fn port_forward_reaches_a_guest_tcp_echo(shared: &Shared) -> Result<(), String> {
    let forward_to = format!("0:{ECHO_PORT}");
    let mut child = Command::new(airlock_bin())
        .args(["sandbox", "port-forward", &shared.id, &forward_to])
        .env("AIRLOCK_STATE_DIR", shared.home.path())
        .env("AIRLOCK_SAVED_DIR", shared.home.saved_dir())
        .env("AIRLOCK_SERVER_DIR", shared.home.server_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).map_err(|e| e.to_string())?;
    // "forwarding 127.0.0.1:PORT -> ID:8003 (Ctrl-C to stop)"
    let local: SocketAddr = line
        .split_whitespace()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .ok_or(format!("port-forward printed {line:?}"))?;
    let outcome = shared.runtime.block_on(async {
        let sent: Vec<u8> = (0..1_000_000u32).map(|i| (i % 241) as u8).collect();
        let began = Instant::now();
        loop {
            let mut stream = tokio::net::TcpStream::connect(local)
                .await
                .map_err(|e| e.to_string())?;
            let (mut reader, mut writer) = stream.split();
            let write = async {
                writer.write_all(&sent).await?;
                writer.shutdown().await
            };
            let mut got = Vec::new();
            let (written, read) = tokio::join!(write, reader.read_to_end(&mut got));
            written.map_err(|e| e.to_string())?;
            read.map_err(|e| e.to_string())?;
            if got.is_empty() && began.elapsed() < LISTEN_LIMIT {
                // The echo server is not up yet: the connection was refused.
                tokio::time::sleep(Duration::from_millis(300)).await;
                continue;
            }
            assert_eq!(got.len(), sent.len());
            assert!(got == sent, "the echo differs");
            return Ok::<_, String>(());
        }
    });
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let _ = child.wait();
    outcome
}

fn fifty_concurrent_clients_are_all_answered(shared: &Shared) -> Result<(), String> {
    let exposed = expose(&shared.home, &shared.id, HTTP_PORT);
    shared.runtime.block_on(async {
        let clients: Vec<_> = (0..50)
            .map(|_| {
                let exposed = exposed.clone();
                tokio::spawn(async move { get(&exposed, "/small", &token(&exposed)).await })
            })
            .collect();
        for (i, client) in clients.into_iter().enumerate() {
            let (status, _, body) = client.await.unwrap()?;
            assert_eq!(status, StatusCode::OK, "client {i}: {}", text(&body));
            assert_eq!(&body[..], b"hello\n", "client {i}");
        }
        Ok(())
    })
}

/// Opens a WebSocket to `exposed` (a tunnel the ingress holds open).
async fn websocket(
    exposed: &Exposed,
) -> Result<tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>, String> {
    let stream = tokio::net::TcpStream::connect(exposed.addr)
        .await
        .map_err(|e| e.to_string())?;
    let request = Request::get(format!("ws://{}/echo", exposed.host))
        .header("host", &exposed.host)
        .header("x-airlock-token", &exposed.token)
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header(
            "sec-websocket-key",
            tokio_tungstenite::tungstenite::handshake::client::generate_key(),
        )
        .body(())
        .map_err(|e| e.to_string())?;
    let (socket, _) = tokio_tungstenite::client_async(request, stream)
        .await
        .map_err(|e| format!("the WebSocket handshake failed: {e}"))?;
    Ok(socket)
}

/// With the most connections a sandbox may have open (WebSocket tunnels),
/// one more request is 503 saying so, and is served again once one closes.
fn a_connection_past_the_bound_is_503_until_one_closes(shared: &Shared) -> Result<(), String> {
    let ws = expose(&shared.home, &shared.id, WS_PORT);
    let http = expose(&shared.home, &shared.id, HTTP_PORT);
    shared.runtime.block_on(async {
        let mut open = Vec::new();
        for i in 0..MAX_CONNECTIONS {
            let mut socket = websocket(&ws)
                .await
                .map_err(|e| format!("tunnel {i}: {e}"))?;
            // The tunnel reaches the guest's server: it echoes.
            socket
                .send(Message::text(format!("tunnel {i}")))
                .await
                .map_err(|e| e.to_string())?;
            let echo = tokio::time::timeout(Duration::from_secs(60), socket.next())
                .await
                .map_err(|_| format!("no echo on tunnel {i}"))?;
            assert!(
                matches!(&echo, Some(Ok(m)) if *m == Message::text(format!("tunnel {i}"))),
                "tunnel {i}: {echo:?}"
            );
            open.push(socket);
        }
        let (status, _, body) = get(&http, "/small", &token(&http)).await?;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{}", text(&body));
        let body = text(&body);
        assert!(
            body.contains(&shared.id) && body.contains(&MAX_CONNECTIONS.to_string()),
            "{body}"
        );
        // One closes: requests are served again.
        let mut closed = open.pop().ok_or("no tunnel")?;
        closed.close(None).await.map_err(|e| e.to_string())?;
        drop(closed);
        let began = Instant::now();
        loop {
            let (status, _, body) = get(&http, "/small", &token(&http)).await?;
            if status == StatusCode::OK {
                assert_eq!(&body[..], b"hello\n");
                break;
            }
            if began.elapsed() > Duration::from_secs(30) {
                return Err(format!(
                    "still {status} 30 s after a tunnel closed: {}",
                    text(&body)
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        drop(open);
        Ok(())
    })
}

fn a_sandbox_paused_to_disk_answers_its_first_request(shared: &Shared) -> Result<(), String> {
    let exposed = expose(&shared.home, &shared.id, HTTP_PORT);
    shared.home.ok(&["pause", "--to-disk", &shared.id]);
    let listed = shared.home.ok(&["ls", "--json"]);
    assert!(listed.contains("on-disk"), "{listed}");
    shared.runtime.block_on(async {
        let (status, headers, body) = get(&exposed, "/small", &token(&exposed)).await?;
        assert_eq!(status, StatusCode::OK, "{}", text(&body));
        assert_eq!(&body[..], b"hello\n");
        let timing = headers
            .get("server-timing")
            .ok_or("no Server-Timing header on the resuming request")?
            .to_str()
            .unwrap();
        assert!(timing.starts_with("resume;dur="), "{timing}");
        Ok(())
    })
}
