//! Snapshots through the API, as a key over TLS meets them, on real VMs:
//! a sandbox with a running web server, files in /root and a Python
//! variable is snapshotted; ten sandboxes from the snapshot serve the page
//! at once through the ingress, see the files and keep the variable, each
//! with its own hostname and entropy, while the original goes on
//! unchanged; the snapshot outlives the server and is started from by the
//! next one; a paused and a disk-paused sandbox are forked; and the
//! refusals: another key's snapshot, a name taken, the quota.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Instant;

use airlock_client::{api, Client};
use airlock_testkit::api::{refusal, run};
use airlock_testkit::server::{Options, TestServer};
use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Clones of the default image's template, as a server makes them.
fn builder() -> airlock::SandboxBuilder {
    airlock_tests::builder().image(airlock_tests::default_image())
}

async fn server(dir: &std::path::Path) -> TestServer {
    let options = Options {
        tls: true,
        max_sandboxes: Some(16),
        dir: Some(dir.to_owned()),
        ..Options::default()
    };
    TestServer::start_with(options, builder).await
}

async fn sh(client: &Client, id: &str, script: &str) -> String {
    let (out, err, exit) = run(client, id, &["sh", "-c", script]).await;
    assert_eq!(
        exit.exit_code,
        0,
        "{script}: {}",
        String::from_utf8_lossy(&err)
    );
    String::from_utf8_lossy(&out).into_owned()
}

/// The text value of `code` run in the sandbox's default Python context.
async fn cell(client: &Client, id: &str, code: &str) -> String {
    let mut events = client
        .code()
        .run_code(api::RunCodeRequest {
            sandbox_id: id.to_owned(),
            code: code.to_owned(),
            ..Default::default()
        })
        .await
        .expect("run code")
        .into_inner();
    let mut text = String::new();
    while let Some(event) = events.next().await {
        if let Some(api::code_event::Event::Result(result)) = event.expect("a cell's event").event {
            for item in result.items {
                if item.mime_type == "text/plain" {
                    text = String::from_utf8_lossy(&item.data).into_owned();
                }
            }
        }
    }
    text
}

/// GET / of guest port 8000 through the ingress's path form, with the
/// sandbox's traffic token; the body.
async fn fetch(client: &Client, ingress: SocketAddr, id: &str) -> String {
    let host = client
        .ingress()
        .get_host(api::GetHostRequest {
            sandbox_id: id.to_owned(),
            port: 8000,
        })
        .await
        .expect("get host")
        .into_inner();
    let mut stream = tokio::net::TcpStream::connect(ingress)
        .await
        .expect("connect");
    let request = format!(
        "GET /_sandbox/{id}/8000/ HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Airlock-Token: {}\r\n\
         Connection: close\r\n\r\n",
        host.token
    );
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.expect("answer");
    let answer = String::from_utf8_lossy(&answer).into_owned();
    assert!(
        answer.starts_with("HTTP/1.") && answer[8..].starts_with(" 200 "),
        "{answer}"
    );
    answer
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .trim()
        .to_owned()
}

async fn create(client: &Client, request: api::CreateSandboxRequest) -> String {
    client
        .sandboxes()
        .create(request)
        .await
        .expect("create")
        .into_inner()
        .sandbox_id
}

#[tokio::test(flavor = "multi_thread")]
async fn ten_sandboxes_from_a_snapshot_serve_its_page_and_keep_its_files_and_variable() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path()).await;
    let key = server.key("alice", api::KeyQuota::default()).await;
    let alice = server.remote(Some(&key)).await;
    let original = create(&alice, api::CreateSandboxRequest::default()).await;
    sh(
        &alice,
        &original,
        "mkdir -p /root/site && echo served-from-a-snapshot > /root/site/index.html && \
         echo kept > /root/note && (cd /root/site && nohup python3 -m http.server 8000 \
         >/dev/null 2>&1 &) && for i in $(seq 100); do python3 -c \"import urllib.request as r; \
         r.urlopen('http://127.0.0.1:8000/')\" 2>/dev/null && break; sleep 0.2; done",
    )
    .await;
    assert_eq!(
        cell(&alice, &original, "answer = 6 * 7\nanswer").await,
        "42"
    );

    let info = alice
        .sandboxes()
        .snapshot(api::SnapshotSandboxRequest {
            sandbox_id: original.clone(),
            name: "web".into(),
        })
        .await
        .expect("snapshot")
        .into_inner();
    println!(
        "snapshot {} ({}): paused {} ms, took {} ms, {} MiB on disk",
        info.name,
        &info.id[..12],
        info.paused_ms,
        info.took_ms,
        info.size_bytes >> 20
    );
    assert_eq!(info.source_sandbox_id, original);
    assert_eq!(info.owner, "alice");
    assert!(info.size_bytes > 0 && info.id.len() == 64);

    let began = Instant::now();
    let creates = (0..10).map(|_| {
        create(
            &alice,
            api::CreateSandboxRequest {
                snapshot: "web".into(),
                ..Default::default()
            },
        )
    });
    let clones: Vec<String> = futures::future::join_all(creates).await;
    println!("ten creates from the snapshot in {:?}", began.elapsed());
    let pages =
        futures::future::join_all(clones.iter().map(|id| fetch(&alice, server.ingress, id))).await;
    assert!(
        pages.iter().all(|page| page == "served-from-a-snapshot"),
        "{pages:?}"
    );
    let mut hostnames = vec![sh(&alice, &original, "hostname").await];
    let mut entropy = vec![sh(&alice, &original, "head -c 16 /dev/urandom | od -An -tx1").await];
    for id in &clones {
        let got = alice
            .sandboxes()
            .get(api::GetSandboxRequest {
                sandbox_id: id.clone(),
            })
            .await
            .expect("get")
            .into_inner();
        assert_eq!(
            (got.origin.as_str(), got.snapshot.as_str()),
            ("snapshot", "web")
        );
        assert_eq!(sh(&alice, id, "cat /root/note").await, "kept\n");
        assert_eq!(cell(&alice, id, "answer").await, "42");
        hostnames.push(sh(&alice, id, "hostname").await);
        entropy.push(sh(&alice, id, "head -c 16 /dev/urandom | od -An -tx1").await);
        sh(&alice, id, "echo changed > /root/note").await;
    }
    hostnames.sort();
    hostnames.dedup();
    assert_eq!(hostnames.len(), 11, "each has its own hostname");
    entropy.sort();
    entropy.dedup();
    assert_eq!(entropy.len(), 11, "each has its own entropy");
    assert_eq!(sh(&alice, &original, "cat /root/note").await, "kept\n");
    assert_eq!(
        fetch(&alice, server.ingress, &original).await,
        "served-from-a-snapshot"
    );
    let listed = alice
        .sandboxes()
        .list_snapshots(api::ListSnapshotsRequest::default())
        .await
        .expect("list")
        .into_inner()
        .snapshots;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].sandboxes, 10);

    // The snapshot outlives the server: the next one starts from it.
    server.stop().await;
    let server = self::server(dir.path()).await;
    let alice = server.remote(Some(&key)).await;
    let after = create(
        &alice,
        api::CreateSandboxRequest {
            snapshot: "web".into(),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(sh(&alice, &after, "cat /root/note").await, "kept\n");
    assert_eq!(cell(&alice, &after, "answer").await, "42");
    assert_eq!(
        fetch(&alice, server.ingress, &after).await,
        "served-from-a-snapshot"
    );
    alice
        .sandboxes()
        .delete_snapshot(api::DeleteSnapshotRequest { name: "web".into() })
        .await
        .expect("delete");
    // Its sandbox runs on after the delete.
    assert_eq!(sh(&alice, &after, "cat /root/note").await, "kept\n");
    let gone = alice
        .sandboxes()
        .create(api::CreateSandboxRequest {
            snapshot: "web".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        refusal(&gone),
        (tonic::Code::NotFound, Some(api::ErrorReason::NotFound))
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn paused_sandboxes_fork_and_snapshots_are_refused_as_they_should_be() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path()).await;
    let quota = api::KeyQuota {
        max_snapshots: 1,
        ..Default::default()
    };
    let alice_key = server.key("alice", quota).await;
    let bob_key = server.key("bob", api::KeyQuota::default()).await;
    let alice = server.remote(Some(&alice_key)).await;
    let bob = server.remote(Some(&bob_key)).await;
    let id = create(&alice, api::CreateSandboxRequest::default()).await;
    sh(&alice, &id, "echo before-the-pause > /root/state").await;

    // A fork of a paused sandbox, then of one on disk: each stays so.
    for to_disk in [false, true] {
        alice
            .sandboxes()
            .pause(api::PauseSandboxRequest {
                sandbox_id: id.clone(),
                to_disk,
            })
            .await
            .expect("pause");
        let children = alice
            .sandboxes()
            .fork(api::ForkSandboxRequest {
                sandbox_id: id.clone(),
                count: 1,
            })
            .await
            .expect("fork of a paused sandbox")
            .into_inner()
            .sandboxes;
        let state = alice
            .sandboxes()
            .get(api::GetSandboxRequest {
                sandbox_id: id.clone(),
            })
            .await
            .expect("get")
            .into_inner()
            .state();
        let expected = if to_disk {
            api::SandboxState::OnDisk
        } else {
            api::SandboxState::Paused
        };
        assert_eq!(state, expected, "the parent stays as it was");
        let child = &children[0].sandbox_id;
        assert_eq!(
            sh(&alice, child, "cat /root/state").await,
            "before-the-pause\n"
        );
    }

    alice
        .sandboxes()
        .snapshot(api::SnapshotSandboxRequest {
            sandbox_id: id.clone(),
            name: "mine".into(),
        })
        .await
        .expect("a snapshot of a sandbox on disk");
    let taken = alice
        .sandboxes()
        .snapshot(api::SnapshotSandboxRequest {
            sandbox_id: id.clone(),
            name: "mine".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(
        refusal(&taken),
        (
            tonic::Code::AlreadyExists,
            Some(api::ErrorReason::AlreadyExists)
        )
    );
    let over = alice
        .sandboxes()
        .snapshot(api::SnapshotSandboxRequest {
            sandbox_id: id.clone(),
            name: "second".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(
        refusal(&over),
        (
            tonic::Code::ResourceExhausted,
            Some(api::ErrorReason::QuotaExceeded)
        )
    );
    assert!(over.message().contains("at most 1 snapshots"), "{over:?}");
    // Bob sees none of it.
    for refused in [
        bob.sandboxes()
            .get_snapshot(api::GetSnapshotRequest {
                name: "mine".into(),
            })
            .await
            .unwrap_err(),
        bob.sandboxes()
            .create(api::CreateSandboxRequest {
                snapshot: "mine".into(),
                ..Default::default()
            })
            .await
            .unwrap_err(),
        bob.sandboxes()
            .delete_snapshot(api::DeleteSnapshotRequest {
                name: "mine".into(),
            })
            .await
            .unwrap_err(),
    ] {
        assert_eq!(refused.code(), tonic::Code::NotFound, "{refused:?}");
    }
    assert!(bob
        .sandboxes()
        .list_snapshots(api::ListSnapshotsRequest::default())
        .await
        .expect("list")
        .into_inner()
        .snapshots
        .is_empty());
    let bad = alice
        .sandboxes()
        .create(api::CreateSandboxRequest {
            snapshot: "mine".into(),
            image: "default".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(airlock_client::reason::field_of(&bad), Some("snapshot"));
    // The server still serves.
    let clone = create(
        &alice,
        api::CreateSandboxRequest {
            snapshot: "mine".into(),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(
        sh(&alice, &clone, "cat /root/state").await,
        "before-the-pause\n"
    );
    server.stop().await;
}
