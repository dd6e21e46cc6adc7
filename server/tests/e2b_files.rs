//! envd's files through the E2B front on the process backend, over raw
//! HTTP as E2B's SDKs send it: a multipart upload of several files and a
//! raw one, downloads, the filesystem service's Connect calls in JSON
//! (ListDir, Stat, MakeDir, Move, Remove), E2B's errors (404 for a missing
//! file, 400 for a malformed multipart body, Connect codes for the
//! service), and the server still serving after each refusal.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;

use airlock_client::api;
use airlock_testkit::{create, Options, TestServer};
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};

/// One request to a sandbox's envd: (status, body bytes).
async fn envd(
    front: SocketAddr,
    route: &[(&str, &str)],
    method: Method,
    path: &str,
    content_type: &str,
    body: Vec<u8>,
) -> (StatusCode, Bytes) {
    let stream = tokio::net::TcpStream::connect(front).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", front.to_string())
        .header("content-type", content_type)
        .header("connect-protocol-version", "1");
    for (name, value) in route {
        request = request.header(*name, *value);
    }
    let response = sender
        .send_request(request.body(Full::new(Bytes::from(body))).unwrap())
        .await
        .unwrap();
    let status = response.status();
    (
        status,
        response.into_body().collect().await.unwrap().to_bytes(),
    )
}

fn json_of(bytes: &Bytes) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into()))
}

fn multipart(parts: &[(&str, &[u8])]) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, data) in parts {
        body.extend_from_slice(
            format!("--bound\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\nContent-Type: application/octet-stream\r\n\r\n").as_bytes(),
        );
        body.extend_from_slice(data);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(b"--bound--\r\n");
    body
}

#[tokio::test]
async fn files_and_the_filesystem_service_answer_as_envd() {
    let server = TestServer::start(Options::default()).await;
    let key = server.key("e2b-files", api::KeyQuota::default()).await;
    let client = server.remote(Some(&key)).await;
    let mut request = create();
    request.timeout_secs = Some(600);
    let id = client
        .sandboxes()
        .create(request)
        .await
        .unwrap()
        .into_inner()
        .sandbox_id;
    let (_, detail) = envd(
        server.e2b,
        &[("x-api-key", key.as_str())],
        Method::GET,
        &format!("/sandboxes/{id}"),
        "application/json",
        vec![],
    )
    .await;
    let token = json_of(&detail)["envdAccessToken"]
        .as_str()
        .unwrap()
        .to_owned();
    let route = [
        ("e2b-sandbox-id", id.as_str()),
        ("e2b-sandbox-port", "49983"),
        ("x-access-token", token.as_str()),
    ];
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display().to_string();
    let multi = "multipart/form-data; boundary=bound";
    // Uploads act as root: a host with a `user` account would otherwise
    // own them by it, in a directory only root may write.

    // Several files in one multipart upload, each named by its filename.
    let (a, b) = (format!("{root}/a.txt"), format!("{root}/sub/b.bin"));
    let body = multipart(&[(&a, b"alpha"), (&b, &[0, 1, 2, 255])]);
    let (status, written) = envd(
        server.e2b,
        &route,
        Method::POST,
        "/files?username=root",
        multi,
        body,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{written:?}");
    assert_eq!(
        json_of(&written),
        json!([
            {"name": "a.txt", "type": "file", "path": a},
            {"name": "b.bin", "type": "file", "path": b},
        ])
    );
    let (status, bytes) = envd(
        server.e2b,
        &route,
        Method::GET,
        &format!("/files?path={b}"),
        "",
        vec![],
    )
    .await;
    assert_eq!(
        (status, &bytes[..]),
        (StatusCode::OK, &[0u8, 1, 2, 255][..])
    );

    // The raw form: the body is the one file `path` names.
    let c = format!("{root}/c.txt");
    let (status, _) = envd(
        server.e2b,
        &route,
        Method::POST,
        &format!("/files?path={c}&username=root"),
        "application/octet-stream",
        b"raw".to_vec(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(std::fs::read(&c).unwrap(), b"raw");

    // A missing file is 404 in E2B's shape; a directory 400.
    let (status, error) = envd(
        server.e2b,
        &route,
        Method::GET,
        &format!("/files?path={root}/none"),
        "",
        vec![],
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(json_of(&error)["code"], 404);
    let (status, _) = envd(
        server.e2b,
        &route,
        Method::GET,
        &format!("/files?path={root}"),
        "",
        vec![],
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // A malformed multipart body: 400 naming it, nothing kept.
    let cut = format!("--bound\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{root}/cut\"\r\n\r\nabc");
    let (status, error) = envd(
        server.e2b,
        &route,
        Method::POST,
        "/files?username=root",
        multi,
        cut.into_bytes(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        json_of(&error)["message"]
            .as_str()
            .unwrap()
            .contains("body"),
        "{error:?}"
    );
    assert!(!std::path::Path::new(&format!("{root}/cut")).exists());

    // The filesystem service, Connect with JSON.
    let rpc = |method: &str| format!("/filesystem.Filesystem/{method}");
    let (status, listed) = envd(
        server.e2b,
        &route,
        Method::POST,
        &rpc("ListDir"),
        "application/json",
        json!({"path": root, "depth": 2}).to_string().into_bytes(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{listed:?}");
    let mut paths: Vec<String> = json_of(&listed)["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_owned())
        .collect();
    paths.sort();
    assert_eq!(
        paths,
        vec![a.clone(), c.clone(), format!("{root}/sub"), b.clone()]
    );
    let (status, stat) = envd(
        server.e2b,
        &route,
        Method::POST,
        &rpc("Stat"),
        "application/json",
        json!({"path": a}).to_string().into_bytes(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let entry = &json_of(&stat)["entry"];
    assert_eq!(
        (entry["name"].as_str(), entry["size"].as_str()),
        (Some("a.txt"), Some("5"))
    );
    assert_eq!(entry["type"], "FILE_TYPE_FILE");
    let (status, missing) = envd(
        server.e2b,
        &route,
        Method::POST,
        &rpc("Stat"),
        "application/json",
        json!({"path": format!("{root}/none")})
            .to_string()
            .into_bytes(),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(json_of(&missing)["code"], "not_found");
    let made = json!({"path": format!("{root}/made/deep")})
        .to_string()
        .into_bytes();
    let (status, _) = envd(
        server.e2b,
        &route,
        Method::POST,
        &rpc("MakeDir"),
        "application/json",
        made.clone(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, again) = envd(
        server.e2b,
        &route,
        Method::POST,
        &rpc("MakeDir"),
        "application/json",
        made,
    )
    .await;
    assert_eq!(json_of(&again)["code"], "already_exists", "{status}");
    let moved = json!({"source": c, "destination": format!("{root}/made/c.txt")});
    let (status, answer) = envd(
        server.e2b,
        &route,
        Method::POST,
        &rpc("Move"),
        "application/json",
        moved.to_string().into_bytes(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer:?}");
    assert_eq!(json_of(&answer)["entry"]["name"], "c.txt");
    let (status, _) = envd(
        server.e2b,
        &route,
        Method::POST,
        &rpc("Remove"),
        "application/json",
        json!({"path": format!("{root}/made")})
            .to_string()
            .into_bytes(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(!std::path::Path::new(&format!("{root}/made")).exists());
    let (_, root_refused) = envd(
        server.e2b,
        &route,
        Method::POST,
        &rpc("Remove"),
        "application/json",
        json!({"path": "/tmp/.."}).to_string().into_bytes(),
    )
    .await;
    assert_eq!(json_of(&root_refused)["code"], "invalid_argument");

    // Still serving.
    let (status, bytes) = envd(
        server.e2b,
        &route,
        Method::GET,
        &format!("/files?path={a}"),
        "",
        vec![],
    )
    .await;
    assert_eq!((status, &bytes[..]), (StatusCode::OK, &b"alpha"[..]));
}
