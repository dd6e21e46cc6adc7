//! Ingress benchmark: the server's HTTP ingress (in this process, with the
//! echo's serial port on its sandboxes) carrying a 32 MiB download from
//! `python3 -m http.server` in a sandbox, beside the raw serial echo
//! throughput of the same VM in the same run (the floor the agent channel
//! is measured against); and the time to the first byte of a small
//! response, each request on a new connection (median, p95). Prints
//! figures and ratios; asserts only that the bytes arrived.
//!
//! Run with `scripts/bench`. `AIRLOCK_BENCH_MIB` sets the size (default 32).

#![allow(clippy::expect_used, clippy::unwrap_used)]

#[allow(dead_code)]
mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use airlock_client::{api, Client};
use airlock_testkit::{start, Options, TestServer};
use bytes::Bytes;
use common::{echo_binary, echo_throughput, ms, percentile, with_echo_port, ECHO_PORT_NAME, MIB};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_stream::wrappers::ReceiverStream;

/// Small requests timed for the first byte.
const REQUESTS: usize = 50;
/// The guest's HTTP port.
const PORT: u16 = 8000;

#[tokio::main]
async fn main() {
    let size_mib: usize = std::env::var("AIRLOCK_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32);
    let size = size_mib * MIB;
    let dir = tempfile::tempdir().expect("temp dir");
    let echo_socket = dir.path().join("echo.sock");
    let echo = echo_socket.clone();
    let options = Options {
        dir: Some(dir.path().to_owned()),
        ..Options::default()
    };
    let server = TestServer::start_with(options, move || {
        with_echo_port(airlock_tests::builder(), &echo)
    })
    .await;
    let (client, ingress_addr) = (server.owner().await, server.ingress);
    let id = client
        .sandboxes()
        .create(api::CreateSandboxRequest {
            memory_mib: 512,
            ..api::CreateSandboxRequest::default()
        })
        .await
        .expect("create")
        .into_inner()
        .sandbox_id;

    // The floor: the raw serial echo of this VM.
    upload(
        &client,
        &id,
        "/tmp/airlock-vsock-echo",
        &std::fs::read(echo_binary()).unwrap(),
    )
    .await;
    let echo_port = format!("serial:{ECHO_PORT_NAME}");
    let _echo = start(&client, &id, &["/tmp/airlock-vsock-echo", &echo_port]).await;
    let mut stream = tokio::net::UnixStream::connect(&echo_socket)
        .await
        .expect("echo socket");
    let mut byte = [0u8; 1];
    stream.write_all(b"!").await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), stream.read_exact(&mut byte))
        .await
        .expect("the echo program answers")
        .unwrap();
    let echo_mbps = echo_throughput(&mut stream, size_mib).await;
    drop(stream);

    // The server in the guest, and the sandbox's address and token.
    let script = format!(
        "mkdir -p /tmp/www && head -c {size} /dev/zero > /tmp/www/big && echo hi > /tmp/www/small"
    );
    let _ = start(&client, &id, &["sh", "-c", &script]).await;
    let port = PORT.to_string();
    let _http = start(
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
    let host = client
        .ingress()
        .get_host(api::GetHostRequest {
            sandbox_id: id.clone(),
            port: u32::from(PORT),
        })
        .await
        .unwrap()
        .into_inner();
    let began = Instant::now();
    loop {
        let (status, _) = get(ingress_addr, &host.host, &host.token, "/small").await;
        if status == StatusCode::OK {
            break;
        }
        assert!(
            began.elapsed() < Duration::from_secs(120),
            "the guest's server never answered"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The download, through the ingress (a warm-up first).
    let _ = get(ingress_addr, &host.host, &host.token, "/small").await;
    let began = Instant::now();
    let (status, got) = get(ingress_addr, &host.host, &host.token, "/big").await;
    let took = began.elapsed();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(got, size, "the download was cut");
    let ingress_mbps = size as f64 / took.as_secs_f64() / 1e6;

    // The first byte of a small response, each on a new connection.
    let mut firsts = Vec::with_capacity(REQUESTS);
    for _ in 0..REQUESTS {
        firsts.push(first_byte(ingress_addr, &host.host, &host.token, "/small").await);
    }
    firsts.sort();

    println!("ingress benchmark: {size_mib} MiB download, 1 vCPU");
    println!("{:<44} {:>12} {:>10}", "measure", "figure", "vs floor");
    println!(
        "{:<44} {:>7.1} MB/s {:>10}",
        "raw serial echo throughput", echo_mbps, "floor"
    );
    println!(
        "{:<44} {:>7.1} MB/s {:>9.2}x",
        "HTTP download through the ingress",
        ingress_mbps,
        ingress_mbps / echo_mbps
    );
    println!(
        "{:<44} {:>9.2} ms {:>10}",
        "first byte of a small response (median)",
        ms(percentile(&firsts, 50)),
        ""
    );
    println!(
        "{:<44} {:>9.2} ms {:>10}",
        "first byte of a small response (p95)",
        ms(percentile(&firsts, 95)),
        ""
    );
    server.stop().await;
}

/// Writes `data` to `path` in the sandbox (mode 0755).
async fn upload(client: &Client, id: &str, path: &str, data: &[u8]) {
    let (send, requests) = tokio::sync::mpsc::channel(4);
    let header = api::WriteHeader {
        sandbox_id: id.to_owned(),
        path: path.to_owned(),
        mode: 0o755,
        require_end: true,
        ..api::WriteHeader::default()
    };
    let chunks = data_chunks(data);
    let writer = tokio::spawn(async move {
        let part = |p| api::WriteFileRequest { part: Some(p) };
        send.send(part(api::write_file_request::Part::Header(header)))
            .await
            .unwrap();
        for chunk in chunks {
            send.send(part(api::write_file_request::Part::Data(chunk)))
                .await
                .unwrap();
        }
        send.send(part(api::write_file_request::Part::End(api::WriteEnd {})))
            .await
            .unwrap();
    });
    client
        .files()
        .write(ReceiverStream::new(requests))
        .await
        .expect("upload");
    writer.await.unwrap();
}

fn data_chunks(data: &[u8]) -> Vec<Bytes> {
    data.chunks(512 * 1024)
        .map(Bytes::copy_from_slice)
        .collect()
}

/// A GET through the ingress; its status and the body's length.
async fn get(addr: SocketAddr, host: &str, token: &str, path: &str) -> (StatusCode, usize) {
    let response = request(addr, host, token, path).await;
    let status = response.status();
    let mut body = response.into_body();
    let mut got = 0;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.expect("body").into_data() {
            got += data.len();
        }
    }
    (status, got)
}

/// From connecting to the first byte of the response's body.
async fn first_byte(addr: SocketAddr, host: &str, token: &str, path: &str) -> Duration {
    let began = Instant::now();
    let mut body = request(addr, host, token, path).await.into_body();
    let _ = body.frame().await;
    let took = began.elapsed();
    while body.frame().await.is_some() {}
    took
}

async fn request(
    addr: SocketAddr,
    host: &str,
    token: &str,
    path: &str,
) -> http::Response<hyper::body::Incoming> {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(connection);
    let request = Request::get(path)
        .header("host", host)
        .header("x-airlock-token", token)
        .body(Empty::<Bytes>::new())
        .unwrap();
    sender.send_request(request).await.expect("request")
}
