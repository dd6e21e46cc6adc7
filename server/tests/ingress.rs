//! The HTTP ingress and `Ingress` calls on the process backend: the agent
//! runs on the host, so a guest port is a port on the host's loopback,
//! where each test runs the "guest's" server. Routes by host and by path,
//! the token (header, query + cookie, another sandbox's, rotated), public
//! ports, refusals (404, 401, 502) and their audit records, and a
//! forwarded raw TCP connection.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;

use airlock_client::api;
use airlock_testkit::{create, create_sandbox, Options, TestServer};
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_stream::wrappers::ReceiverStream;

/// A "guest" HTTP server on the host's loopback that answers every request
/// with its own path and the headers it got (one per line); returns its
/// port.
async fn guest_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    |request: Request<hyper::body::Incoming>| async move {
                        if request.method() == http::Method::POST {
                            // An upload: its length and SHA-256.
                            let body = request.into_body().collect().await.unwrap().to_bytes();
                            let text = format!("got {} bytes sha256 {}", body.len(), sha256(&body));
                            return Ok::<_, std::convert::Infallible>(http::Response::new(
                                http_body_util::Full::new(Bytes::from(text)),
                            ));
                        }
                        if request.uri().path() == "/slow" {
                            tokio::time::sleep(std::time::Duration::from_secs(3)).await;
                        }
                        let mut text = format!("path {}\n", request.uri());
                        for (name, value) in request.headers() {
                            text.push_str(&format!("{name}: {}\n", value.to_str().unwrap_or("?")));
                        }
                        Ok::<_, std::convert::Infallible>(http::Response::new(
                            http_body_util::Full::new(Bytes::from(text)),
                        ))
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    port
}

fn sha256(data: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A port nothing listens on.
async fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().port()
}

/// A GET to the ingress at `addr` with `host` and `path` and `headers`.
async fn get(
    addr: SocketAddr,
    host: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, HeaderMap, String) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut request = Request::get(path).header("host", host);
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

async fn host_of(client: &airlock_client::Client, id: &str, port: u16) -> api::GetHostResponse {
    client
        .ingress()
        .get_host(api::GetHostRequest {
            sandbox_id: id.to_owned(),
            port: u32::from(port),
        })
        .await
        .unwrap()
        .into_inner()
}

#[tokio::test]
async fn a_private_port_needs_its_sandboxs_token_by_host_or_by_path() {
    let server = TestServer::start(Options::default()).await;
    let owner = server.owner().await;
    let id = create_sandbox(&owner, create()).await;
    let other = create_sandbox(&owner, create()).await;
    let port = guest_server().await;
    let host = host_of(&owner, &id, port).await;
    let other_token = host_of(&owner, &other, port).await.token;
    assert!(!host.public);
    let ping = owner.ping().await.unwrap();
    assert!(ping.features.iter().any(|f| f == "ingress"), "{ping:?}");
    assert!(
        ping.api_revision >= 3,
        "ingress came with revision 3: {ping:?}"
    );
    assert_eq!(
        host.host,
        format!(
            "{port}-{}.airlock.localhost:{}",
            id.to_ascii_lowercase(),
            server.ingress.port()
        )
    );
    assert_eq!(
        host.url,
        format!("http://{}/?airlock_token={}", host.host, host.token)
    );
    assert_eq!(host.address, server.ingress.to_string());
    assert_ne!(host.token, other_token);

    // No token, another sandbox's token: 401, naming the sandbox and port.
    let (status, _, body) = get(server.ingress, &host.host, "/", &[]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(
        body.contains(&id) && body.contains(&port.to_string()),
        "{body}"
    );
    let (status, _, _) = get(
        server.ingress,
        &host.host,
        "/",
        &[("x-airlock-token", &other_token)],
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // The header: the guest's server answers, without seeing the token.
    let (status, _, body) = get(
        server.ingress,
        &host.host,
        "/a?b=1",
        &[("x-airlock-token", &host.token)],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.starts_with("path /a?b=1\n"), "{body}");
    assert!(body.contains(&format!("host: {}", host.host)), "{body}");
    assert!(body.contains("x-forwarded-for: 127.0.0.1"), "{body}");
    assert!(!body.contains(&host.token), "{body}");

    // The query: a cookie for this host and a redirect without the token.
    let (status, headers, _) = get(
        server.ingress,
        &host.host,
        &format!("/x?q=1&airlock_token={}", host.token),
        &[],
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers["location"], "/x?q=1");
    let cookie = headers["set-cookie"].to_str().unwrap();
    assert!(
        cookie.starts_with(&format!("airlock_token={};", host.token)),
        "{cookie}"
    );
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("Path=/;"),
        "{cookie}"
    );
    let jar = format!("a=1; airlock_token={}", host.token);
    let (status, _, body) = get(server.ingress, &host.host, "/x?q=1", &[("cookie", &jar)]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        body.contains("cookie: a=1\n") && !body.contains(&host.token),
        "{body}"
    );

    // By path, on any host: the prefix is taken off.
    assert_eq!(
        host.path_url,
        format!("http://{}/_sandbox/{id}/{port}/", server.ingress)
    );
    let path = format!("/_sandbox/{id}/{port}/deep/er");
    let (status, _, body) = get(
        server.ingress,
        "127.0.0.1",
        &path,
        &[("x-airlock-token", &host.token)],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.starts_with("path /deep/er\n"), "{body}");

    // A rotated token: the old one is refused, the new one works.
    let rotated = owner
        .ingress()
        .rotate_token(api::RotateTokenRequest {
            sandbox_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .token;
    assert_ne!(rotated, host.token);
    let (status, _, _) = get(
        server.ingress,
        &host.host,
        "/",
        &[("x-airlock-token", &host.token)],
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, _) = get(
        server.ingress,
        &host.host,
        "/",
        &[("x-airlock-token", &rotated)],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(host_of(&owner, &id, port).await.token, rotated);
    server.stop().await;
}

#[tokio::test]
async fn refusals_say_what_happened_and_go_to_the_audit_log() {
    let server = TestServer::start(Options::default()).await;
    let owner = server.owner().await;
    let id = create_sandbox(&owner, create()).await;
    let closed = closed_port().await;
    let host = host_of(&owner, &id, closed).await;
    let token = [("x-airlock-token", host.token.as_str())];

    let (status, _, body) = get(server.ingress, &host.host, "/", &token).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    assert!(
        body.contains(&format!(
            "sandbox {id} port {closed}: nothing listens on guest port {closed}"
        )),
        "{body}"
    );
    let (status, _, body) = get(
        server.ingress,
        &format!("{closed}-nosuch.airlock.localhost"),
        "/",
        &token,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body.contains("no sandbox nosuch"), "{body}");
    let (status, _, _) = get(server.ingress, "example.com", "/", &token).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // A head past the bound (64 KiB) is refused before anything else.
    let huge = "x".repeat(70 * 1024);
    let (status, _, _) = get(server.ingress, &host.host, "/", &[("x-huge", &huge)]).await;
    assert_eq!(status, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    let (status, _, _) = get(server.ingress, &host.host, "/", &[]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let port = guest_server().await;
    let (status, _, _) = get(
        server.ingress,
        &host_of(&owner, &id, port).await.host,
        "/",
        &token,
    )
    .await;
    assert_eq!(status, StatusCode::OK);

    let records = owner
        .network()
        .audit(api::AuditRequest {
            sandbox_id: id.clone(),
            after_seq: 0,
        })
        .await
        .unwrap()
        .into_inner()
        .records;
    let lines: Vec<(String, u32, String)> = records
        .iter()
        .map(|r| (r.protocol.clone(), r.port, r.verdict.clone()))
        .collect();
    assert_eq!(
        lines,
        [
            (
                "ingress".to_owned(),
                u32::from(closed),
                "refused: nothing listens on the guest port".to_owned()
            ),
            (
                "ingress".to_owned(),
                u32::from(closed),
                "refused: no traffic token for a private port".to_owned()
            ),
            ("ingress".to_owned(), u32::from(port), "allowed".to_owned()),
        ]
    );
    assert_eq!(records[0].name, "from 127.0.0.1");
    server.stop().await;
}

#[tokio::test]
async fn a_public_port_needs_no_token_and_another_keys_sandbox_stays_private() {
    let server = TestServer::start(Options::default()).await;
    let owner = server.owner().await;
    let port = guest_server().await;
    let id = create_sandbox(
        &owner,
        api::CreateSandboxRequest {
            public_ports: vec![u32::from(port)],
            ..create()
        },
    )
    .await;
    let info = owner
        .sandboxes()
        .get(api::GetSandboxRequest {
            sandbox_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.public_ports, [u32::from(port)]);
    let host = host_of(&owner, &id, port).await;
    assert!(host.public && host.token.is_empty());
    assert_eq!(host.url, format!("http://{}/", host.host));
    let (status, _, _) = get(server.ingress, &host.host, "/", &[]).await;
    assert_eq!(status, StatusCode::OK);

    // A key sees neither the owner's sandbox nor its token.
    let key = server.key("alice", api::KeyQuota::default()).await;
    let alice = server.remote(Some(&key)).await;
    let refused = alice
        .ingress()
        .get_host(api::GetHostRequest {
            sandbox_id: id.clone(),
            port: 1,
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::NotFound);
    let mine = create_sandbox(
        &alice,
        api::CreateSandboxRequest {
            timeout_secs: Some(600),
            ..create()
        },
    )
    .await;
    let my_token = host_of(&alice, &mine, port).await.token;
    let owners_private = host_of(&owner, &id, port + 1).await;
    let (status, _, _) = get(
        server.ingress,
        &owners_private.host,
        "/",
        &[("x-airlock-token", &my_token)],
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    server.stop().await;
}

#[tokio::test]
async fn forward_carries_a_raw_connection_both_ways() {
    let server = TestServer::start(Options::default()).await;
    let owner = server.owner().await;
    let id = create_sandbox(&owner, create()).await;
    // A "guest" that reads to end of file, then answers what it read,
    // reversed.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut got = Vec::new();
        stream.read_to_end(&mut got).await.unwrap();
        got.reverse();
        stream.write_all(&got).await.unwrap();
    });
    let (send, requests) = tokio::sync::mpsc::channel(4);
    let event = |e| api::ForwardRequest { event: Some(e) };
    send.send(event(api::forward_request::Event::Open(api::ForwardOpen {
        sandbox_id: id.clone(),
        port: u32::from(port),
    })))
    .await
    .unwrap();
    let mut incoming = owner
        .ingress()
        .forward(ReceiverStream::new(requests))
        .await
        .unwrap()
        .into_inner();
    let first = incoming.message().await.unwrap().unwrap();
    assert!(matches!(
        first.event,
        Some(api::forward_response::Event::Connected(_))
    ));
    let sent: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
    for chunk in sent.chunks(30_000) {
        send.send(event(api::forward_request::Event::Data(
            chunk.to_vec().into(),
        )))
        .await
        .unwrap();
    }
    send.send(event(api::forward_request::Event::Eof(true)))
        .await
        .unwrap();
    let mut got = Vec::new();
    loop {
        match incoming.message().await.unwrap().unwrap().event {
            Some(api::forward_response::Event::Data(data)) => got.extend_from_slice(&data),
            Some(api::forward_response::Event::Eof(_)) => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    drop(send);
    let mut want = sent;
    want.reverse();
    assert!(got == want, "{} bytes back, changed", got.len());

    // Nothing listening: PORT_CLOSED, naming sandbox and port.
    let closed = closed_port().await;
    let (send, requests) = tokio::sync::mpsc::channel(1);
    send.send(event(api::forward_request::Event::Open(api::ForwardOpen {
        sandbox_id: id.clone(),
        port: u32::from(closed),
    })))
    .await
    .unwrap();
    let status = owner
        .ingress()
        .forward(ReceiverStream::new(requests))
        .await
        .unwrap_err();
    assert_eq!(
        airlock_client::reason::reason_of(&status),
        Some(api::ErrorReason::PortClosed)
    );
    assert!(
        status
            .message()
            .contains(&format!("sandbox {id} port {closed}")),
        "{status}"
    );
    server.stop().await;
}

/// An HTTP/2 connection to the ingress over TLS (ALPN `h2`), trusting `ca`.
async fn h2_connect(
    addr: SocketAddr,
    ca: &std::path::Path,
) -> hyper::client::conn::http2::SendRequest<http_body_util::Full<Bytes>> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        TokioIo::new(tls),
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    sender
}

#[tokio::test]
async fn http2_over_tls_carries_concurrent_requests_and_a_large_upload() {
    let server = TestServer::start(Options {
        ingress_tls: true,
        ..Options::default()
    })
    .await;
    let owner = server.owner().await;
    let id = create_sandbox(&owner, create()).await;
    let port = guest_server().await;
    let host = host_of(&owner, &id, port).await;
    assert!(host.url.starts_with("https://"), "{}", host.url);
    let sender = h2_connect(server.ingress, server.ingress_ca.as_ref().unwrap()).await;

    // Ten requests at once on one connection, each answered.
    let requests: Vec<_> = (0..10)
        .map(|i| {
            let mut sender = sender.clone();
            let uri = format!("https://{}/r{i}", host.host);
            let token = host.token.clone();
            tokio::spawn(async move {
                sender.ready().await.unwrap();
                let request = Request::get(uri)
                    .header("x-airlock-token", token)
                    .body(http_body_util::Full::new(Bytes::new()))
                    .unwrap();
                let response = sender.send_request(request).await.unwrap();
                assert_eq!(response.version(), http::Version::HTTP_2);
                let status = response.status();
                let body = response.into_body().collect().await.unwrap().to_bytes();
                (status, String::from_utf8_lossy(&body).into_owned())
            })
        })
        .collect();
    for (i, request) in requests.into_iter().enumerate() {
        let (status, body) = request.await.unwrap();
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(body.starts_with(&format!("path /r{i}\n")), "{body}");
        assert!(body.contains(&format!("host: {}", host.host)), "{body}");
        assert!(body.contains("x-forwarded-proto: https"), "{body}");
    }

    // 8 MiB up: the guest's server gets every byte.
    let upload: Vec<u8> = (0..8 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let mut sender = sender.clone();
    sender.ready().await.unwrap();
    let request = Request::post(format!("https://{}/upload", host.host))
        .header("x-airlock-token", &host.token)
        .body(http_body_util::Full::new(Bytes::from(upload.clone())))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        String::from_utf8_lossy(&body),
        format!("got {} bytes sha256 {}", upload.len(), sha256(&upload))
    );
    server.stop().await;
}

async fn state_of(client: &airlock_client::Client, id: &str) -> api::SandboxState {
    client
        .sandboxes()
        .get(api::GetSandboxRequest {
            sandbox_id: id.to_owned(),
        })
        .await
        .unwrap()
        .into_inner()
        .state()
}

#[tokio::test]
async fn a_request_resumes_a_paused_sandbox_and_counts_as_activity() {
    let server = TestServer::start(Options::default()).await;
    let owner = server.owner().await;
    let id = create_sandbox(
        &owner,
        api::CreateSandboxRequest {
            idle: Some(api::Idle {
                timeout_secs: 1,
                policy: api::IdlePolicy::Pause.into(),
            }),
            ..create()
        },
    )
    .await;
    let port = guest_server().await;
    let host = host_of(&owner, &id, port).await;
    let token = [("x-airlock-token", host.token.as_str())];
    let began = std::time::Instant::now();
    while state_of(&owner, &id).await != api::SandboxState::Paused {
        assert!(began.elapsed().as_secs() < 20, "the sandbox never idled");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // The request resumes it and says how long that took.
    let (status, headers, body) = get(server.ingress, &host.host, "/", &token).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let timing = headers["server-timing"].to_str().unwrap();
    assert!(timing.starts_with("resume;dur="), "{timing}");
    // A request that takes 3 s keeps it running past its 1 s idle timeout.
    let slow = tokio::spawn({
        let host = host.host.clone();
        let token = host_of(&owner, &id, port).await.token;
        let ingress = server.ingress;
        async move { get(ingress, &host, "/slow", &[("x-airlock-token", &token)]).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    assert_eq!(state_of(&owner, &id).await, api::SandboxState::Running);
    let (status, headers, _) = slow.await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert!(headers.get("server-timing").is_none(), "it was not paused");
    server.stop().await;
}

#[tokio::test]
async fn a_server_without_ingress_says_how_to_serve_it() {
    let server = TestServer::start(Options {
        without_ingress: true,
        ..Options::default()
    })
    .await;
    let owner = server.owner().await;
    let id = create_sandbox(&owner, create()).await;
    let ping = owner.ping().await.unwrap();
    assert!(!ping.features.iter().any(|f| f == "ingress"), "{ping:?}");
    let refused = owner
        .ingress()
        .get_host(api::GetHostRequest {
            sandbox_id: id,
            port: 8000,
        })
        .await
        .unwrap_err();
    assert_eq!(
        airlock_client::reason::reason_of(&refused),
        Some(api::ErrorReason::Unsupported)
    );
    assert!(refused.message().contains("--ingress"), "{refused}");
    server.stop().await;
}
