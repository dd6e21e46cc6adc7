//! Named workspaces on a real server (process backend, no VMs): a key's
//! workspaces are bounded in number and in size (its quota, with safe
//! defaults), whether made by `CreateWorkspace` or by a create that names a
//! new one; they are listed with their size and host usage, and removed
//! giving their space back; another key's workspace answers as a name
//! nobody has; bad requests name their field; a create that cannot start
//! leaves no workspace behind; and the server serves other keys meanwhile.
//! (A sandbox holding a workspace needs a VM: `tests/tests/workspace.rs`.)

#![allow(clippy::unwrap_used)]

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use airlock_client::{api, Client};
use airlock_testkit::{create, create_sandbox, refusal, run, Options, TestServer};
use tonic::Code;

const MIB: u64 = 1 << 20;

async fn make(
    client: &Client,
    name: &str,
    size_mib: u64,
) -> Result<api::WorkspaceInfo, tonic::Status> {
    client
        .workspaces()
        .create_workspace(api::CreateWorkspaceRequest {
            name: name.to_owned(),
            size_mib,
            key: String::new(),
        })
        .await
        .map(tonic::Response::into_inner)
}

async fn list(client: &Client, key: &str) -> Vec<api::WorkspaceInfo> {
    client
        .workspaces()
        .list_workspaces(api::ListWorkspacesRequest {
            key: key.to_owned(),
        })
        .await
        .unwrap()
        .into_inner()
        .workspaces
}

async fn remove(client: &Client, name: &str, key: &str) -> Result<u64, tonic::Status> {
    client
        .workspaces()
        .remove_workspace(api::RemoveWorkspaceRequest {
            name: name.to_owned(),
            key: key.to_owned(),
        })
        .await
        .map(|answer| answer.into_inner().freed_bytes)
}

fn names(workspaces: &[api::WorkspaceInfo]) -> Vec<&str> {
    workspaces.iter().map(|w| w.name.as_str()).collect()
}

/// The server's files of `key`'s workspaces.
fn files(server: &TestServer, key: &str) -> Vec<String> {
    let dir = server.dir.join("data/workspaces").join(key);
    let mut found: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

fn quota_refusal(status: &tonic::Status, words: &str) {
    assert_eq!(
        refusal(status),
        (
            Code::ResourceExhausted,
            Some(api::ErrorReason::QuotaExceeded)
        ),
        "{status:?}"
    );
    assert!(status.message().contains(words), "{words:?}: {status:?}");
}

/// A create on the server's default image (which the process backend
/// cannot boot: the refusals tested here come before any start).
fn create_on_image(workspace: &str, size_mib: u64) -> api::CreateSandboxRequest {
    let store = airlock::images::ImageStore::open_default();
    assert!(
        store.resolve(airlock::images::DEFAULT_IMAGE).is_ok(),
        "the default image is missing: run scripts/setup first"
    );
    api::CreateSandboxRequest {
        workspace: workspace.to_owned(),
        workspace_size_mib: size_mib,
        ..api::CreateSandboxRequest::default()
    }
}

#[tokio::test]
async fn a_keys_workspaces_are_bounded_in_number_and_in_size() {
    let server = TestServer::start(Options::default()).await;
    let alice = server
        .remote(Some(
            &server
                .key(
                    "alice",
                    api::KeyQuota {
                        max_workspaces: 2,
                        max_workspace_mib: 96,
                        ..api::KeyQuota::default()
                    },
                )
                .await,
        ))
        .await;
    let bob = server
        .remote(Some(&server.key("bob", api::KeyQuota::default()).await))
        .await;

    let first = make(&alice, "first", 32).await.unwrap();
    assert_eq!(
        (first.name.as_str(), first.size_bytes, first.owner.as_str()),
        ("first", 32 * MIB, "alice")
    );
    assert!(first.used_bytes < 8 * MIB, "sparse: {first:?}");
    assert!(!first.in_use && first.sandbox_id.is_empty(), "{first:?}");
    assert!(first.created_at_ms > 0, "{first:?}");
    make(&alice, "second", 64).await.unwrap();

    // The number: a third is refused, however small, by either way of
    // making one; nothing is made.
    quota_refusal(
        &make(&alice, "third", 16).await.unwrap_err(),
        "key:alice may keep 2 workspaces and keeps 2",
    );
    let by_create = alice
        .sandboxes()
        .create(create_on_image("third", 16))
        .await
        .unwrap_err();
    quota_refusal(&by_create, "may keep 2 workspaces");
    assert_eq!(files(&server, "alice"), ["first.ext4", "second.ext4"]);

    // The size: 96 MiB in all.
    alice
        .workspaces()
        .remove_workspace(api::RemoveWorkspaceRequest {
            name: "first".into(),
            key: String::new(),
        })
        .await
        .unwrap();
    quota_refusal(
        &make(&alice, "big", 48).await.unwrap_err(),
        "key:alice may keep 96 MiB of workspaces and keeps 64 MiB; 48 MiB more would pass it",
    );
    let by_create = alice
        .sandboxes()
        .create(create_on_image("big", 48))
        .await
        .unwrap_err();
    quota_refusal(&by_create, "may keep 96 MiB of workspaces");
    make(&alice, "fits", 32).await.unwrap();
    assert_eq!(files(&server, "alice"), ["fits.ext4", "second.ext4"]);

    // The owner sees the figures; bob was served all along.
    let keys = server
        .owner()
        .await
        .keys()
        .list_keys(api::ListKeysRequest {})
        .await
        .unwrap()
        .into_inner()
        .keys;
    let alice_key = keys.iter().find(|k| k.name == "alice").unwrap();
    assert_eq!(
        (alice_key.workspaces, alice_key.workspace_bytes),
        (2, 96 * MIB)
    );
    let id = create_sandbox(&bob, create()).await;
    assert_eq!(run(&bob, &id, &["echo", "bob"]).await.0, b"bob\n");
    server.stop().await;
}

#[tokio::test]
async fn a_key_without_workspace_figures_keeps_eight_and_32_gib() {
    let server = TestServer::start(Options::default()).await;
    let carol = server
        .remote(Some(&server.key("carol", api::KeyQuota::default()).await))
        .await;
    // The whole size at once: a sparse file, so it costs only its metadata.
    make(&carol, "huge", 32 * 1024).await.unwrap();
    quota_refusal(
        &make(&carol, "more", 16).await.unwrap_err(),
        "may keep 32768 MiB of workspaces and keeps 32768 MiB",
    );
    remove(&carol, "huge", "").await.unwrap();
    for n in 0..8 {
        make(&carol, &format!("w{n}"), 16).await.unwrap();
    }
    quota_refusal(
        &make(&carol, "w8", 16).await.unwrap_err(),
        "may keep 8 workspaces and keeps 8",
    );
    // The owner has no quota of its own.
    let owner = server.owner().await;
    for n in 0..9 {
        make(&owner, &format!("o{n}"), 16).await.unwrap();
    }
    assert_eq!(list(&owner, "").await.len(), 9);
    server.stop().await;
}

#[tokio::test]
async fn a_workspace_is_listed_and_removed_by_its_key_only() {
    let server = TestServer::start(Options::default()).await;
    let alice = server
        .remote(Some(&server.key("alice", api::KeyQuota::default()).await))
        .await;
    let bob = server
        .remote(Some(&server.key("bob", api::KeyQuota::default()).await))
        .await;
    let owner = server.owner().await;
    make(&alice, "notes", 64).await.unwrap();

    // The file is the server's alone; its directories can be passed
    // through (for an unprivileged VMM) but not listed.
    let path = server.dir.join("data/workspaces/alice/notes.ext4");
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.len(), 64 * MIB);
    if nix_is_root() {
        for dir in ["data", "data/workspaces", "data/workspaces/alice"] {
            let mode = std::fs::metadata(server.dir.join(dir)).unwrap().mode();
            assert_eq!(mode & 0o077, 0o011, "{dir}: {mode:o}");
        }
    }

    // Bob: not listed, and removing it is as removing a name nobody has.
    assert!(list(&bob, "").await.is_empty());
    let theirs = remove(&bob, "notes", "").await.unwrap_err();
    assert_eq!(
        refusal(&theirs),
        (Code::NotFound, Some(api::ErrorReason::NotFound))
    );
    let nobodys = remove(&bob, "nothing", "").await.unwrap_err();
    assert_eq!(
        theirs.message().replace("notes", "NAME"),
        nobodys.message().replace("nothing", "NAME")
    );
    assert!(path.is_file(), "bob removed alice's workspace");
    // Bob cannot name alice's key either: that is the owner's.
    let named = remove(&bob, "notes", "alice").await.unwrap_err();
    assert_eq!(
        refusal(&named),
        (Code::PermissionDenied, Some(api::ErrorReason::OwnerOnly))
    );
    assert!(path.is_file());

    // The owner: its own list is its own; alice's by her key's name.
    assert!(list(&owner, "").await.is_empty());
    assert_eq!(names(&list(&owner, "alice").await), ["notes"]);
    let listed = list(&alice, "").await;
    assert_eq!(names(&listed), ["notes"]);
    assert_eq!(listed[0].size_bytes, 64 * MIB);
    assert_eq!(listed[0].used_bytes, meta.blocks() * 512);

    // Alice removes it: the file and its space go, and it is gone.
    let freed = remove(&alice, "notes", "").await.unwrap();
    assert_eq!(freed, meta.blocks() * 512);
    assert!(!path.exists());
    assert!(list(&alice, "").await.is_empty());
    let again = remove(&alice, "notes", "").await.unwrap_err();
    assert_eq!(refusal(&again).0, Code::NotFound);

    // The owner may remove a key's, the key's removal included.
    make(&alice, "left", 16).await.unwrap();
    owner
        .keys()
        .remove_key(api::RemoveKeyRequest {
            name: "alice".into(),
        })
        .await
        .unwrap();
    assert_eq!(names(&list(&owner, "alice").await), ["left"]);
    assert!(remove(&owner, "left", "alice").await.unwrap() > 0);
    assert!(files(&server, "alice").is_empty());

    // Bob was served throughout.
    let id = create_sandbox(&bob, create()).await;
    assert_eq!(run(&bob, &id, &["true"]).await.2.exit_code, 0);
    server.stop().await;
}

#[tokio::test]
async fn bad_workspace_requests_name_their_field() {
    let server = TestServer::start(Options::default()).await;
    let owner = server.owner().await;
    let invalid = |status: tonic::Status, expected: &str| {
        assert_eq!(
            status.code(),
            Code::InvalidArgument,
            "{expected}: {status:?}"
        );
        assert_eq!(
            airlock_client::reason::field_of(&status),
            Some(expected),
            "{status:?}"
        );
    };
    invalid(make(&owner, "", 0).await.unwrap_err(), "name");
    invalid(make(&owner, "../up", 0).await.unwrap_err(), "name");
    invalid(make(&owner, "a/b", 0).await.unwrap_err(), "name");
    invalid(make(&owner, "tiny", 8).await.unwrap_err(), "size_mib");
    invalid(make(&owner, "vast", 1 << 40).await.unwrap_err(), "size_mib");
    let bad_key = owner
        .workspaces()
        .list_workspaces(api::ListWorkspacesRequest { key: "..".into() })
        .await
        .unwrap_err();
    invalid(bad_key, "key");
    invalid(remove(&owner, "", "").await.unwrap_err(), "name");

    let mut sandboxes = owner.sandboxes();
    let without = sandboxes
        .create(api::CreateSandboxRequest {
            workspace_size_mib: 64,
            ..create()
        })
        .await
        .unwrap_err();
    invalid(without, "workspace_size_mib");
    invalid(
        sandboxes
            .create(create_on_image("small", 4))
            .await
            .unwrap_err(),
        "workspace_size_mib",
    );
    // A workspace keeps its size: another one is refused, naming it.
    make(&owner, "kept", 32).await.unwrap();
    let resized = sandboxes
        .create(create_on_image("kept", 64))
        .await
        .unwrap_err();
    invalid(resized.clone(), "workspace_size_mib");
    assert!(
        resized.message().contains("exists with 32 MiB"),
        "{resized:?}"
    );
    // Made twice.
    let twice = make(&owner, "kept", 32).await.unwrap_err();
    assert_eq!(
        refusal(&twice),
        (Code::AlreadyExists, Some(api::ErrorReason::AlreadyExists))
    );
    assert_eq!(
        std::fs::metadata(owner_file(&server, "kept"))
            .unwrap()
            .len(),
        32 * MIB
    );
    server.stop().await;
}

fn owner_file(server: &TestServer, name: &str) -> PathBuf {
    server
        .dir
        .join("data/workspaces/_owner")
        .join(format!("{name}.ext4"))
}

#[tokio::test]
async fn a_create_that_cannot_start_leaves_no_workspace_behind() {
    let server = TestServer::start(Options::default()).await;
    let dave = server
        .remote(Some(
            &server
                .key(
                    "dave",
                    api::KeyQuota {
                        max_workspaces: 1,
                        ..api::KeyQuota::default()
                    },
                )
                .await,
        ))
        .await;
    // The process backend boots no image, so this start fails after the
    // workspace was counted and made.
    let failed = dave
        .sandboxes()
        .create(create_on_image("fresh", 32))
        .await
        .unwrap_err();
    assert!(
        failed
            .message()
            .contains("the process backend has no disks"),
        "refused at the start, after the workspace was made: {failed:?}"
    );
    assert!(list(&dave, "").await.is_empty());
    assert!(files(&server, "dave").is_empty());
    // Its place in the quota was given back.
    make(&dave, "fresh", 32).await.unwrap();
    server.stop().await;
}

fn nix_is_root() -> bool {
    nix::unistd::geteuid().is_root()
}
