//! The E2B front's control plane on the process backend, over raw HTTP as
//! E2B's SDKs send it: create (as E2B's JSON answers it), get, list with
//! metadata and pages, timeout, connect, kill; another key's sandbox is
//! 404, a wrong key 401; bad input (malformed JSON, a wrong type, an
//! unknown template, an oversized body) gets E2B's error shape and the
//! server keeps serving; and a sandbox's other port reached through the
//! front, carried by the ingress with its token rules, and the sandbox's
//! logs (its ingress decisions, a refusal a warning), in both versions;
//! the v1 list, several sandboxes' metrics, resume, what Airlock lacks
//! (template builds: 501 in E2B's shape), and a malformed protobuf message
//! to envd refused as Connect's `invalid_argument`; snapshots' refusals
//! (a filesystem-only snapshot, a bad name, another key's sandbox, an
//! unknown snapshot to delete or start from, an image not deleted here)
//! and the empty list; `DELETE /templates/{id}` deleting a key's own
//! template, never another key's or the server's.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;

use airlock_client::api;
use airlock_testkit::{create, Options, TestServer};
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpListener;

/// One request to the front: (status, x-next-token, body as JSON or Null).
/// The body is JSON unless `headers` name another `content-type`.
async fn call(
    front: SocketAddr,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> (StatusCode, Option<String>, Value) {
    let stream = tokio::net::TcpStream::connect(front).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", front.to_string());
    if !headers.iter().any(|(name, _)| *name == "content-type") {
        request = request.header("content-type", "application/json");
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = sender
        .send_request(request.body(Full::new(Bytes::from(body))).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let next = response
        .headers()
        .get("x-next-token")
        .map(|v| v.to_str().unwrap().to_owned());
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let json = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, next, json)
}

/// A sandbox of `key` made over gRPC (the process backend runs no image).
async fn sandbox_of(server: &TestServer, key: &str, labels: &[(&str, &str)]) -> String {
    let client = server.remote(Some(key)).await;
    let mut request = create();
    request.metadata = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    request.timeout_secs = Some(600);
    client
        .sandboxes()
        .create(request)
        .await
        .unwrap()
        .into_inner()
        .sandbox_id
}

#[tokio::test]
async fn the_control_plane_answers_as_e2b_and_keeps_tenancy() {
    let server = TestServer::start(Options::default()).await;
    let key = server.key("e2b", api::KeyQuota::default()).await;
    let other = server.key("e2b-other", api::KeyQuota::default()).await;
    let me = [("x-api-key", key.as_str())];
    let them = [("x-api-key", other.as_str())];
    let front = server.e2b;

    let a = sandbox_of(&server, &key, &[("tag", "t1"), ("n", "1")]).await;
    let b = sandbox_of(&server, &key, &[("tag", "t1"), ("n", "2")]).await;

    // get: E2B's detail, with the access token the envd calls need.
    let (status, _, detail) =
        call(front, Method::GET, &format!("/sandboxes/{a}"), &me, vec![]).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    assert_eq!(detail["sandboxID"], a.as_str());
    assert_eq!(detail["state"], "running");
    assert_eq!(detail["metadata"]["tag"], "t1");
    assert_eq!(detail["envdVersion"], "0.6.4");
    assert!(detail["envdAccessToken"]
        .as_str()
        .unwrap()
        .starts_with("at_"));
    assert!(detail["startedAt"].as_str().unwrap().ends_with('Z'));

    // list: the metadata filter as the Python SDK encodes it, in pages.
    let filter = "/v2/sandboxes?metadata=tag%3Dt1&limit=1";
    let (status, next, page) = call(front, Method::GET, filter, &me, vec![]).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(page.as_array().unwrap().len(), 1);
    let next = next.expect("x-next-token on a page that is not the last");
    let (_, last, rest) = call(
        front,
        Method::GET,
        &format!("{filter}&nextToken={next}"),
        &me,
        vec![],
    )
    .await;
    assert!(last.is_none());
    let mut seen: Vec<String> = page
        .as_array()
        .unwrap()
        .iter()
        .chain(rest.as_array().unwrap())
        .map(|s| s["sandboxID"].as_str().unwrap().to_owned())
        .collect();
    seen.sort();
    let mut both = vec![a.clone(), b.clone()];
    both.sort();
    assert_eq!(seen, both);
    let (_, _, one) = call(
        front,
        Method::GET,
        "/v2/sandboxes?metadata=tag%3Dt1%26n%3D2",
        &me,
        vec![],
    )
    .await;
    assert_eq!(one.as_array().unwrap().len(), 1);
    assert_eq!(one[0]["sandboxID"], b.as_str());

    // timeout and connect.
    let (status, _, _) = call(
        front,
        Method::POST,
        &format!("/sandboxes/{a}/timeout"),
        &me,
        br#"{"timeout": 900}"#.to_vec(),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _, connected) = call(
        front,
        Method::POST,
        &format!("/v2/sandboxes/{a}/connect"),
        &me,
        br#"{"timeout": 60}"#.to_vec(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{connected}");
    assert_eq!(connected["sandboxID"], a.as_str());
    assert_eq!(connected["envdAccessToken"], detail["envdAccessToken"]);

    // refreshes (never shortens the life), the templates, several metrics.
    let (status, _, _) = call(
        front,
        Method::POST,
        &format!("/sandboxes/{a}/refreshes"),
        &me,
        br#"{"duration": 5}"#.to_vec(),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (_, _, after) = call(front, Method::GET, &format!("/sandboxes/{a}"), &me, vec![]).await;
    assert!(
        after["endAt"].as_str().unwrap() > detail["endAt"].as_str().unwrap(),
        "{after}"
    );
    let (status, _, templates) = call(front, Method::GET, "/templates", &me, vec![]).await;
    assert_eq!(status, StatusCode::OK, "{templates}");
    assert!(templates.is_array());
    let (status, _, logs) = call(
        front,
        Method::GET,
        &format!("/sandboxes/{a}/logs?limit=0"),
        &me,
        vec![],
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{logs}");
    assert!(
        logs["message"].as_str().unwrap().starts_with("limit"),
        "{logs}"
    );

    // Another key: not found, exactly as a sandbox that does not exist.
    for (method, path) in [
        (Method::GET, format!("/sandboxes/{a}")),
        (Method::DELETE, format!("/sandboxes/{a}")),
        (Method::POST, format!("/sandboxes/{a}/timeout")),
        (Method::POST, format!("/v2/sandboxes/{a}/connect")),
        (Method::GET, "/sandboxes/sandbox-nonesuch".to_owned()),
    ] {
        let (status, _, error) =
            call(front, method, &path, &them, br#"{"timeout": 5}"#.to_vec()).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {error}");
        assert_eq!(error["code"], 404);
    }
    let (_, _, theirs) = call(front, Method::GET, "/v2/sandboxes", &them, vec![]).await;
    assert_eq!(theirs.as_array().unwrap().len(), 0);

    // A wrong key, or none: 401 in E2B's shape.
    let (status, _, error) = call(
        front,
        Method::GET,
        "/v2/sandboxes",
        &[("x-api-key", "nope")],
        vec![],
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(error["code"], 401);

    // Bad input: E2B's error shape, naming what is wrong.
    let bad: [(&[u8], StatusCode, &str); 4] = [
        (b"{not json", StatusCode::BAD_REQUEST, "JSON"),
        (
            br#"{"templateID": "base", "timeout": "soon"}"#,
            StatusCode::BAD_REQUEST,
            "timeout",
        ),
        (br#"{"timeout": 5}"#, StatusCode::BAD_REQUEST, "templateID"),
        (
            br#"{"templateID": "no-such-image"}"#,
            StatusCode::NOT_FOUND,
            "no-such-image",
        ),
    ];
    for (body, expected, named) in bad {
        let (status, _, error) =
            call(front, Method::POST, "/v2/sandboxes", &me, body.to_vec()).await;
        assert_eq!(status, expected, "{error}");
        assert!(
            error["message"].as_str().unwrap().contains(named),
            "{error}"
        );
    }
    let (status, _, error) = call(
        front,
        Method::POST,
        "/v2/sandboxes",
        &me,
        vec![b' '; 2 << 20],
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{error}");
    let (status, _, error) = call(front, Method::GET, "/v2/sandboxes?limit=0", &me, vec![]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        error["message"].as_str().unwrap().starts_with("limit"),
        "{error}"
    );

    // Kill: 204, then gone.
    let (status, _, _) = call(
        front,
        Method::DELETE,
        &format!("/sandboxes/{b}"),
        &me,
        vec![],
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _, _) = call(front, Method::GET, &format!("/sandboxes/{b}"), &me, vec![]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Still serving.
    let (status, _, _) = call(front, Method::GET, "/v2/sandboxes", &me, vec![]).await;
    assert_eq!(status, StatusCode::OK);
    server.stop().await;
}

#[tokio::test]
async fn the_v1_list_metrics_resume_and_what_airlock_lacks() {
    let server = TestServer::start(Options::default()).await;
    let key = server.key("e2b", api::KeyQuota::default()).await;
    let other = server.key("e2b-other", api::KeyQuota::default()).await;
    let me = [("x-api-key", key.as_str())];
    let front = server.e2b;
    let a = sandbox_of(&server, &key, &[("tag", "v1")]).await;
    let b = sandbox_of(&server, &key, &[]).await;
    let theirs = sandbox_of(&server, &other, &[("tag", "v1")]).await;

    // The v1 list: every running sandbox of the key, the metadata filter.
    let ids = |listed: &Value| {
        let mut ids: Vec<String> = listed
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["sandboxID"].as_str().unwrap().to_owned())
            .collect();
        ids.sort();
        ids
    };
    let (status, _, all) = call(front, Method::GET, "/sandboxes", &me, vec![]).await;
    assert_eq!(status, StatusCode::OK, "{all}");
    let mut mine = vec![a.clone(), b.clone()];
    mine.sort();
    assert_eq!(ids(&all), mine);
    let (_, _, tagged) = call(
        front,
        Method::GET,
        "/sandboxes?metadata=tag%3Dv1",
        &me,
        vec![],
    )
    .await;
    assert_eq!(ids(&tagged), std::slice::from_ref(&a));

    // Several metrics: another key's id is left out, not refused.
    let path = format!("/sandboxes/metrics?sandbox_ids={a},{theirs},{b}");
    let (status, _, metrics) = call(front, Method::GET, &path, &me, vec![]).await;
    assert_eq!(status, StatusCode::OK, "{metrics}");
    let mut read: Vec<&String> = metrics["sandboxes"].as_object().unwrap().keys().collect();
    read.sort();
    assert_eq!(read, mine.iter().collect::<Vec<_>>());
    assert!(
        metrics["sandboxes"][&a]["cpuCount"].as_u64().unwrap() >= 1,
        "{metrics}"
    );

    // Resume: 409 while running; after a pause, 201 with the sandbox.
    let resume = format!("/sandboxes/{a}/resume");
    let (status, _, error) = call(front, Method::POST, &resume, &me, b"{}".to_vec()).await;
    assert_eq!(status, StatusCode::CONFLICT, "{error}");
    assert_eq!(error["code"], 409);
    let pause = format!("/sandboxes/{a}/pause");
    let (status, _, _) = call(front, Method::POST, &pause, &me, b"{}".to_vec()).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (_, _, detail) = call(front, Method::GET, &format!("/sandboxes/{a}"), &me, vec![]).await;
    assert_eq!(detail["state"], "paused", "{detail}");
    let (status, _, resumed) = call(front, Method::POST, &resume, &me, b"{}".to_vec()).await;
    assert_eq!(status, StatusCode::CREATED, "{resumed}");
    assert_eq!(resumed["sandboxID"], a.as_str());
    let (_, _, detail) = call(front, Method::GET, &format!("/sandboxes/{a}"), &me, vec![]).await;
    assert_eq!(detail["state"], "running", "{detail}");

    // What Airlock lacks: 501 in E2B's shape, naming it; for a sandbox of
    // another key, still 404.
    for (method, path) in [
        (Method::POST, "/v3/templates".to_owned()),
        (Method::GET, "/v3/templates/some-template/builds".to_owned()),
        (
            Method::POST,
            "/v2/templates/some-template/builds/b1".to_owned(),
        ),
    ] {
        let (status, _, error) = call(front, method, &path, &me, b"{}".to_vec()).await;
        assert_eq!(status, StatusCode::NOT_IMPLEMENTED, "{path}: {error}");
        assert_eq!(error["code"], 501, "{path}: {error}");
        assert!(!error["message"].as_str().unwrap().is_empty(), "{error}");
    }

    // envd: a malformed protobuf message is Connect's invalid_argument,
    // naming the message; the sandbox's envd answers on.
    let token = detail["envdAccessToken"].as_str().unwrap().to_owned();
    let envd = [
        ("e2b-sandbox-id", a.as_str()),
        ("e2b-sandbox-port", "49983"),
        ("x-access-token", token.as_str()),
    ];
    let proto = [
        envd[0],
        envd[1],
        envd[2],
        ("content-type", "application/proto"),
    ];
    let list = "/process.Process/List";
    let (status, _, error) = call(front, Method::POST, list, &proto, vec![0x0a, 0x05, 0x01]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    assert_eq!(error["code"], "invalid_argument");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .starts_with("ListRequest: malformed protobuf"),
        "{error}"
    );
    let (status, _, listed) = call(front, Method::POST, list, &envd, b"{}".to_vec()).await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    server.stop().await;
}

#[tokio::test]
async fn snapshots_are_the_callers_and_refusals_name_what_is_wrong() {
    let server = TestServer::start(Options::default()).await;
    let key = server.key("e2b", api::KeyQuota::default()).await;
    let other = server.key("e2b-other", api::KeyQuota::default()).await;
    let me = [("x-api-key", key.as_str())];
    let front = server.e2b;
    let a = sandbox_of(&server, &key, &[]).await;
    let theirs = sandbox_of(&server, &other, &[]).await;
    let take = format!("/sandboxes/{a}/snapshots");

    // None yet: an empty page.
    let (status, next, listed) = call(front, Method::GET, "/snapshots", &me, vec![]).await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert_eq!(listed, serde_json::json!([]));
    assert!(next.is_none());
    let (status, _, error) = call(front, Method::GET, "/snapshots?limit=0", &me, vec![]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    assert!(error["message"].as_str().unwrap().starts_with("limit"));

    // mode="filesystem" (memory: false): refused by name, whatever the sandbox.
    let body = br#"{"memory": false}"#.to_vec();
    let (status, _, error) = call(front, Method::POST, &take, &me, body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    assert_eq!(error["code"], 400);
    let message = error["message"].as_str().unwrap();
    assert!(
        message.starts_with("memory") && message.contains("mode=\"filesystem\""),
        "{error}"
    );
    // A name a snapshot cannot have.
    let body = br#"{"name": "../up"}"#.to_vec();
    let (status, _, error) = call(front, Method::POST, &take, &me, body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{error}");
    assert!(error["message"].as_str().unwrap().starts_with("name"));
    // Another key's sandbox, or none: not found.
    for id in [theirs.as_str(), "sandbox-0000000000000000"] {
        let path = format!("/sandboxes/{id}/snapshots");
        let (status, _, error) = call(front, Method::POST, &path, &me, b"{}".to_vec()).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{id}: {error}");
    }
    // The process backend saves nothing: refused with the reason, in E2B's shape.
    let (status, _, error) = call(front, Method::POST, &take, &me, b"{}".to_vec()).await;
    assert!(
        status.is_client_error() || status.is_server_error(),
        "{status}: {error}"
    );
    assert_eq!(error["code"], status.as_u16(), "{error}");
    assert!(
        error["message"].as_str().unwrap().contains("saved"),
        "{error}"
    );

    // Deleting: an unknown snapshot is 404 (the SDKs' `False`); an image
    // is not deleted here.
    let (status, _, error) = call(
        front,
        Method::DELETE,
        "/templates/no-such-snapshot",
        &me,
        vec![],
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("no-such-snapshot"),
        "{error}"
    );
    let (status, _, error) = call(front, Method::DELETE, "/templates/base", &me, vec![]).await;
    assert_eq!(status, StatusCode::NOT_IMPLEMENTED, "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("airlock image rm"),
        "{error}"
    );

    // A create naming no template, image or snapshot of the caller's says so.
    let body = br#"{"templateID": "no-such-snapshot"}"#.to_vec();
    let (status, _, error) = call(front, Method::POST, "/v2/sandboxes", &me, body).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("no template, image or snapshot \"no-such-snapshot\""),
        "{error}"
    );
    server.stop().await;
}

/// Puts a template `name` into the named-template store at `dir`, as a
/// build leaves it (the process backend builds none).
fn put_template(dir: &std::path::Path, name: &str) {
    let dir = dir.join(name);
    std::fs::create_dir_all(dir.join("snapshot")).unwrap();
    std::fs::write(dir.join("snapshot/memory"), b"").unwrap();
    std::fs::write(dir.join("root.ext4"), b"").unwrap();
    let meta = airlock::template::NamedMeta {
        name: name.to_owned(),
        base: "default".to_owned(),
        rootfs: dir.join("root.ext4"),
        steps: Vec::new(),
        memory_mib: 256,
        vcpus: 1,
        env: Vec::new(),
        workdir: None,
        user: None,
        start: String::new(),
        ready: String::new(),
        start_pid: None,
        start_ticks: None,
        built_unix_secs: 0,
        build_secs: 0.0,
    };
    std::fs::write(
        dir.join("template.json"),
        serde_json::to_vec(&meta).unwrap(),
    )
    .unwrap();
}

#[tokio::test]
async fn delete_template_removes_a_keys_own_template_only() {
    let server = TestServer::start(Options::default()).await;
    let key = server.key("e2b", api::KeyQuota::default()).await;
    let other = server.key("e2b-other", api::KeyQuota::default()).await;
    let me = [("x-api-key", key.as_str())];
    let them = [("x-api-key", other.as_str())];
    let front = server.e2b;
    put_template(&server.dir.join("data/templates/keys/e2b"), "mine");
    put_template(&server.dir.join("templates"), "servers");

    // Another key's is not found; the server's own is its owner's to remove.
    let (status, _, error) = call(front, Method::DELETE, "/templates/mine", &them, vec![]).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{error}");
    let (status, _, error) = call(front, Method::DELETE, "/templates/servers", &me, vec![]).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{error}");
    // The key's own: deleted, then not found.
    let (status, _, error) = call(front, Method::DELETE, "/templates/mine", &me, vec![]).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{error}");
    let (status, _, error) = call(front, Method::DELETE, "/templates/mine", &me, vec![]).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{error}");
    let (_, _, listed) = call(front, Method::GET, "/templates", &me, vec![]).await;
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["templateID"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"servers") && !names.contains(&"mine"),
        "{listed}"
    );
    server.stop().await;
}

/// A "guest" HTTP server on the host's loopback (the process backend's
/// guest ports are the host's): answers `hello from the guest`.
async fn guest_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|_request| async {
                    Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                        Bytes::from_static(b"hello from the guest"),
                    )))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    port
}

#[tokio::test]
async fn another_port_goes_through_the_ingress_with_its_token() {
    let server = TestServer::start(Options::default()).await;
    let key = server.key("e2b", api::KeyQuota::default()).await;
    let id = sandbox_of(&server, &key, &[]).await;
    let port = guest_server().await.to_string();
    let (_, _, detail) = call(
        server.e2b,
        Method::GET,
        &format!("/sandboxes/{id}"),
        &[("x-api-key", key.as_str())],
        vec![],
    )
    .await;
    let token = detail["envdAccessToken"].as_str().unwrap().to_owned();
    let route = [
        ("e2b-sandbox-id", id.as_str()),
        ("e2b-sandbox-port", port.as_str()),
    ];

    // envd's port: the access token is checked by the front itself.
    let envd = [
        ("e2b-sandbox-id", id.as_str()),
        ("e2b-sandbox-port", "49983"),
    ];
    let (status, _, error) = call(server.e2b, Method::GET, "/health", &envd, vec![]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("X-Access-Token"),
        "{error}"
    );
    let wrong = [envd[0], envd[1], ("x-access-token", "at_wrong")];
    let (status, _, _) = call(server.e2b, Method::GET, "/health", &wrong, vec![]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let right = [envd[0], envd[1], ("x-access-token", token.as_str())];
    let (status, _, _) = call(server.e2b, Method::GET, "/health", &right, vec![]).await;
    assert!(status.is_success(), "{status}");
    let nowhere = [
        ("e2b-sandbox-id", "sandbox-nonesuch"),
        ("e2b-sandbox-port", "49983"),
    ];
    let (status, _, _) = call(server.e2b, Method::GET, "/health", &nowhere, vec![]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let (status, _, _) = call(server.e2b, Method::GET, "/", &route, vec![]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "no token");
    let wrong = [route[0], route[1], ("x-access-token", "at_wrong")];
    let (status, _, _) = call(server.e2b, Method::GET, "/", &wrong, vec![]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "a wrong token");
    for header in [
        "x-access-token",
        "e2b-traffic-access-token",
        "x-airlock-token",
    ] {
        let with = [route[0], route[1], (header, token.as_str())];
        let (status, _, body) = call(server.e2b, Method::GET, "/", &with, vec![]).await;
        assert_eq!(status, StatusCode::OK, "{header}: {body}");
        assert_eq!(body, Value::String("hello from the guest".into()));
    }

    // The sandbox's logs: its ingress decisions, a refusal a warning.
    let me = [("x-api-key", key.as_str())];
    let (status, _, v1) = call(
        server.e2b,
        Method::GET,
        &format!("/sandboxes/{id}/logs"),
        &me,
        vec![],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{v1}");
    let entries = v1["logEntries"].as_array().unwrap();
    let mentions = |level: &str| {
        entries.iter().any(|e| {
            e["level"] == level
                && e["fields"]["protocol"] == "ingress"
                && e["fields"]["port"].as_u64() == port.parse::<u64>().ok()
        })
    };
    assert!(mentions("warn"), "the refusals: {v1}");
    assert!(mentions("info"), "the connections let through: {v1}");
    assert_eq!(v1["logs"].as_array().unwrap().len(), entries.len());
    let (status, _, v2) = call(
        server.e2b,
        Method::GET,
        &format!("/v2/sandboxes/{id}/logs?limit=1"),
        &me,
        vec![],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{v2}");
    assert_eq!(v2["logs"].as_array().unwrap().len(), 1, "{v2}");
    server.stop().await;
}
