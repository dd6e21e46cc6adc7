//! A server's stores are its own: two servers on one host, each with its
//! own data directory, state directory and named templates (as their
//! configurations say), share no key and no named template. On real
//! servers (process backend, no VMs).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use airlock::template::NamedMeta;
use airlock_client::{api, Client};
use airlock_testkit::{refusal, Options, TestServer};
use tonic::Code;

/// Puts a named template `name` (as `airlock template build` leaves one)
/// into the server's store of named templates.
fn put_template(server: &TestServer, name: &str) {
    let dir = server.dir.join("templates").join(name);
    std::fs::create_dir_all(dir.join("snapshot")).unwrap();
    let rootfs = dir.join("root.ext4");
    std::fs::write(&rootfs, b"").unwrap();
    let meta = NamedMeta {
        name: name.to_owned(),
        base: "default".to_owned(),
        rootfs,
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

async fn key_names(owner: &Client) -> Vec<String> {
    let listed = owner
        .keys()
        .list_keys(api::ListKeysRequest {})
        .await
        .unwrap()
        .into_inner();
    listed.keys.into_iter().map(|key| key.name).collect()
}

async fn template_names(owner: &Client) -> Vec<String> {
    let listed = owner
        .sandboxes()
        .list_templates(api::ListTemplatesRequest {})
        .await
        .unwrap()
        .into_inner();
    listed.templates.into_iter().map(|t| t.name).collect()
}

fn exists(path: &Path) -> bool {
    path.try_exists().unwrap()
}

#[tokio::test]
async fn two_servers_share_no_key_and_no_named_template() {
    let first = TestServer::start(Options::default()).await;
    let second = TestServer::start(Options::default()).await;
    let (first_owner, second_owner) = (first.owner().await, second.owner().await);

    // A key made on one server is that server's alone.
    let key = first.key("alice", api::KeyQuota::default()).await;
    assert_eq!(key_names(&first_owner).await, ["alice"]);
    assert!(key_names(&second_owner).await.is_empty());
    assert!(exists(&first.dir.join("data/keys.json")));
    assert!(!exists(&second.dir.join("data/keys.json")));
    let ping = first.remote(Some(&key)).await.ping().await.unwrap();
    assert_eq!(ping.principal, "key:alice");
    let refused = second
        .remote(Some(&key))
        .await
        .sandboxes()
        .ping(api::PingRequest {})
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");

    // So is a named template in its store.
    put_template(&first, "web");
    assert_eq!(template_names(&first_owner).await, ["web"]);
    assert!(template_names(&second_owner).await.is_empty());
    let refused = second_owner
        .sandboxes()
        .create(api::CreateSandboxRequest {
            template: "web".to_owned(),
            ..api::CreateSandboxRequest::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        refusal(&refused),
        (Code::NotFound, Some(api::ErrorReason::NotFound)),
        "{refused:?}"
    );
    assert!(
        refused.message().contains("no template named web"),
        "{refused:?}"
    );
    // The first server finds it: a create with another size is refused
    // by the template's own check, past the lookup.
    let refused = first_owner
        .sandboxes()
        .create(api::CreateSandboxRequest {
            template: "web".to_owned(),
            memory_mib: 512,
            ..api::CreateSandboxRequest::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        refusal(&refused),
        (
            Code::InvalidArgument,
            Some(api::ErrorReason::InvalidArgument)
        ),
        "{refused:?}"
    );
    assert!(
        refused.message().contains("was built for 256 MiB"),
        "{refused:?}"
    );

    first.stop().await;
    second.stop().await;
}
