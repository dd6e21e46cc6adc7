//! Sandboxes saved to disk and forked: a running program, its output, its
//! files and the guest clock survive a save and a restore into a new QEMU
//! process; a damaged newest snapshot is refused and the one before it
//! used; a dropped handle leaves the sandbox on disk for a restore by id;
//! a fork's children share the parent's past and nothing after it.

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use airlock::{Error, Event, Execution, Origin, Sandbox, SandboxBuilder, SandboxState};
use airlock_tests::{sh, stdout_of};

/// A builder whose saved sandboxes go to `dir`.
fn builder(dir: &Path) -> SandboxBuilder {
    airlock_tests::builder().saved_dir(dir)
}

/// The same, started as a clone of a template (what `airlock run` does).
fn clone_builder(dir: &Path) -> SandboxBuilder {
    builder(dir)
        .image(airlock_tests::default_image())
        .from_template(true)
}

async fn start(builder: SandboxBuilder) -> Sandbox {
    builder.start().await.expect("sandbox starts")
}

/// The counter program's numbers in `output`, checked to be consecutive.
fn counts(output: &str) -> Vec<u64> {
    let numbers: Vec<u64> = output
        .lines()
        .map(|line| line.parse().expect("a number per line"))
        .collect();
    for pair in numbers.windows(2) {
        assert_eq!(pair[1], pair[0] + 1, "a gap or a repeat in {numbers:?}");
    }
    numbers
}

/// Reads stdout from `execution` until it holds at least `lines` lines.
async fn read_lines(execution: &mut Execution, text: &mut String, lines: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while text.lines().count() < lines {
        assert!(Instant::now() < deadline, "no more output: {text:?}");
        match execution.next_event().await.expect("event") {
            Some(Event::Stdout(chunk)) => text.push_str(&String::from_utf8_lossy(&chunk)),
            Some(Event::Dropped(n)) => panic!("{n} bytes dropped"),
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// Rewrites the QEMU version a snapshot file's header names, with a
/// checksum that matches again (what another QEMU's file looks like).
fn rewrite_qemu_version(path: &Path, version: &str) {
    use sha2::{Digest, Sha256};
    let mut bytes = std::fs::read(path).unwrap();
    let length = u32::from_le_bytes(bytes[16..20].try_into().unwrap()) as usize;
    let mut header: serde_json::Value = serde_json::from_slice(&bytes[20..20 + length]).unwrap();
    header["qemu_version"] = version.into();
    let json = serde_json::to_vec(&header).unwrap();
    let mut head = bytes[..16].to_vec();
    head.extend_from_slice(&u32::try_from(json.len()).unwrap().to_le_bytes());
    head.extend_from_slice(&json);
    let checksum = Sha256::digest(&head);
    head.extend_from_slice(&checksum);
    assert!(head.len() <= 4096);
    head.resize(4096, 0);
    bytes.splice(..4096, head);
    std::fs::write(path, bytes).unwrap();
}

/// The guest's "now", from a file it writes.
async fn guest_now(sandbox: &Sandbox) -> SystemTime {
    sandbox.fs().write("/tmp/now", "x").await.expect("write");
    sandbox.fs().stat("/tmp/now").await.expect("stat").modified
}

const COUNTER: &str = "i=0; while :; do echo $i; i=$((i+1)); sleep 0.1; done";

#[tokio::test]
async fn a_running_program_survives_a_pause_to_disk_without_a_gap() {
    let saved = tempfile::tempdir().unwrap();
    let sandbox = start(clone_builder(saved.path())).await;
    assert!(
        matches!(sandbox.origin(), Origin::Clone { .. }),
        "{:?}",
        sandbox.origin()
    );
    sandbox
        .fs()
        .write("/tmp/before", "written before the save")
        .await
        .unwrap();
    let mut counter = sandbox.exec(sh(COUNTER).tag("counter")).await.unwrap();
    let mut seen = String::new();
    read_lines(&mut counter, &mut seen, 5).await;

    sandbox.pause_to_disk().await.expect("pause to disk");
    assert_eq!(sandbox.state(), SandboxState::OnDisk);
    assert!(
        airlock_tests::processes_mentioning(sandbox.state_dir()).is_empty(),
        "QEMU still runs for a sandbox on disk"
    );
    let dir = saved.path().join(sandbox.id());
    let snapshot = dir.join("snapshot-1");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&snapshot).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{}", snapshot.display());
    let on_disk = sandbox.usage();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        sandbox.usage().running - on_disk.running < Duration::from_millis(100),
        "time on disk counted as running"
    );

    sandbox.resume().await.expect("resume from disk");
    assert_eq!(sandbox.state(), SandboxState::Running);
    assert_eq!(sandbox.last_restore().expect("a restore").generation, 1);
    // The same stream goes on: it re-attaches from its offset.
    let before = seen.lines().count();
    read_lines(&mut counter, &mut seen, before + 10).await;
    let numbers = counts(&seen);
    assert_eq!(numbers[0], 0);
    // A second client attaching from an offset sees the same bytes.
    let mut attached = sandbox.attach_from("counter", 0).await.unwrap();
    let mut replay = String::new();
    read_lines(&mut attached, &mut replay, numbers.len()).await;
    assert!(replay.starts_with(&seen), "{replay:?} vs {seen:?}");

    assert_eq!(
        stdout_of(&sandbox, "cat /tmp/before").await,
        "written before the save"
    );
    let host = SystemTime::now();
    let guest = guest_now(&sandbox).await;
    let skew = guest
        .duration_since(host)
        .or_else(|_| host.duration_since(guest))
        .unwrap();
    assert!(skew < Duration::from_secs(1), "guest clock off by {skew:?}");

    // Killing it removes its saved files.
    sandbox.kill();
    assert!(!dir.exists(), "saved files left after a kill");
}

#[tokio::test]
async fn a_truncated_snapshot_is_refused_and_the_one_before_resumes() {
    let saved = tempfile::tempdir().unwrap();
    let sandbox = start(builder(saved.path())).await;
    sandbox.fs().write("/tmp/one", "1").await.unwrap();
    sandbox.pause_to_disk().await.expect("first save");
    assert_eq!(stdout_of(&sandbox, "cat /tmp/one").await, "1");
    sandbox.fs().write("/tmp/two", "2").await.unwrap();
    sandbox.pause_to_disk().await.expect("second save");
    let newest = saved.path().join(sandbox.id()).join("snapshot-2");
    let length = std::fs::metadata(&newest).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&newest)
        .unwrap()
        .set_len(length / 2)
        .unwrap();

    sandbox
        .resume()
        .await
        .expect("resume from the generation before");
    let restored = sandbox.last_restore().unwrap();
    assert_eq!(restored.generation, 1, "{restored:?}");
    assert_eq!(restored.refused.len(), 1, "{restored:?}");
    assert!(
        restored.refused[0].contains("its header says"),
        "{restored:?}"
    );
    // The state of the first save: /tmp/one, not /tmp/two.
    assert_eq!(
        stdout_of(&sandbox, "cat /tmp/one; test -e /tmp/two || echo gone").await,
        "1gone\n"
    );

    // A snapshot another QEMU wrote (a header that checks out, naming
    // another version) is refused too, and the generation before it used.
    sandbox.fs().write("/tmp/three", "3").await.unwrap();
    sandbox.pause_to_disk().await.expect("save by another QEMU");
    let record = airlock::saved::SavedStore::new(saved.path())
        .record(sandbox.id())
        .unwrap();
    let newest = *record.generations.last().unwrap();
    let path = saved
        .path()
        .join(sandbox.id())
        .join(format!("snapshot-{newest}"));
    rewrite_qemu_version(&path, "0.9.1");
    sandbox
        .resume()
        .await
        .expect("resume from the generation before");
    let restored = sandbox.last_restore().unwrap();
    assert!(
        restored.refused.len() == 1 && restored.refused[0].contains("written by QEMU 0.9.1"),
        "{restored:?}"
    );
    assert_eq!(
        stdout_of(&sandbox, "test -e /tmp/three || echo gone").await,
        "gone\n"
    );

    // A file that is no snapshot at all is refused as well; with no good
    // generation left the sandbox stays on disk.
    sandbox.pause_to_disk().await.expect("third save");
    let record = airlock::saved::SavedStore::new(saved.path())
        .record(sandbox.id())
        .unwrap();
    // Refused generations were dropped: the first one and the new one.
    assert_eq!(record.generations, [1, 2]);
    for generation in record.generations {
        let path = saved
            .path()
            .join(sandbox.id())
            .join(format!("snapshot-{generation}"));
        std::fs::write(path, b"QEVM\0\0\0\x03 not ours").unwrap();
    }
    let error = sandbox.resume().await.unwrap_err();
    assert!(matches!(error, Error::Saved(_)), "{error}");
    let text = airlock::error_chain(&error);
    assert!(text.contains("not an Airlock snapshot"), "{text}");
    assert_eq!(sandbox.state(), SandboxState::OnDisk);
    // A call, which would restore the sandbox, fails with the same cause.
    let refused = sandbox.exec(sh("true")).await.unwrap_err();
    assert!(matches!(refused, Error::ResumeForCall { .. }), "{refused}");
    let text = airlock::error_chain(&refused);
    assert!(text.contains("not an Airlock snapshot"), "{text}");
    assert_eq!(sandbox.state(), SandboxState::OnDisk);
}

#[tokio::test]
async fn a_dropped_handle_leaves_the_sandbox_on_disk_for_a_restore_by_id() {
    let saved = tempfile::tempdir().unwrap();
    let sandbox = start(builder(saved.path())).await;
    sandbox.fs().write("/tmp/kept", "kept").await.unwrap();
    sandbox.exec(sh(COUNTER).tag("counter")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let id = sandbox.id().to_owned();
    sandbox.pause_to_disk().await.unwrap();
    let wall = sandbox.usage().wall;
    drop(sandbox);
    let listed = airlock::saved::SavedStore::new(saved.path())
        .list()
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, id);

    let restored = builder(saved.path()).restore(&id).await.expect("restore");
    assert_eq!(restored.id(), id);
    assert_eq!(restored.origin(), &Origin::Restored { generation: 1 });
    assert!(restored.usage().wall >= wall, "usage did not carry over");
    assert_eq!(stdout_of(&restored, "cat /tmp/kept").await, "kept");
    // The counter still runs: its output grows.
    let mut counter = restored.attach("counter").await.unwrap();
    let mut seen = String::new();
    read_lines(&mut counter, &mut seen, 8).await;
    counts(&seen);
    assert_eq!(stdout_of(&restored, "hostname").await.trim(), id);

    // The same id cannot be restored twice at once.
    let twice = builder(saved.path()).restore(&id).await.unwrap_err();
    assert!(matches!(twice, Error::StateDir { .. }), "{twice}");
    drop(restored);
    let unknown = builder(saved.path())
        .restore("sandbox-nope")
        .await
        .unwrap_err();
    assert!(
        unknown.to_string().contains("no saved sandbox"),
        "{unknown}"
    );
}

#[tokio::test]
async fn fork_into_three_shares_the_past_and_nothing_after() {
    let saved = tempfile::tempdir().unwrap();
    let parent = start(clone_builder(saved.path())).await;
    parent
        .fs()
        .write("/tmp/parent", "from the parent")
        .await
        .unwrap();
    let mut counter = parent.exec(sh(COUNTER).tag("counter")).await.unwrap();
    let mut seen = String::new();
    read_lines(&mut counter, &mut seen, 3).await;
    let children = parent.fork(3).await.expect("fork");
    assert_eq!(children.len(), 3);
    // The parent runs on.
    assert_eq!(stdout_of(&parent, "echo still").await, "still\n");

    let mut hostnames = Vec::new();
    let mut randoms = Vec::new();
    for (i, child) in children.iter().enumerate() {
        assert_eq!(
            child.origin(),
            &Origin::Fork {
                parent: parent.id().to_owned()
            }
        );
        assert_eq!(stdout_of(child, "cat /tmp/parent").await, "from the parent");
        child.fs().write("/tmp/mine", i.to_string()).await.unwrap();
        hostnames.push(stdout_of(child, "hostname").await);
        randoms.push(stdout_of(child, "cat /proc/sys/kernel/random/uuid").await);
    }
    for (i, child) in children.iter().enumerate() {
        assert_eq!(stdout_of(child, "cat /tmp/mine").await, i.to_string());
        // The parent's running program runs on in each child, its output
        // from the start replayed.
        let mut copy = child.attach("counter").await.unwrap();
        let mut output = String::new();
        read_lines(&mut copy, &mut output, seen.lines().count() + 5).await;
        assert!(output.starts_with(&seen), "{output:?} vs {seen:?}");
        counts(&output);
    }
    // And in the parent, without a gap.
    let before = seen.lines().count();
    read_lines(&mut counter, &mut seen, before + 5).await;
    counts(&seen);
    assert_eq!(
        stdout_of(&parent, "ls /tmp/mine 2>/dev/null || echo none").await,
        "none\n"
    );
    hostnames.push(stdout_of(&parent, "hostname").await);
    hostnames.sort();
    hostnames.dedup();
    assert_eq!(hostnames.len(), 4, "{hostnames:?}");
    randoms.sort();
    randoms.dedup();
    assert_eq!(randoms.len(), 3, "{randoms:?}");
    // The fork's snapshot file is gone.
    let left: Vec<_> = std::fs::read_dir(saved.path())
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name())
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test]
async fn a_sandbox_with_a_workspace_is_not_forked() {
    let saved = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let sandbox = start(
        builder(saved.path())
            .image(airlock_tests::default_image())
            .workspace(workspace.path().join("ws.img")),
    )
    .await;
    let error = sandbox.fork(2).await.unwrap_err();
    assert!(matches!(error, Error::CannotSave { .. }), "{error}");
    assert_eq!(stdout_of(&sandbox, "echo fine").await, "fine\n");
}

#[tokio::test]
async fn an_idle_sandbox_can_be_saved_to_disk_and_the_next_call_restores_it() {
    let saved = tempfile::tempdir().unwrap();
    let sandbox = start(
        builder(saved.path())
            .idle_timeout(Duration::from_secs(1), airlock::IdlePolicy::PauseToDisk),
    )
    .await;
    sandbox.fs().write("/tmp/idle", "still here").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while sandbox.state() != SandboxState::OnDisk {
        assert!(Instant::now() < deadline, "not saved after going idle");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(airlock_tests::processes_mentioning(sandbox.state_dir()).is_empty());
    // The default policy restores on the next call.
    assert_eq!(stdout_of(&sandbox, "cat /tmp/idle").await, "still here");
    assert_eq!(sandbox.state(), SandboxState::Running);
}

/// Saves and restores, two sandboxes at a time, each cycle checking that
/// a counter file kept its value and that nothing is left behind.
#[tokio::test]
async fn soak_pause_to_disk_and_resume_two_at_a_time() {
    const CYCLES: usize = 25;
    let saved = tempfile::tempdir().unwrap();
    let run = |n: usize| {
        let saved = saved.path().to_owned();
        async move {
            let sandbox = start(clone_builder(&saved)).await;
            for cycle in 0..CYCLES {
                sandbox
                    .fs()
                    .write("/tmp/cycle", cycle.to_string())
                    .await
                    .unwrap();
                sandbox.pause_to_disk().await.unwrap_or_else(|e| {
                    panic!("sandbox {n}, cycle {cycle}: {}", airlock::error_chain(&e))
                });
                assert!(airlock_tests::processes_mentioning(sandbox.state_dir()).is_empty());
                let got = sandbox
                    .exec(sh("cat /tmp/cycle"))
                    .await
                    .unwrap_or_else(|e| {
                        panic!("sandbox {n}, cycle {cycle}: {}", airlock::error_chain(&e))
                    })
                    .output()
                    .await
                    .unwrap();
                assert_eq!(String::from_utf8_lossy(&got.stdout), cycle.to_string());
                let record = airlock::saved::SavedStore::new(&saved)
                    .record(sandbox.id())
                    .unwrap();
                assert!(record.generations.len() <= 2, "{record:?}");
            }
            let dir = sandbox.state_dir().to_owned();
            sandbox.kill();
            drop(sandbox);
            assert!(airlock_tests::processes_mentioning(&dir).is_empty());
        }
    };
    futures::future::join(run(0), run(1)).await;
    let left: Vec<_> = std::fs::read_dir(saved.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "files left: {left:?}");
}

#[tokio::test]
async fn a_call_open_across_a_save_fails_with_the_reason_and_the_next_call_restores() {
    let saved = tempfile::tempdir().unwrap();
    let sandbox = start(builder(saved.path()).memory_mib(512)).await;
    let host = tempfile::tempdir().unwrap();
    let big = host.path().join("big");
    let data: Vec<u8> = (0..64u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect();
    std::fs::write(&big, &data).unwrap();
    let fs = sandbox.fs();
    let upload = fs.write_file("/tmp/big", &big);
    let save = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        sandbox.pause_to_disk().await
    };
    let (uploaded, saved_now) = tokio::join!(upload, save);
    saved_now.expect("save");
    let error = uploaded.expect_err("the upload outlived the VM process it went to");
    let text = airlock::error_chain(&error);
    assert!(
        text.contains("saved to disk while the call was open"),
        "{text}"
    );
    // Nothing half-written is left, and the next call restores the sandbox.
    assert_eq!(
        stdout_of(&sandbox, "test -e /tmp/big && echo there || echo absent").await,
        "absent\n"
    );
    assert_eq!(sandbox.state(), SandboxState::Running);
}

#[tokio::test]
async fn a_workspace_sandbox_is_saved_and_restored_with_its_files() {
    let saved = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let disk = workspace.path().join("ws.img");
    let builder = || {
        builder(saved.path())
            .image(airlock_tests::default_image())
            .workspace(&disk)
    };
    let sandbox = start(builder()).await;
    sandbox
        .fs()
        .write("/root/kept", "in the workspace")
        .await
        .unwrap();
    sandbox
        .fs()
        .write("/tmp/volatile", "in memory")
        .await
        .unwrap();
    let id = sandbox.id().to_owned();
    sandbox.pause_to_disk().await.expect("save");
    // On disk, it still holds its workspace.
    let second = builder().start().await.unwrap_err();
    assert!(second.to_string().contains("workspace"), "{second}");
    drop(sandbox);

    let restored = builder().restore(&id).await.expect("restore");
    assert_eq!(
        stdout_of(&restored, "cat /root/kept; echo; cat /tmp/volatile").await,
        "in the workspace\nin memory"
    );
    restored
        .fs()
        .write("/root/after", "written after")
        .await
        .unwrap();
    restored.shutdown(Duration::from_secs(10)).await.unwrap();
    // A cold boot on the same workspace sees both.
    let next = start(builder()).await;
    assert_eq!(
        stdout_of(&next, "cat /root/kept /root/after").await,
        "in the workspacewritten after"
    );
}

/// Input for a program's stdin that never ends: 64 KiB chunks of `a`.
fn endless_a() -> impl futures::Stream<Item = bytes::Bytes> + Send + 'static {
    futures::stream::repeat(bytes::Bytes::from(vec![b'a'; 64 << 10]))
}

#[tokio::test]
async fn stdin_streaming_across_saves_and_a_fork_gets_no_foreign_bytes() {
    // Each save catches the host in the middle of sending stdin. The
    // program counts every byte that is not an `a`: one that a restore's
    // first connection completed a half-read frame with would show here.
    let saved = tempfile::tempdir().unwrap();
    let sandbox = start(clone_builder(saved.path())).await;
    let command = sh("tr -d a | wc -c").stdin(airlock::Stdin::Piped);
    let execution = sandbox.exec(command).await.unwrap();
    let handle = execution.handle();
    for round in 0..6u64 {
        // Restored first, so that the save cuts a stream that flows.
        sandbox.resume().await.expect("resume");
        let feeding = handle.stream_stdin(endless_a());
        let save = async {
            tokio::time::sleep(Duration::from_millis(150 + 40 * round)).await;
            sandbox.pause_to_disk().await
        };
        let (fed, saved_now) = tokio::join!(feeding, save);
        saved_now.expect("save");
        let error = fed.expect_err("the stream outlived the VM process it went to");
        assert!(matches!(error, Error::SavedDuringCall { .. }), "{error}");
    }
    // A fork while stdin streams: the parent's stream ends with its own
    // reason, and neither the parent's program nor the child's copy of it
    // gets a byte that was not sent.
    sandbox.resume().await.expect("resume");
    let feeding = handle.stream_stdin(endless_a());
    let fork = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        sandbox.fork(1).await
    };
    let (fed, children) = tokio::join!(feeding, fork);
    let children = children.expect("fork");
    let error = fed.expect_err("the stream outlived the fork's snapshot");
    assert!(matches!(error, Error::ForkedDuringCall { .. }), "{error}");
    let child = &children[0];
    let copy = child
        .attach(execution.pid())
        .await
        .expect("the child's copy");
    copy.close_stdin().await.unwrap();
    let child_output = copy.output().await.unwrap();
    assert_eq!(String::from_utf8_lossy(&child_output.stdout), "0\n");

    handle.close_stdin().await.unwrap();
    let output = execution.output().await.unwrap();
    assert_eq!(String::from_utf8_lossy(&output.stdout), "0\n");
    assert_eq!(output.status.code(), Some(0));
}
