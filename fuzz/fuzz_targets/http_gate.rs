//! The HTTP gate (the gateway's `secrets::serve_http`): a guest's plain HTTP
//! connection to a host secrets are bound to, served by hyper, checked and
//! rewritten, and sent on to a real upstream server on the host's loopback
//! that records every request it gets.
//!
//! Input: `[host choice: u8][bytes the guest sends, then closes]`, with
//! `{API}`, `{KEY}`, `{ELSE}`, `{WILD}` standing for placeholders.
//!
//! Invariants: every request the upstream receives names the connection's
//! host, in origin-form, without placeholders, hop-by-hop headers or the
//! value of a secret not bound to that host (unless the guest wrote that
//! value itself): so no refused request reaches it. The gate ends when the
//! guest is done, never hangs.
#![no_main]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use airlock_gateway::fuzzing::{serve_http, HttpGate, HttpRefusal, Upstream};
use airlock_fuzz::{
    block_on, bound, count, holds_placeholder, host_of_header, secrets, with_placeholders, Input,
    HOSTS, SECRETS,
};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the upstream server received: one request's method, target and
/// head as text.
#[derive(Debug, Clone)]
struct Received {
    method: http::Method,
    target: String,
    hosts: Vec<String>,
    head: Vec<u8>,
}

/// The upstream server, one per process, and what it has received.
struct Recorder {
    addr: SocketAddr,
    received: Arc<Mutex<Vec<Received>>>,
}

fn upstream() -> &'static Recorder {
    static SERVER: OnceLock<Recorder> = OnceLock::new();
    SERVER.get_or_init(|| {
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let sink = Arc::clone(&received);
        let addr = block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind the upstream");
            let addr = listener.local_addr().expect("upstream address");
            tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let sink = Arc::clone(&sink);
                    let service = service_fn(move |request: http::Request<Incoming>| {
                        let sink = Arc::clone(&sink);
                        async move {
                            record(&sink, &request);
                            // Bodies are read (bounded) as a server would.
                            let _ = Limited::new(request.into_body(), 1 << 20).collect().await;
                            Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                                Bytes::from_static(b"upstream"),
                            )))
                        }
                    });
                    tokio::spawn(
                        hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service),
                    );
                }
            });
            addr
        });
        Recorder { addr, received }
    })
}

fn record(sink: &Mutex<Vec<Received>>, request: &http::Request<Incoming>) {
    let mut head = request.uri().to_string().into_bytes();
    for (name, value) in request.headers() {
        head.push(b'\n');
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
    }
    let hosts = request
        .headers()
        .get_all(http::header::HOST)
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .collect();
    if let Ok(mut list) = sink.lock() {
        list.push(Received {
            method: request.method().clone(),
            target: request.uri().to_string(),
            hosts,
            head,
        });
    }
}

fuzz_target!(|data: &[u8]| {
    let server = upstream();
    let mut input = Input::new(data);
    let host = HOSTS[usize::from(input.u8()) % HOSTS.len()];
    let sent = with_placeholders(input.rest());
    server.received.lock().expect("received").clear();
    let refusals: Arc<Mutex<Vec<HttpRefusal>>> = Arc::default();
    let sink = Arc::clone(&refusals);
    let gate = HttpGate {
        expected_host: host.to_owned(),
        secrets: secrets().clone(),
        upstream: Upstream::Plain { addr: server.addr },
        max_header_bytes: 16 << 10,
        header_timeout: Duration::from_secs(5),
        on_refusal: Arc::new(move |refusal| {
            if let Ok(mut list) = sink.lock() {
                list.push(refusal);
            }
        }),
        // A plain upstream has no certificate to distrust.
        on_untrusted: Arc::new(|_| {}),
    };

    let guest_bytes = sent.clone();
    let finished = block_on(async move {
        let (mut guest, host_side) = tokio::io::duplex(64 << 10);
        let served = tokio::spawn(serve_http(host_side, gate));
        let guest_task = tokio::spawn(async move {
            let _ = guest.write_all(&guest_bytes).await;
            let _ = guest.shutdown().await;
            let mut answers = Vec::new();
            let _ = guest.read_to_end(&mut answers).await;
            answers
        });
        let outcome = tokio::time::timeout(Duration::from_secs(20), async {
            let _ = served.await;
            guest_task.await
        })
        .await;
        // Let the upstream's connection tasks finish recording.
        tokio::task::yield_now().await;
        outcome.is_ok()
    });
    assert!(
        finished,
        "the gate did not finish serving a closed connection"
    );

    let received = server.received.lock().expect("received").clone();
    for request in &received {
        assert!(
            request.method != http::Method::CONNECT,
            "CONNECT reached upstream"
        );
        assert!(
            request.target.starts_with('/') || request.target == "*",
            "target {}",
            request.target
        );
        let [named] = &request.hosts[..] else {
            panic!("{} Host headers reached upstream", request.hosts.len())
        };
        let named = host_of_header(named);
        assert_eq!(named, host, "a request for another host reached upstream");
        if let Some(name) = holds_placeholder(&request.head) {
            panic!("the placeholder of {name} reached upstream");
        }
        for secret in SECRETS {
            if !bound(&secret, host) {
                assert!(
                    count(&request.head, secret.value.as_bytes())
                        <= count(&sent, secret.value.as_bytes()),
                    "the value of {} reached {host}",
                    secret.name
                );
            }
        }
        for name in [
            "connection",
            "proxy-connection",
            "proxy-authorization",
            "keep-alive",
            "te",
            "upgrade",
        ] {
            let line = format!("\n{name}: ");
            assert!(
                count(&request.head, line.as_bytes()) == 0,
                "{name} reached upstream"
            );
        }
    }
});
