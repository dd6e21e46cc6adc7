//! Lifecycle events and webhooks on a real server (process backend, no
//! VMs): a sandbox's life (created, paused, resumed, killed; another's
//! timeout) reaches a webhook on loopback in order, each delivery signed
//! with the webhook's secret; deliveries that could not be made wait on
//! disk across a restart of the server and arrive, each once, when the
//! receiver is back; `Events.Watch` shows a key its own sandboxes' events
//! and the owner everyone's, and replays the log from `after_seq` across a
//! restart. (Snapshots and forks need a VM: `tests/tests/events.rs`.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use airlock_client::{api, Client};
use airlock_testkit::{create, create_sandbox, refusal, Options, TestServer};
use bytes::Bytes;
use hmac::{Hmac, Mac};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use sha2::Sha256;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tonic::Code;

/// How long a test waits for an event it expects.
const WAIT: Duration = Duration::from_secs(20);

/// One request a receiver got.
#[derive(Debug, Clone)]
struct Received {
    headers: HashMap<String, String>,
    body: Bytes,
}

impl Received {
    fn header(&self, name: &str) -> &str {
        self.headers.get(name).map_or("", String::as_str)
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// An HTTP receiver on `listener` that answers 200 and hands on each
/// request.
fn receive(
    listener: TcpListener,
) -> (
    mpsc::UnboundedReceiver<Received>,
    tokio::task::JoinHandle<()>,
) {
    let (sender, received) = mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let sender = sender.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                    let sender = sender.clone();
                    async move {
                        let headers = request
                            .headers()
                            .iter()
                            .map(|(k, v)| {
                                (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned())
                            })
                            .collect();
                        let body = request.into_body().collect().await?.to_bytes();
                        let _ = sender.send(Received { headers, body });
                        Ok::<_, hyper::Error>(hyper::Response::new(Full::new(Bytes::new())))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (received, task)
}

/// Whether `signature` is HMAC-SHA256 of `body` with `secret`, as a
/// receiver checks it.
fn signed(secret: &str, body: &[u8], signature: &str) -> bool {
    let Some(hex) = signature.strip_prefix("v1=") else {
        return false;
    };
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body);
    let expected: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    expected == hex
}

async fn set_webhook(client: &Client, url: &str) -> Result<api::SetWebhookResponse, tonic::Status> {
    client
        .events()
        .set_webhook(api::SetWebhookRequest {
            url: url.to_owned(),
            kinds: Vec::new(),
        })
        .await
        .map(tonic::Response::into_inner)
}

/// The next `count` deliveries, each checked against `secret`.
async fn deliveries(
    received: &mut mpsc::UnboundedReceiver<Received>,
    secret: &str,
    count: usize,
) -> Vec<Received> {
    let mut got = Vec::new();
    while got.len() < count {
        let request = tokio::time::timeout(WAIT, received.recv())
            .await
            .unwrap_or_else(|_| panic!("{} of {count} deliveries came: {got:#?}", got.len()))
            .unwrap();
        assert!(
            signed(secret, &request.body, request.header("airlock-signature")),
            "a delivery's signature does not verify: {request:?}"
        );
        assert_eq!(request.header("airlock-signature-version"), "v1");
        assert_eq!(request.header("content-type"), "application/json");
        got.push(request);
    }
    got
}

fn kinds_of(deliveries: &[Received]) -> Vec<(String, String)> {
    deliveries
        .iter()
        .map(|d| {
            let json = d.json();
            (
                json["sandboxId"].as_str().unwrap().to_owned(),
                json["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn seqs(deliveries: &[Received]) -> Vec<u64> {
    deliveries
        .iter()
        .map(|d| d.header("airlock-event-seq").parse().unwrap())
        .collect()
}

async fn loopback_listener() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    (listener, address)
}

#[tokio::test]
async fn a_webhook_gets_a_sandbox_life_in_order_signed() {
    let server = TestServer::start(Options::default()).await;
    let owner = server.owner().await;
    let (listener, address) = loopback_listener().await;
    let (mut received, _receiver) = receive(listener);
    let registered = set_webhook(&owner, &format!("http://{address}/hooks/airlock"))
        .await
        .unwrap();
    let secret = registered.secret;
    assert!(secret.starts_with("whsec_"), "{secret}");
    let hook = registered.webhook.unwrap();

    let id = create_sandbox(&owner, create()).await;
    let sandboxes = owner.sandboxes();
    sandboxes
        .clone()
        .pause(api::PauseSandboxRequest {
            sandbox_id: id.clone(),
            to_disk: false,
        })
        .await
        .unwrap();
    sandboxes
        .clone()
        .resume(api::ResumeSandboxRequest {
            sandbox_id: id.clone(),
        })
        .await
        .unwrap();
    sandboxes
        .clone()
        .kill(api::KillSandboxRequest {
            sandbox_id: id.clone(),
        })
        .await
        .unwrap();
    let brief = create_sandbox(
        &owner,
        api::CreateSandboxRequest {
            timeout_secs: Some(2),
            ..create()
        },
    )
    .await;

    let got = deliveries(&mut received, &secret, 6).await;
    assert_eq!(
        kinds_of(&got),
        [
            (id.clone(), "created".to_owned()),
            (id.clone(), "paused".to_owned()),
            (id.clone(), "resumed".to_owned()),
            (id.clone(), "killed".to_owned()),
            (brief.clone(), "created".to_owned()),
            (brief.clone(), "timed_out".to_owned()),
        ]
    );
    let numbers = seqs(&got);
    assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{numbers:?}");
    let types: Vec<String> = got
        .iter()
        .map(|d| d.json()["type"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(types[0], "sandbox.lifecycle.created");
    assert_eq!(types[1], "sandbox.lifecycle.paused");
    assert_eq!(types[2], "sandbox.lifecycle.resumed");
    assert_eq!(types[5], "sandbox.lifecycle.killed");
    assert_eq!(got[1].json()["details"]["pause_mode"], "memory");
    assert_eq!(got[0].json()["details"]["origin"], "cold");
    assert!(
        got[5].json()["reason"]
            .as_str()
            .unwrap()
            .contains("maximum lifetime"),
        "{:?}",
        got[5].json()
    );
    for delivery in &got {
        assert_eq!(delivery.header("airlock-webhook-id"), hook.id);
        assert_eq!(
            delivery.header("airlock-delivery-id"),
            format!("{}-{}", hook.id, delivery.header("airlock-event-seq"))
        );
        assert_eq!(
            delivery.json()["id"],
            delivery.header("airlock-delivery-id")
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn deliveries_wait_on_disk_across_a_restart_and_arrive_once() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        dir: Some(dir.path().to_owned()),
        ..Options::default()
    };
    // A port nobody answers on: the receiver is down.
    let (listener, address) = loopback_listener().await;
    drop(listener);
    let server = TestServer::start(options.clone()).await;
    let owner = server.owner().await;
    let registered = set_webhook(&owner, &format!("http://{address}/in"))
        .await
        .unwrap();
    let secret = registered.secret;
    let hook = registered.webhook.unwrap().id;
    let mut expected = Vec::new();
    for _ in 0..2 {
        let id = create_sandbox(&owner, create()).await;
        owner
            .sandboxes()
            .kill(api::KillSandboxRequest {
                sandbox_id: id.clone(),
            })
            .await
            .unwrap();
        expected.push((id.clone(), "created".to_owned()));
        expected.push((id, "killed".to_owned()));
    }
    // A sandbox left running is killed by the stopping server (the test
    // server's --on-exit kill): its end is queued by the next one.
    let left = create_sandbox(&owner, create()).await;
    expected.push((left.clone(), "created".to_owned()));
    expected.push((left, "killed".to_owned()));
    // Tried and failed at least once before the stop.
    let listed = tokio::time::timeout(WAIT, async {
        loop {
            let hooks = owner
                .events()
                .list_webhooks(api::ListWebhooksRequest {})
                .await
                .unwrap()
                .into_inner()
                .webhooks;
            let ours = hooks.into_iter().find(|h| h.id == hook).unwrap();
            if ours.pending >= 4 && !ours.last_error.is_empty() {
                return ours;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the deliveries wait, failed");
    assert_eq!(listed.last_delivered_ms, 0);
    let watched_before: Vec<api::SandboxEvent> = watch_all(&owner).await;
    server.stop().await;

    // The receiver comes back; the server starts again on its directory.
    let listener = TcpListener::bind(address).await.unwrap();
    let (mut received, _receiver) = receive(listener);
    let server = TestServer::start(options).await;
    let owner = server.owner().await;
    let got = deliveries(&mut received, &secret, expected.len()).await;
    assert_eq!(kinds_of(&got), expected);
    let ids: Vec<&str> = got
        .iter()
        .map(|d| d.header("airlock-delivery-id"))
        .collect();
    let mut unique = ids.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), ids.len(), "a delivery came twice: {ids:?}");
    // Nothing more comes for them (no repeat after success).
    let after = create_sandbox(&owner, create()).await;
    let next = deliveries(&mut received, &secret, 1).await;
    assert_eq!(kinds_of(&next), [(after, "created".to_owned())]);

    // The log numbers on across the restart and replays what came before.
    let watched = watch_all(&owner).await;
    assert!(watched.len() > watched_before.len());
    assert_eq!(&watched[..watched_before.len()], &watched_before[..]);
    let numbers: Vec<u64> = watched.iter().map(|e| e.seq).collect();
    assert!(numbers.windows(2).all(|w| w[1] == w[0] + 1), "{numbers:?}");
    let from_middle = owner
        .events()
        .watch(api::WatchEventsRequest {
            after_seq: Some(numbers[2]),
            replay_only: true,
            ..api::WatchEventsRequest::default()
        })
        .await
        .unwrap()
        .into_inner();
    let tail = collect(from_middle).await;
    assert_eq!(tail.first().map(|e| e.seq), Some(numbers[3]));
    server.stop().await;
}

/// What a stream gives until it ends.
async fn collect(mut stream: tonic::Streaming<api::SandboxEvent>) -> Vec<api::SandboxEvent> {
    let mut events = Vec::new();
    while let Some(event) = tokio::time::timeout(WAIT, stream.message())
        .await
        .expect("the replay ends")
        .unwrap()
    {
        events.push(event);
    }
    events
}

/// Every event the log holds, as the owner sees them.
async fn watch_all(client: &Client) -> Vec<api::SandboxEvent> {
    let stream = client
        .events()
        .watch(api::WatchEventsRequest {
            after_seq: Some(0),
            replay_only: true,
            ..api::WatchEventsRequest::default()
        })
        .await
        .unwrap()
        .into_inner();
    collect(stream).await
}

/// The next event of a live stream.
async fn next(stream: &mut tonic::Streaming<api::SandboxEvent>) -> api::SandboxEvent {
    tokio::time::timeout(WAIT, stream.message())
        .await
        .expect("an event comes")
        .unwrap()
        .expect("the stream goes on")
}

async fn live(client: &Client, key: &str) -> tonic::Streaming<api::SandboxEvent> {
    client
        .events()
        .watch(api::WatchEventsRequest {
            key: key.to_owned(),
            ..api::WatchEventsRequest::default()
        })
        .await
        .unwrap()
        .into_inner()
}

#[tokio::test]
async fn watch_shows_a_key_its_own_events_and_the_owner_everyones() {
    let server = TestServer::start(Options::default()).await;
    let owner = server.owner().await;
    let alice = server
        .remote(Some(&server.key("alice", api::KeyQuota::default()).await))
        .await;
    let bob = server
        .remote(Some(&server.key("bob", api::KeyQuota::default()).await))
        .await;
    let mut everyone = live(&owner, "").await;
    let mut only_bob = live(&owner, "bob").await;
    let mut alices = live(&alice, "").await;

    let of_alice = create_sandbox(&alice, create()).await;
    let of_bob = create_sandbox(&bob, create()).await;
    let of_owner = create_sandbox(&owner, create()).await;
    alice
        .sandboxes()
        .kill(api::KillSandboxRequest {
            sandbox_id: of_alice.clone(),
        })
        .await
        .unwrap();

    let mut seen = Vec::new();
    for _ in 0..4 {
        let event = next(&mut everyone).await;
        seen.push((event.sandbox_id, event.kind, event.owner));
    }
    let created = api::EventKind::Created as i32;
    let killed = api::EventKind::Killed as i32;
    assert_eq!(
        seen,
        [
            (of_alice.clone(), created, "alice".to_owned()),
            (of_bob.clone(), created, "bob".to_owned()),
            (of_owner.clone(), created, String::new()),
            (of_alice.clone(), killed, "alice".to_owned()),
        ]
    );
    let event = next(&mut only_bob).await;
    assert_eq!(event.sandbox_id, of_bob);
    let first = next(&mut alices).await;
    let second = next(&mut alices).await;
    assert_eq!(
        [
            (first.sandbox_id, first.kind),
            (second.sandbox_id, second.kind)
        ],
        [(of_alice.clone(), created), (of_alice, killed)]
    );

    // A key's replay holds its own events only.
    let replay = collect(
        bob.events()
            .watch(api::WatchEventsRequest {
                after_seq: Some(0),
                replay_only: true,
                ..api::WatchEventsRequest::default()
            })
            .await
            .unwrap()
            .into_inner(),
    )
    .await;
    assert!(replay.iter().all(|e| e.owner == "bob"), "{replay:?}");
    assert_eq!(replay.len(), 1);

    // Another key's events are the owner's to ask for.
    let refused = bob
        .events()
        .watch(api::WatchEventsRequest {
            key: "alice".to_owned(),
            ..api::WatchEventsRequest::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        refusal(&refused),
        (Code::PermissionDenied, Some(api::ErrorReason::OwnerOnly))
    );
    server.stop().await;
}

#[tokio::test]
async fn a_keys_webhook_may_not_reach_the_host_and_sees_its_own_only() {
    let server = TestServer::start(Options::default()).await;
    let owner = server.owner().await;
    let alice = server
        .remote(Some(&server.key("alice", api::KeyQuota::default()).await))
        .await;
    for url in [
        "http://127.0.0.1:9/hook",
        "https://127.0.0.1/hook",
        "https://localhost:8443/",
        "https://[::1]/",
        "ftp://hooks.example/",
        "not a url",
    ] {
        let refused = set_webhook(&alice, url).await.unwrap_err();
        assert_eq!(
            refusal(&refused),
            (
                Code::InvalidArgument,
                Some(api::ErrorReason::InvalidArgument)
            ),
            "{url}"
        );
        assert_eq!(
            refused
                .metadata()
                .get(airlock_api::reason::FIELD_KEY)
                .and_then(|v| v.to_str().ok()),
            Some("url"),
            "{url}"
        );
    }
    let owners = set_webhook(&owner, "http://127.0.0.1:9/owner")
        .await
        .unwrap();
    // TEST-NET-1: not this host.
    let alices = set_webhook(&alice, "https://192.0.2.1/alice")
        .await
        .unwrap();
    assert!(alices.secret.starts_with("whsec_"));
    let listed = |client: Client| async move {
        client
            .events()
            .list_webhooks(api::ListWebhooksRequest {})
            .await
            .unwrap()
            .into_inner()
            .webhooks
    };
    let of_alice = listed(alice.clone()).await;
    assert_eq!(of_alice.len(), 1);
    assert_eq!(of_alice[0].owner, "alice");
    assert_eq!(listed(owner.clone()).await.len(), 2);
    let hook = owners.webhook.unwrap();
    let refused = alice
        .events()
        .remove_webhook(api::RemoveWebhookRequest {
            id: hook.id.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(refusal(&refused).0, Code::NotFound);
    // Changing a webhook keeps its secret.
    let again = set_webhook(&owner, "http://127.0.0.1:9/owner")
        .await
        .unwrap();
    assert!(again.secret.is_empty());
    assert_eq!(again.webhook.unwrap().id, hook.id);
    owner
        .events()
        .remove_webhook(api::RemoveWebhookRequest { id: hook.id })
        .await
        .unwrap();
    assert_eq!(listed(owner.clone()).await.len(), 1);
    server.stop().await;
}
