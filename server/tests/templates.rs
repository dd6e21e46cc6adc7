//! Templates through the API on a real server (process backend, no VMs):
//! what `Templates.Build` refuses before any build VM starts (a malformed
//! file naming its line, a bad name, a context past the bound or leading
//! out of itself, a stream cut before its end, a name of the server's own,
//! a key past its storage quota), and whose templates are whose: a key
//! lists and starts from the server's and its own, never another key's,
//! and deletes only its own. (A build itself needs VMs:
//! `tests/tests/template_api.rs`.)

#![allow(clippy::unwrap_used)]

use std::path::Path;

use airlock::template::NamedMeta;
use airlock_client::{api, Client, ClientError};
use airlock_testkit::{create, refusal, Options, TestServer};
use bytes::Bytes;
use tonic::Code;

const FILE: &str = "FROM default\nCOPY app.txt /srv/\nRUN true\n";

fn header(name: &str, file: &str) -> api::BuildTemplateHeader {
    api::BuildTemplateHeader {
        name: name.to_owned(),
        file: file.to_owned(),
        ..api::BuildTemplateHeader::default()
    }
}

/// A tar stream of one file.
fn tar_of(name: &str, data: &[u8]) -> Bytes {
    let mut builder = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.set_entry_type(tar::EntryType::Regular);
    let raw = &mut h.as_old_mut().name;
    raw[..name.len()].copy_from_slice(name.as_bytes());
    h.set_cksum();
    builder.append(&h, data).unwrap();
    Bytes::from(builder.into_inner().unwrap())
}

/// A build's refusal: the call's status, or its stream's first item's.
async fn refused(
    client: &Client,
    header: api::BuildTemplateHeader,
    context: Vec<Bytes>,
) -> tonic::Status {
    let context = futures::stream::iter(context.into_iter().map(Some));
    match client.build_template(header, context).await {
        Err(ClientError::Call(status)) => *status,
        Err(other) => panic!("{other}"),
        Ok(mut events) => match events.message().await {
            Err(status) => status,
            Ok(event) => panic!("the build was not refused: {event:?}"),
        },
    }
}

/// Puts a template `name` holding `bytes` into the store at `dir`.
fn put(dir: &Path, name: &str, bytes: usize) {
    let dir = dir.join(name);
    std::fs::create_dir_all(dir.join("snapshot")).unwrap();
    std::fs::write(dir.join("snapshot/memory"), vec![1u8; bytes]).unwrap();
    std::fs::write(dir.join("root.ext4"), b"").unwrap();
    let meta = NamedMeta {
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

/// The directory of `key`'s own templates on `server`.
fn key_store(server: &TestServer, key: &str) -> std::path::PathBuf {
    server.dir.join("data/templates/keys").join(key)
}

async fn names(client: &Client) -> Vec<(String, String)> {
    let mut listed: Vec<_> = client
        .sandboxes()
        .list_templates(api::ListTemplatesRequest {})
        .await
        .unwrap()
        .into_inner()
        .templates
        .into_iter()
        .map(|t| (t.name, t.owner))
        .collect();
    listed.sort();
    listed
}

async fn delete(client: &Client, name: &str) -> Result<(), tonic::Status> {
    client
        .templates()
        .delete_template(api::DeleteTemplateRequest {
            name: name.to_owned(),
        })
        .await
        .map(drop)
}

#[tokio::test]
async fn a_malformed_file_is_refused_naming_its_line() {
    let server = TestServer::start(Options::default()).await;
    let key = server.key("alice", api::KeyQuota::default()).await;
    let alice = server.remote(Some(&key)).await;
    let file = "FROM default\nRUN true\nCMD [\"python3\"]\n";
    let status = refused(&alice, header("web", file), vec![]).await;
    assert_eq!(
        refusal(&status),
        (
            Code::InvalidArgument,
            Some(api::ErrorReason::InvalidArgument)
        )
    );
    assert_eq!(
        airlock_client::reason::field_of(&status),
        Some("header.file")
    );
    assert!(status.message().contains("line 3"), "{status:?}");
    assert!(status.message().contains("CMD"), "{status:?}");
    let status = refused(
        &alice,
        header("web", "FROM default\nCOPY /etc/passwd /x\n"),
        vec![],
    )
    .await;
    assert_eq!(
        airlock_client::reason::field_of(&status),
        Some("header.file")
    );
    assert!(status.message().contains("line 2"), "{status:?}");
    server.stop().await;
}

#[tokio::test]
async fn a_bad_name_and_a_missing_header_are_refused_naming_the_field() {
    let server = TestServer::start(Options::default()).await;
    let key = server.key("alice", api::KeyQuota::default()).await;
    let alice = server.remote(Some(&key)).await;
    for (name, field) in [
        ("a b", "header.name"),
        ("", "header.name"),
        (".hidden", "header.name"),
    ] {
        let status = refused(&alice, header(name, FILE), vec![]).await;
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert_eq!(airlock_client::reason::field_of(&status), Some(field));
    }
    let status = refused(&alice, header("web", ""), vec![]).await;
    assert_eq!(
        airlock_client::reason::field_of(&status),
        Some("header.file")
    );
    let asked = api::BuildTemplateHeader {
        timeout_secs: 7201,
        ..header("web", FILE)
    };
    let status = refused(&alice, asked, vec![]).await;
    assert_eq!(
        airlock_client::reason::field_of(&status),
        Some("header.timeout_secs")
    );
    let asked = api::BuildTemplateHeader {
        allow_net: vec!["127.0.0.1:22".into()],
        ..header("web", FILE)
    };
    let status = refused(&alice, asked, vec![]).await;
    assert_eq!(
        airlock_client::reason::field_of(&status),
        Some("header.allow_net[0]")
    );
    // A stream that does not begin with its header.
    let requests = futures::stream::iter([api::BuildTemplateRequest {
        part: Some(api::build_template_request::Part::Context(tar_of(
            "a", b"x",
        ))),
    }]);
    let status = alice.templates().build(requests).await.unwrap_err();
    assert_eq!(airlock_client::reason::field_of(&status), Some("header"));
    server.stop().await;
}

#[tokio::test]
async fn a_context_past_the_bound_escaping_or_cut_short_is_refused() {
    let server = TestServer::start(Options::default()).await;
    let key = server.key("alice", api::KeyQuota::default()).await;
    let alice = server.remote(Some(&key)).await;
    let huge = api::BuildTemplateHeader {
        context_bytes: airlock_client::limits::DEFAULT_MAX_CONTEXT_BYTES + 1,
        ..header("web", FILE)
    };
    let status = refused(&alice, huge, vec![]).await;
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.message().starts_with("context:"), "{status:?}");
    assert!(status.message().contains("1024 MiB"), "{status:?}");

    let status = refused(&alice, header("web", FILE), vec![tar_of("../evil", b"x")]).await;
    assert_eq!(
        airlock_client::reason::field_of(&status),
        Some("context"),
        "{status:?}"
    );
    assert!(status.message().contains("../evil"), "{status:?}");

    let requests = futures::stream::iter([
        api::BuildTemplateRequest {
            part: Some(api::build_template_request::Part::Header(header(
                "web", FILE,
            ))),
        },
        api::BuildTemplateRequest {
            part: Some(api::build_template_request::Part::Context(tar_of(
                "app.txt", b"x",
            ))),
        },
    ]);
    let status = alice.templates().build(requests).await.unwrap_err();
    assert_eq!(
        airlock_client::reason::field_of(&status),
        Some("end"),
        "{status:?}"
    );
    let contexts = server.dir.join("data/templates/contexts");
    let left = std::fs::read_dir(&contexts).map_or(0, |dir| dir.count());
    assert_eq!(left, 0, "a refused context is removed");
    server.stop().await;
}

#[tokio::test]
async fn another_keys_template_does_not_exist_for_you() {
    let server = TestServer::start(Options::default()).await;
    let alice_key = server.key("alice", api::KeyQuota::default()).await;
    let bob_key = server.key("bob", api::KeyQuota::default()).await;
    let alice = server.remote(Some(&alice_key)).await;
    let bob = server.remote(Some(&bob_key)).await;
    put(&key_store(&server, "alice"), "web", 4096);
    assert_eq!(
        names(&alice).await,
        [("web".to_owned(), "alice".to_owned())]
    );
    assert!(names(&bob).await.is_empty());
    let status = delete(&bob, "web").await.unwrap_err();
    assert_eq!(
        refusal(&status),
        (Code::NotFound, Some(api::ErrorReason::NotFound))
    );
    assert!(
        status.message().contains("no template named web"),
        "{status:?}"
    );
    let request = api::CreateSandboxRequest {
        template: "web".into(),
        ..create()
    };
    let status = bob.sandboxes().create(request).await.unwrap_err();
    assert_eq!(
        refusal(&status),
        (Code::NotFound, Some(api::ErrorReason::NotFound))
    );
    assert!(
        status.message().contains("no template named web"),
        "{status:?}"
    );
    let keys = server
        .owner()
        .await
        .keys()
        .list_keys(api::ListKeysRequest {})
        .await
        .unwrap()
        .into_inner()
        .keys;
    let listed = keys.iter().find(|k| k.name == "alice").unwrap();
    assert_eq!(listed.templates, 1);
    assert!(listed.storage_bytes >= 4096, "{listed:?}");
    delete(&alice, "web").await.unwrap();
    assert!(names(&alice).await.is_empty());
    let status = delete(&alice, "web").await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    server.stop().await;
}

#[tokio::test]
async fn the_servers_own_templates_are_every_keys_to_start_from_not_to_delete() {
    let server = TestServer::start(Options::default()).await;
    let key = server.key("alice", api::KeyQuota::default()).await;
    let alice = server.remote(Some(&key)).await;
    put(&server.dir.join("templates"), "base-web", 0);
    assert_eq!(
        names(&alice).await,
        [("base-web".to_owned(), String::new())]
    );
    let status = refused(&alice, header("base-web", FILE), vec![]).await;
    assert_eq!(
        refusal(&status),
        (Code::AlreadyExists, Some(api::ErrorReason::AlreadyExists))
    );
    let status = delete(&alice, "base-web").await.unwrap_err();
    assert_eq!(
        refusal(&status),
        (Code::PermissionDenied, Some(api::ErrorReason::OwnerOnly))
    );
    let owner = server.owner().await;
    delete(&owner, "base-web").await.unwrap();
    assert!(names(&alice).await.is_empty());
    server.stop().await;
}

#[tokio::test]
async fn a_key_past_its_storage_quota_builds_nothing() {
    let server = TestServer::start(Options::default()).await;
    let quota = api::KeyQuota {
        max_storage_mib: 1,
        ..api::KeyQuota::default()
    };
    let key = server.key("alice", quota).await;
    let alice = server.remote(Some(&key)).await;
    put(&key_store(&server, "alice"), "big", 2 << 20);
    let status = refused(&alice, header("web", FILE), vec![tar_of("app.txt", b"x")]).await;
    assert_eq!(
        refusal(&status),
        (
            Code::ResourceExhausted,
            Some(api::ErrorReason::QuotaExceeded)
        )
    );
    assert!(status.message().contains("of its 1 MiB"), "{status:?}");
    // Deleting its template frees the key's storage.
    delete(&alice, "big").await.unwrap();
    let keys = server
        .owner()
        .await
        .keys()
        .list_keys(api::ListKeysRequest {})
        .await
        .unwrap()
        .into_inner()
        .keys;
    let listed = keys.iter().find(|k| k.name == "alice").unwrap();
    assert_eq!(
        (listed.templates, listed.storage_bytes < 1 << 20),
        (0, true),
        "{listed:?}"
    );
    server.stop().await;
}
