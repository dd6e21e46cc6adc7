//! What a stranger learns by probing the ingress (process backend, the
//! "guest's" server on the host's loopback): ids are 128 random bits, an
//! address refused too often is answered 429 while others are served, and
//! a request naming its token or Host twice is refused 400 rather than
//! tried in turn.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use airlock_client::api;
use airlock_testkit::{create, create_sandbox, run, Options, TestServer};
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpSocket};

/// A "guest" HTTP server on the host's loopback answering `hello`.
async fn guest_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(|_: Request<hyper::body::Incoming>| async {
                        Ok::<_, std::convert::Infallible>(http::Response::new(
                            http_body_util::Full::new(Bytes::from_static(b"hello")),
                        ))
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    port
}

/// A GET to the ingress at `addr` from the loopback address `from`, with
/// `headers` (a name may repeat).
async fn get_from(
    from: Ipv4Addr,
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, HeaderMap, String) {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(IpAddr::V4(from), 0)).unwrap();
    let stream = socket.connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut request = Request::get(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = sender
        .send_request(request.body(Empty::<Bytes>::new()).unwrap())
        .await
        .unwrap();
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    (
        parts.status,
        parts.headers,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

const HOME: Ipv4Addr = Ipv4Addr::LOCALHOST;
const PROBER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

#[tokio::test]
async fn ids_are_long_and_random_and_probing_the_ingress_is_throttled_per_address() {
    let server = TestServer::start(Options::default()).await;
    let owner = server.owner().await;
    let id = create_sandbox(&owner, create()).await;
    let second = create_sandbox(&owner, create()).await;
    for id in [&id, &second] {
        let random = id.strip_prefix("sandbox-").expect("the prefix");
        assert_eq!(random.len(), 32, "128 bits in hex: {id}");
        assert!(
            random
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
            "lowercase hex, the same after a browser lowercases it: {id}"
        );
    }
    assert_ne!(id, second);

    let port = guest_server().await;
    let host = owner
        .ingress()
        .get_host(api::GetHostRequest {
            sandbox_id: id.clone(),
            port: u32::from(port),
        })
        .await
        .unwrap()
        .into_inner();
    let ok = |status: StatusCode, body: &str| {
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body, "hello");
    };
    let (status, _, body) = get_from(
        HOME,
        server.ingress,
        "/",
        &[("host", &host.host), ("x-airlock-token", &host.token)],
    )
    .await;
    ok(status, &body);

    // Named twice: refused, even when one of the two is right.
    let (status, _, body) = get_from(
        HOME,
        server.ingress,
        "/",
        &[
            ("host", &host.host),
            ("x-airlock-token", "at_wrong"),
            ("x-airlock-token", &host.token),
        ],
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("more than one X-Airlock-Token"), "{body}");
    let (status, _, body) = get_from(
        HOME,
        server.ingress,
        &format!("/?airlock_token=at_wrong&airlock_token={}", host.token),
        &[("host", &host.host)],
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("more than one airlock_token"), "{body}");
    let (status, _, body) = get_from(
        HOME,
        server.ingress,
        "/",
        &[
            ("host", &host.host),
            ("host", "1-sandbox-other.airlock.localhost"),
            ("x-airlock-token", &host.token),
        ],
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("more than one Host"), "{body}");
    // The header wins over a cookie; the first cookie of the name is the one.
    let (status, _, body) = get_from(
        HOME,
        server.ingress,
        "/",
        &[
            ("host", &host.host),
            (
                "cookie",
                &format!("airlock_token={}; airlock_token=at_wrong", host.token),
            ),
        ],
    )
    .await;
    ok(status, &body);
    let (status, _, _) = get_from(
        HOME,
        server.ingress,
        "/",
        &[
            ("host", &host.host),
            (
                "cookie",
                &format!("airlock_token=at_wrong; airlock_token={}", host.token),
            ),
        ],
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // A prober guessing ids from another address: 404s, then 429.
    let mut refused = 0;
    let retry = loop {
        let guess = format!("{port}-sandbox-{:032x}.airlock.localhost", refused + 1);
        let (status, headers, body) =
            get_from(PROBER, server.ingress, "/", &[("host", &guess)]).await;
        if status == StatusCode::TOO_MANY_REQUESTS {
            assert!(body.contains("127.0.0.2"), "{body}");
            break headers["retry-after"]
                .to_str()
                .unwrap()
                .parse::<u64>()
                .unwrap();
        }
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        refused += 1;
        assert!(refused <= 21, "never throttled after {refused} refusals");
    };
    assert!(refused >= 20, "throttled after only {refused} refusals");
    assert!(retry >= 1, "{retry}");
    // Guessing tokens counts too, and a right one does not lift the block.
    let (status, _, _) = get_from(
        PROBER,
        server.ingress,
        "/",
        &[("host", &host.host), ("x-airlock-token", &host.token)],
    )
    .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);

    // Everyone else is served meanwhile: the same sandbox from the home
    // address, the API for the owner and for a key.
    let (status, _, body) = get_from(
        HOME,
        server.ingress,
        "/",
        &[("host", &host.host), ("x-airlock-token", &host.token)],
    )
    .await;
    ok(status, &body);
    let (out, _, exit) = run(&owner, &second, &["echo", "served"]).await;
    assert_eq!((out.as_slice(), exit.exit_code), (&b"served\n"[..], 0));
    let key = server.key("bob", api::KeyQuota::default()).await;
    let bob = server.remote(Some(&key)).await;
    let theirs = create_sandbox(&bob, create()).await;
    let (out, _, _) = run(&bob, &theirs, &["echo", "bob"]).await;
    assert_eq!(out, b"bob\n");
}
