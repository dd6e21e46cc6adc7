//! Whose sandbox is whose: a sandbox belongs to the key that made it;
//! another key's sandbox does not exist for you on any call; a key's quota
//! is enforced with its figures; the owner sees everything.

#![allow(clippy::unwrap_used)]

use airlock_client::{api, Client};
use airlock_testkit::{create, create_sandbox, refusal, run, Options, TestServer};
use tonic::Code;

/// Every call a stranger could make on `id`, each refused NOT_FOUND with
/// the same reason and message as an id nobody has.
async fn refused_everywhere(stranger: &Client, id: &str) {
    let not_found = |status: tonic::Status, call: &str| {
        assert_eq!(
            refusal(&status),
            (Code::NotFound, Some(api::ErrorReason::SandboxNotFound)),
            "{call}: {status:?}"
        );
        assert_eq!(status.message(), format!("no sandbox {id}"), "{call}");
    };
    let sandbox_id = id.to_owned();
    let mut sandboxes = stranger.sandboxes();
    not_found(
        sandboxes
            .get(api::GetSandboxRequest {
                sandbox_id: sandbox_id.clone(),
            })
            .await
            .unwrap_err(),
        "get",
    );
    not_found(
        sandboxes
            .pause(api::PauseSandboxRequest {
                sandbox_id: sandbox_id.clone(),
                to_disk: false,
            })
            .await
            .unwrap_err(),
        "pause",
    );
    not_found(
        sandboxes
            .fork(api::ForkSandboxRequest {
                sandbox_id: sandbox_id.clone(),
                count: 1,
            })
            .await
            .unwrap_err(),
        "fork",
    );
    not_found(
        sandboxes
            .kill(api::KillSandboxRequest {
                sandbox_id: sandbox_id.clone(),
            })
            .await
            .unwrap_err(),
        "kill",
    );
    let exec = stranger
        .start(api::StartProcess {
            sandbox_id: sandbox_id.clone(),
            argv: vec!["true".into()],
            ..api::StartProcess::default()
        })
        .await
        .unwrap_err();
    not_found(exec.status().unwrap().clone(), "exec");
    not_found(
        stranger
            .files()
            .stat(api::StatRequest {
                sandbox_id: sandbox_id.clone(),
                path: "/".into(),
            })
            .await
            .unwrap_err(),
        "stat (cp)",
    );
    not_found(
        stranger
            .network()
            .get_policy(api::GetPolicyRequest {
                sandbox_id: sandbox_id.clone(),
            })
            .await
            .unwrap_err(),
        "network",
    );
    not_found(
        stranger
            .code()
            .list_contexts(api::ListContextsRequest {
                sandbox_id: sandbox_id.clone(),
            })
            .await
            .unwrap_err(),
        "code",
    );
}

#[tokio::test]
async fn two_keys_cannot_see_or_touch_each_others_sandboxes() {
    let server = TestServer::start(Options::default()).await;
    let alice = server
        .remote(Some(&server.key("alice", api::KeyQuota::default()).await))
        .await;
    let bob = server
        .remote(Some(&server.key("bob", api::KeyQuota::default()).await))
        .await;
    let mut labelled = create();
    labelled.metadata.insert("user".into(), "alice".into());
    let id = create_sandbox(&alice, labelled).await;
    let (out, _, exit) = run(&alice, &id, &["echo", "mine"]).await;
    assert_eq!((out.as_slice(), exit.exit_code), (&b"mine\n"[..], 0));

    refused_everywhere(&bob, &id).await;
    refused_everywhere(&bob, "sandbox-nobody-has").await;
    let listed = bob
        .sandboxes()
        .list(api::ListSandboxesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(listed.sandboxes.is_empty(), "{listed:?}");

    // Still alice's, untouched.
    let info = alice
        .sandboxes()
        .get(api::GetSandboxRequest {
            sandbox_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.state(), api::SandboxState::Running);
    assert_eq!(info.owner, "alice");
    assert_eq!(info.metadata.get("user").map(String::as_str), Some("alice"));
    // The owner sees it, and can end it.
    let owner = server.owner().await;
    let all = owner
        .sandboxes()
        .list(api::ListSandboxesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(all.sandboxes.len(), 1);
    owner
        .sandboxes()
        .kill(api::KillSandboxRequest {
            sandbox_id: id.clone(),
        })
        .await
        .unwrap();
    refused_everywhere(&alice, &id).await;
    server.stop().await;
}

#[tokio::test]
async fn a_quota_refusal_gives_the_figures_and_the_next_call_works() {
    let server = TestServer::start(Options::default()).await;
    let key = server
        .key(
            "small",
            api::KeyQuota {
                max_sandboxes: 1,
                max_memory_mib: 768,
                ..api::KeyQuota::default()
            },
        )
        .await;
    let client = server.remote(Some(&key)).await;
    let first = create_sandbox(&client, create()).await;
    let refused = client.sandboxes().create(create()).await.unwrap_err();
    assert_eq!(
        refusal(&refused),
        (
            Code::ResourceExhausted,
            Some(api::ErrorReason::QuotaExceeded)
        )
    );
    assert!(
        refused
            .message()
            .contains("may hold 1 sandboxes and holds 1"),
        "{refused:?}"
    );
    client
        .sandboxes()
        .kill(api::KillSandboxRequest { sandbox_id: first })
        .await
        .unwrap();
    // Memory: 1024 MiB passes the key's 768.
    let big = api::CreateSandboxRequest {
        memory_mib: 1024,
        ..create()
    };
    let refused = client.sandboxes().create(big).await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert!(refused.message().contains("768 MiB"), "{refused:?}");
    // Within the quota again.
    let id = create_sandbox(&client, create()).await;
    let (_, _, exit) = run(&client, &id, &["true"]).await;
    assert_eq!(exit.exit_code, 0);
    server.stop().await;
}

#[tokio::test]
async fn list_filters_by_labels_and_state_in_pages() {
    let server = TestServer::start(Options::default()).await;
    let owner = server.owner().await;
    let mut ids = Vec::new();
    for team in ["a", "a", "b"] {
        let mut request = create();
        request.metadata.insert("team".into(), team.into());
        ids.push(create_sandbox(&owner, request).await);
    }
    let list = |metadata: &[(&str, &str)], states: Vec<i32>, page_size, page_token: String| {
        let owner = owner.clone();
        let metadata = metadata
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        async move {
            owner
                .sandboxes()
                .list(api::ListSandboxesRequest {
                    metadata,
                    states,
                    page_size,
                    page_token,
                })
                .await
                .unwrap()
                .into_inner()
        }
    };
    assert_eq!(
        list(&[("team", "a")], vec![], 0, String::new())
            .await
            .sandboxes
            .len(),
        2
    );
    assert_eq!(
        list(&[("team", "b")], vec![], 0, String::new())
            .await
            .sandboxes
            .len(),
        1
    );
    let first = list(&[], vec![], 2, String::new()).await;
    assert_eq!(first.sandboxes.len(), 2);
    assert!(!first.next_page_token.is_empty());
    let second = list(&[], vec![], 2, first.next_page_token.clone()).await;
    assert_eq!(second.sandboxes.len(), 1);
    assert!(second.next_page_token.is_empty());
    let mut all: Vec<String> = first
        .sandboxes
        .iter()
        .chain(&second.sandboxes)
        .map(|s| s.sandbox_id.clone())
        .collect();
    all.sort();
    ids.sort();
    assert_eq!(all, ids);
    owner
        .sandboxes()
        .pause(api::PauseSandboxRequest {
            sandbox_id: ids[0].clone(),
            to_disk: false,
        })
        .await
        .unwrap();
    let paused = list(
        &[],
        vec![api::SandboxState::Paused.into()],
        0,
        String::new(),
    )
    .await;
    assert_eq!(paused.sandboxes.len(), 1);
    assert_eq!(paused.sandboxes[0].sandbox_id, ids[0]);
    server.stop().await;
}
