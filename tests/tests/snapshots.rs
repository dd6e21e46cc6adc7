//! Snapshots through the library: a sandbox with a running server, files
//! and a Python context with a variable is snapshotted; sandboxes started
//! from the snapshot have all three, their own hostname and entropy, and
//! the original goes on unchanged; a paused and a disk-paused sandbox are
//! snapshotted and forked without being started; a snapshot of a
//! sandbox started from a snapshot is whole in itself.

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;

use airlock::snapshot::SnapshotStore;
use airlock::{Origin, Sandbox, SandboxBuilder, SandboxState};
use airlock_tests::{sh, stdout_of};

/// Clones of the default image's template, saved sandboxes under `dir`.
fn builder(dir: &Path) -> SandboxBuilder {
    airlock_tests::builder()
        .saved_dir(dir.join("saved"))
        .image(airlock_tests::default_image())
        .from_template(true)
}

/// A server on port 8000 answering its own name, a file in /root, and a
/// Python variable in the default context.
async fn prepare(sandbox: &Sandbox) {
    stdout_of(
        sandbox,
        "mkdir -p /root/site && echo from-the-snapshot > /root/site/index.html && \
         echo kept > /root/note",
    )
    .await;
    let server = sandbox
        .exec(sh("cd /root/site && exec python3 -m http.server 8000 >/dev/null 2>&1").tag("web"))
        .await
        .expect("server starts");
    drop(server);
    wait_for_server(sandbox).await;
    let cell = sandbox
        .run_code("answer = 41 + 1")
        .await
        .expect("cell")
        .output()
        .await
        .expect("cell runs");
    assert!(cell.error.is_none(), "{cell:?}");
}

async fn wait_for_server(sandbox: &Sandbox) {
    for _ in 0..100 {
        let out = stdout_of(
            sandbox,
            "python3 -c \"import urllib.request as r; print(r.urlopen('http://127.0.0.1:8000/').read().decode().strip())\" 2>/dev/null || true",
        )
        .await;
        if out.trim() == "from-the-snapshot" {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("the server in the sandbox never answered");
}

async fn answer(sandbox: &Sandbox) -> String {
    let out = sandbox
        .run_code("answer")
        .await
        .expect("cell")
        .output()
        .await
        .expect("cell runs");
    out.text().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn sandboxes_from_a_snapshot_have_its_server_files_and_variable_and_their_own_identity() {
    let dir = tempfile::tempdir().unwrap();
    let store = SnapshotStore::new(dir.path().join("snapshots"));
    let original = builder(dir.path()).start().await.expect("original starts");
    prepare(&original).await;
    let taken = original.snapshot(&store).await.expect("snapshot");
    println!(
        "snapshot {} of {} MiB: paused {:?}, took {:?}, {} bytes on disk",
        taken.snapshot.id(),
        taken.snapshot.meta().vm.memory_mib,
        taken.paused,
        taken.took,
        taken.snapshot.disk_bytes()
    );
    assert!(taken.paused > Duration::ZERO);
    assert_eq!(store.list().unwrap().len(), 1);

    // Two at a time, as a user's burst would start them.
    let starts = (0..2).map(|_| builder(dir.path()).snapshot(&taken.snapshot).start());
    let clones: Vec<Sandbox> = futures::future::join_all(starts)
        .await
        .into_iter()
        .map(|started| started.expect("a clone of the snapshot starts"))
        .collect();
    let mut hostnames = vec![stdout_of(&original, "hostname").await];
    let mut entropy = vec![stdout_of(&original, "head -c 16 /dev/urandom | od -An -tx1").await];
    for clone in &clones {
        assert_eq!(
            clone.origin(),
            &Origin::Snapshot {
                id: taken.snapshot.id().to_owned()
            }
        );
        wait_for_server(clone).await;
        assert_eq!(stdout_of(clone, "cat /root/note").await, "kept\n");
        assert_eq!(answer(clone).await, "42");
        let listed = clone.list().await.expect("list");
        assert!(
            listed.iter().any(|p| p.tag.as_deref() == Some("web")),
            "the server's process is listed: {listed:?}"
        );
        hostnames.push(stdout_of(clone, "hostname").await);
        entropy.push(stdout_of(clone, "head -c 16 /dev/urandom | od -An -tx1").await);
        // What a clone writes stays its own.
        stdout_of(clone, "echo changed > /root/note").await;
    }
    hostnames.sort();
    hostnames.dedup();
    assert_eq!(hostnames.len(), 3, "each has its own hostname");
    entropy.sort();
    entropy.dedup();
    assert_eq!(entropy.len(), 3, "each has its own entropy");
    assert_eq!(stdout_of(&original, "cat /root/note").await, "kept\n");
    assert_eq!(answer(&original).await, "42");

    // A snapshot of a clone is whole in itself: the first one can go.
    let again = clones[0]
        .snapshot(&store)
        .await
        .expect("a clone's snapshot");
    assert_eq!(
        again.snapshot.meta().parent.as_deref(),
        Some(taken.snapshot.id())
    );
    assert!(store.remove(taken.snapshot.id()).unwrap());
    let grandchild = builder(dir.path())
        .snapshot(&again.snapshot)
        .start()
        .await
        .expect("a clone of the second snapshot starts");
    assert_eq!(stdout_of(&grandchild, "cat /root/note").await, "changed\n");
    // The clones of the removed snapshot run on.
    assert_eq!(stdout_of(&clones[1], "cat /root/note").await, "changed\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn paused_and_disk_paused_sandboxes_are_snapshotted_and_forked_as_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let store = SnapshotStore::new(dir.path().join("snapshots"));
    let sandbox = builder(dir.path()).start().await.expect("starts");
    stdout_of(&sandbox, "echo paused-once > /root/state").await;

    sandbox.pause().await.expect("pause");
    let taken = sandbox
        .snapshot(&store)
        .await
        .expect("snapshot of a paused sandbox");
    assert_eq!(taken.paused, Duration::ZERO);
    assert_eq!(sandbox.state(), SandboxState::Paused);
    let children = sandbox.fork(1).await.expect("fork of a paused sandbox");
    assert_eq!(sandbox.state(), SandboxState::Paused);
    assert_eq!(
        stdout_of(&children[0], "cat /root/state").await,
        "paused-once\n"
    );

    sandbox.pause_to_disk().await.expect("pause to disk");
    let on_disk = sandbox
        .snapshot(&store)
        .await
        .expect("snapshot of a sandbox on disk");
    assert_eq!(sandbox.state(), SandboxState::OnDisk);
    let children = sandbox.fork(1).await.expect("fork of a sandbox on disk");
    assert_eq!(
        sandbox.state(),
        SandboxState::OnDisk,
        "the fork left it on disk"
    );
    assert_eq!(
        stdout_of(&children[0], "cat /root/state").await,
        "paused-once\n"
    );
    for taken in [taken, on_disk] {
        let clone = builder(dir.path())
            .snapshot(&taken.snapshot)
            .start()
            .await
            .expect("a clone starts");
        assert_eq!(stdout_of(&clone, "cat /root/state").await, "paused-once\n");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pool_is_kept_of_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let store = SnapshotStore::new(dir.path().join("snapshots"));
    let source = builder(dir.path()).start().await.expect("starts");
    stdout_of(&source, "echo pooled-snapshot > /root/note").await;
    let taken = source.snapshot(&store).await.expect("snapshot");
    drop(source);
    let manager =
        airlock::Sandboxes::with_pool(4, builder(dir.path()).snapshot(&taken.snapshot), 1)
            .expect("a pool of the snapshot");
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    while manager.pool_status().ready.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the pool never filled"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let sandbox = manager.start_pooled().await.expect("start from the pool");
    assert_eq!(
        sandbox.origin(),
        &Origin::Snapshot {
            id: taken.snapshot.id().to_owned()
        }
    );
    assert_eq!(
        stdout_of(&sandbox, "cat /root/note").await,
        "pooled-snapshot\n"
    );
}
