//! The usage ledger on a real server (process backend, no VMs): a key's
//! sandboxes are billed for their running and paused time, vCPUs, memory
//! and the bytes through the ingress; the figures stay after a kill, after
//! a sandbox the stopping server killed, and across a restart of the
//! server on the same directory; a live sandbox's figures lag its clock by
//! at most the accrual interval; a key sees only its own rows and the
//! owner anyone's, by sandbox, key or day. (Time on disk and adoption need
//! VMs: `tests/tests/usage.rs`.)

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use airlock_client::{api, Client};
use airlock_testkit::{create, create_sandbox, refusal, Options, TestServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;

/// The server's accrual interval (`airlock_server`'s `ACCRUAL_INTERVAL`).
const INTERVAL: Duration = Duration::from_secs(5);
/// What a figure may differ by from the test's own clock (calls, a shared
/// machine).
const SLACK_MS: u64 = 1_000;

async fn query(
    client: &Client,
    key: &str,
    by: api::UsageGrouping,
) -> Result<Vec<api::UsageRow>, tonic::Status> {
    client
        .usage()
        .query(api::UsageQueryRequest {
            key: key.to_owned(),
            by: by.into(),
            ..api::UsageQueryRequest::default()
        })
        .await
        .map(|answer| answer.into_inner().rows)
}

fn row<'a>(rows: &'a [api::UsageRow], id: &str) -> &'a api::UsageRow {
    rows.iter()
        .find(|row| row.sandbox_id == id)
        .unwrap_or_else(|| panic!("no row of {id} in {rows:?}"))
}

fn near(what: &str, got: u64, want: Duration) {
    let want = u64::try_from(want.as_millis()).unwrap();
    assert!(
        got.abs_diff(want) <= SLACK_MS,
        "{what}: the ledger has {got} ms, the test measured {want} ms"
    );
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap()
}

/// Sends `bytes` bytes into guest `port` through `Ingress.Forward` and
/// reads the answer to its end.
async fn forward(client: &Client, id: &str, port: u16, bytes: usize) -> usize {
    let (send, requests) = tokio::sync::mpsc::channel(4);
    let event = |e| api::ForwardRequest { event: Some(e) };
    send.send(event(api::forward_request::Event::Open(api::ForwardOpen {
        sandbox_id: id.to_owned(),
        port: u32::from(port),
    })))
    .await
    .unwrap();
    let mut incoming = client
        .ingress()
        .forward(ReceiverStream::new(requests))
        .await
        .unwrap()
        .into_inner();
    incoming.message().await.unwrap().unwrap();
    send.send(event(api::forward_request::Event::Data(
        vec![7u8; bytes].into(),
    )))
    .await
    .unwrap();
    send.send(event(api::forward_request::Event::Eof(true)))
        .await
        .unwrap();
    let mut got = 0;
    loop {
        match incoming.message().await.unwrap().unwrap().event {
            Some(api::forward_response::Event::Data(data)) => got += data.len(),
            Some(api::forward_response::Event::Eof(_)) => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    got
}

/// A "guest" server (the process backend's guest is the host): reads to
/// the end, answers twice as many bytes.
async fn doubling_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut got = Vec::new();
        stream.read_to_end(&mut got).await.unwrap();
        got.extend_from_slice(&got.clone());
        stream.write_all(&got).await.unwrap();
    });
    port
}

fn today() -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    // civil_from_days, as the server names days.
    let z = i64::try_from(now.as_secs() / 86_400).unwrap() + 719_468;
    let (era, doe) = (z.div_euclid(146_097), z.rem_euclid(146_097));
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

#[tokio::test]
async fn a_keys_sandboxes_are_billed_and_kept_after_their_end_and_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        dir: Some(dir.path().to_owned()),
        ..Options::default()
    };
    let server = TestServer::start(options.clone()).await;
    let alice_key = server.key("alice", api::KeyQuota::default()).await;
    let alice = server.remote(Some(&alice_key)).await;

    // One sandbox runs, carries ingress bytes, pauses, runs again, and is
    // killed.
    let begun = Instant::now();
    let killed = create_sandbox(
        &alice,
        api::CreateSandboxRequest {
            memory_mib: 256,
            vcpus: 2,
            ..create()
        },
    )
    .await;
    // Another lives until the server stops (and kills it).
    let lived_begun = Instant::now();
    let lived = create_sandbox(&alice, create()).await;
    let port = doubling_server().await;
    assert_eq!(forward(&alice, &killed, port, 10_000).await, 20_000);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let pausing = Instant::now();
    let running_before = pausing - begun;
    alice
        .sandboxes()
        .pause(api::PauseSandboxRequest {
            sandbox_id: killed.clone(),
            to_disk: false,
        })
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    alice
        .sandboxes()
        .resume(api::ResumeSandboxRequest {
            sandbox_id: killed.clone(),
        })
        .await
        .unwrap();
    let paused = pausing.elapsed();
    let resumed = Instant::now();
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    alice
        .sandboxes()
        .kill(api::KillSandboxRequest {
            sandbox_id: killed.clone(),
        })
        .await
        .unwrap();
    let running = running_before + resumed.elapsed();

    // The kill is accrued at once, not at the next tick.
    let rows = query(&alice, "", api::UsageGrouping::Sandbox)
        .await
        .unwrap();
    let first = row(&rows, &killed).clone();
    assert_eq!(first.key, "alice");
    assert_eq!(
        (first.memory_mib, first.vcpus, first.sandboxes),
        (256, 2, 1)
    );
    assert!(first.ended_at_ms > 0, "{first:?}");
    near("running", first.running_ms, running);
    near("paused", first.paused_ms, paused);
    assert_eq!(first.on_disk_ms, 0);
    assert_eq!(first.vcpu_ms, 2 * first.running_ms);
    assert_eq!(
        first.memory_mib_ms,
        256 * (first.running_ms + first.paused_ms)
    );
    assert_eq!(first.disk_mib_ms, 0, "no workspace, never on disk");
    assert_eq!(
        (first.ingress_received_bytes, first.ingress_sent_bytes),
        (10_000, 20_000)
    );
    assert_eq!(
        (first.egress_sent_bytes, first.egress_received_bytes),
        (0, 0)
    );

    server.stop().await;
    let lived_for = lived_begun.elapsed();

    // A new server on the same directory answers the same figures, and
    // the sandbox the old one killed as it stopped, up to its end.
    let server = TestServer::start(options).await;
    let alice = server.remote(Some(&alice_key)).await;
    let rows = query(&alice, "", api::UsageGrouping::Sandbox)
        .await
        .unwrap();
    assert_eq!(row(&rows, &killed), &first);
    let last = row(&rows, &lived);
    assert!(last.ended_at_ms > 0, "{last:?}");
    near("the stopped sandbox's running", last.running_ms, lived_for);
    assert_eq!(last.memory_mib, 512);

    // Per key and per day: the two summed.
    let keys = query(&alice, "", api::UsageGrouping::Key).await.unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert_eq!((keys[0].key.as_str(), keys[0].sandboxes), ("alice", 2));
    assert_eq!(keys[0].running_ms, first.running_ms + last.running_ms);
    assert_eq!(keys[0].ingress_sent_bytes, 20_000);
    let days = query(&alice, "alice", api::UsageGrouping::Day)
        .await
        .unwrap();
    assert!(days.iter().any(|day| day.day == today()), "{days:?}");
    assert_eq!(
        days.iter().map(|day| day.running_ms).sum::<u64>(),
        keys[0].running_ms
    );
    server.stop().await;
}

#[tokio::test]
async fn a_key_sees_its_own_rows_and_the_owner_anyones() {
    let server = TestServer::start(Options::default()).await;
    let owner = server.owner().await;
    let alice_key = server.key("alice", api::KeyQuota::default()).await;
    let bob_key = server.key("bob", api::KeyQuota::default()).await;
    let alice = server.remote(Some(&alice_key)).await;
    let bob = server.remote(Some(&bob_key)).await;
    let hers = create_sandbox(&alice, create()).await;
    let mine = create_sandbox(&owner, create()).await;
    for (client, id) in [(&alice, &hers), (&owner, &mine)] {
        client
            .sandboxes()
            .kill(api::KillSandboxRequest {
                sandbox_id: id.clone(),
            })
            .await
            .unwrap();
    }
    let by = api::UsageGrouping::Sandbox;
    assert!(query(&bob, "", by).await.unwrap().is_empty());
    let refused = query(&bob, "alice", by).await.unwrap_err();
    assert_eq!(
        refusal(&refused),
        (Code::PermissionDenied, Some(api::ErrorReason::OwnerOnly))
    );
    let ids = |rows: Vec<api::UsageRow>| -> Vec<String> {
        let mut ids: Vec<String> = rows.into_iter().map(|row| row.sandbox_id).collect();
        ids.sort();
        ids
    };
    let mut both = vec![hers.clone(), mine.clone()];
    both.sort();
    assert_eq!(ids(query(&owner, "", by).await.unwrap()), both);
    assert_eq!(ids(query(&owner, "alice", by).await.unwrap()), vec![hers]);
    assert_eq!(ids(query(&owner, "_owner", by).await.unwrap()), vec![mine]);
    let keys = query(&owner, "", api::UsageGrouping::Key).await.unwrap();
    let names: Vec<&str> = keys.iter().map(|row| row.key.as_str()).collect();
    assert_eq!(names, vec!["", "alice"]);

    let bad = query(&owner, "no/such", by).await.unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
    let backwards = owner
        .usage()
        .query(api::UsageQueryRequest {
            since_ms: 2_000,
            until_ms: 1_000,
            ..api::UsageQueryRequest::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        airlock_client::reason::field_of(&backwards),
        Some("until_ms")
    );
    // A period before anything ran has nothing.
    let before = owner
        .usage()
        .query(api::UsageQueryRequest {
            until_ms: 1_000,
            ..api::UsageQueryRequest::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(before.rows.is_empty(), "{before:?}");
    server.stop().await;
}

#[tokio::test]
async fn a_live_sandbox_is_accrued_within_the_interval() {
    let server = TestServer::start(Options::default()).await;
    let owner = server.owner().await;
    let begun = Instant::now();
    let id = create_sandbox(&owner, create()).await;
    tokio::time::sleep(INTERVAL + Duration::from_millis(2_500)).await;
    let rows = query(&owner, "", api::UsageGrouping::Sandbox)
        .await
        .unwrap();
    let live = row(&rows, &id);
    let lived = ms(begun.elapsed());
    assert_eq!(live.ended_at_ms, 0);
    assert!(
        live.running_ms > 0 && live.running_ms <= lived,
        "{} ms accrued of {lived} ms",
        live.running_ms
    );
    assert!(
        lived - live.running_ms <= ms(INTERVAL) + SLACK_MS,
        "the ledger lags the clock by {} ms, more than the interval",
        lived - live.running_ms
    );
    server.stop().await;
}
