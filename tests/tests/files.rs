//! The filesystem API in one real VM: a 256 MiB file up and down byte-exact
//! with bounded memory on both sides (upload and download MB/s printed),
//! cut uploads that leave nothing, a directory round trip with modes and
//! symlinks, an escaping tar refused, Watch seeing a file a program creates,
//! writes as a user, and the error codes. Then `airlock run
//! --upload/--download` in a second VM. Each check is a named test
//! (`cargo test --test files -- directory_round_trip` runs one).

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::pin::Pin;
use std::process::ExitCode;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use airlock::fs::{FileKind, WatchKind, WriteOptions};
use airlock::{Code, Sandbox};
use airlock_tests::shared_vm::{Order, Suite};
use airlock_tests::{status_kib, stdout_of};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, ReadBuf};

const BIG: usize = 256 * 1024 * 1024;
const MIB: f64 = 1024.0 * 1024.0;

fn main() -> ExitCode {
    // One at a time: big_file_round_trip fills most of the guest's /tmp and
    // measures the agent's and this process's peak memory, which other
    // transfers at the same time would raise.
    Suite::new(boot, Order::Sequential)
        .checks(airlock_tests::checks![
            big_file_round_trip,
            cut_uploads_leave_nothing,
            directory_round_trip,
            escaping_tar_is_refused,
            watch_sees_a_program_create_a_file,
            errors_and_users,
        ])
        .test(
            "run_uploads_before_and_downloads_after_the_command",
            run_uploads_before_and_downloads_after_the_command,
        )
        .run()
}

/// The shared VM: /tmp is a tmpfs of a quarter of guest memory, so 1536 MiB
/// gives 384 MiB, which holds the 256 MiB file.
async fn boot() -> Sandbox {
    let sandbox = airlock_tests::builder()
        .memory_mib(1536)
        .start()
        .await
        .expect("sandbox did not start");
    let health = sandbox.health().await.expect("health");
    assert!(health.protocol_revision >= 3, "rebuild the initramfs");
    sandbox
}

async fn big_file_round_trip(sandbox: &Sandbox) {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("big");
    // Pseudo-random bytes (xorshift), hashed as they are written.
    let mut hasher = Sha256::new();
    {
        use std::io::Write;
        let mut file = std::io::BufWriter::new(std::fs::File::create(&source).unwrap());
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut block = vec![0u8; 1 << 20];
        for _ in 0..BIG / block.len() {
            for word in block.chunks_exact_mut(8) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                word.copy_from_slice(&state.to_le_bytes());
            }
            hasher.update(&block);
            file.write_all(&block).unwrap();
        }
    }
    let host_sum = format!("{:x}", hasher.finalize());
    let fs = sandbox.fs();

    let began = Instant::now();
    let written = fs.write_file("/tmp/big", &source).await.expect("upload");
    let up = began.elapsed();
    assert_eq!(written, BIG as u64);
    eprintln!(
        "files: upload 256 MiB in {up:.2?} = {:.1} MB/s",
        BIG as f64 / MIB / up.as_secs_f64()
    );
    let guest_sum = stdout_of(sandbox, "sha256sum /tmp/big").await;
    assert_eq!(guest_sum.split_whitespace().next(), Some(host_sum.as_str()));

    let back = dir.path().join("back");
    let began = Instant::now();
    let read = fs.read_to_file("/tmp/big", &back).await.expect("download");
    let down = began.elapsed();
    assert_eq!(read, BIG as u64);
    eprintln!(
        "files: download 256 MiB in {down:.2?} = {:.1} MB/s",
        BIG as f64 / MIB / down.as_secs_f64()
    );
    let mut hasher = Sha256::new();
    std::io::copy(&mut std::fs::File::open(&back).unwrap(), &mut hasher).unwrap();
    assert_eq!(format!("{:x}", hasher.finalize()), host_sum);

    // Bounded memory: neither side ever held a large part of the file.
    let agent = String::from_utf8(fs.read_to_vec("/proc/1/status").await.unwrap()).unwrap();
    let (agent_rss, agent_peak) = (status_kib(&agent, "VmRSS"), status_kib(&agent, "VmHWM"));
    let host = std::fs::read_to_string("/proc/self/status").unwrap();
    let host_peak = status_kib(&host, "VmHWM");
    eprintln!("files: agent VmRSS {agent_rss} KiB, peak {agent_peak} KiB; test process peak {host_peak} KiB");
    assert!(agent_peak < 64 * 1024, "agent peak RSS {agent_peak} KiB");
    assert!(host_peak < 128 * 1024, "host peak RSS {host_peak} KiB");
    fs.remove("/tmp/big", false).await.expect("remove");
}

/// Yields `limit` bytes, then fails or (with `hang`) never finishes.
struct Faulty {
    left: usize,
    hang: bool,
}

impl AsyncRead for Faulty {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.left == 0 {
            return if self.hang {
                Poll::Pending
            } else {
                Poll::Ready(Err(std::io::Error::other("disk on fire")))
            };
        }
        let n = self.left.min(buf.remaining());
        buf.put_slice(&vec![b'x'; n]);
        self.left -= n;
        Poll::Ready(Ok(()))
    }
}

async fn cut_uploads_leave_nothing(sandbox: &Sandbox) {
    let fs = sandbox.fs();
    fs.mkdir("/tmp/cut", true).await.unwrap();
    fs.write("/tmp/cut/kept", "old").await.unwrap();

    // The source fails half way: an error, and nothing at the destination.
    let err = fs
        .write_with(
            "/tmp/cut/new",
            Faulty {
                left: 4 << 20,
                hang: false,
            },
            WriteOptions::new(),
        )
        .await
        .unwrap_err();
    assert!(airlock::error_chain(&err).contains("disk on fire"), "{err}");

    // The upload is dropped mid-stream (the caller gives up).
    let fs2 = fs.clone();
    let dropped = tokio::time::timeout(
        Duration::from_secs(3),
        fs2.write_with(
            "/tmp/cut/kept",
            Faulty {
                left: 4 << 20,
                hang: true,
            },
            WriteOptions::new(),
        ),
    )
    .await;
    assert!(dropped.is_err(), "the hanging upload should not finish");

    // Only the old file is left, unchanged, once the agent has noticed.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let names: Vec<_> = fs
            .list("/tmp/cut", 1)
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.path)
            .collect();
        if names == [Path::new("/tmp/cut/kept")] {
            break;
        }
        assert!(Instant::now() < deadline, "left behind: {names:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(fs.read_to_vec("/tmp/cut/kept").await.unwrap(), b"old");
}

async fn directory_round_trip(sandbox: &Sandbox) {
    let fs = sandbox.fs();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("bin")).unwrap();
    std::fs::create_dir_all(src.join("empty")).unwrap();
    std::fs::write(src.join("bin/tool"), "#!/bin/sh\necho tool\n").unwrap();
    std::fs::set_permissions(src.join("bin/tool"), std::fs::Permissions::from_mode(0o750)).unwrap();
    std::fs::write(src.join("secret"), "s3cret").unwrap();
    std::fs::set_permissions(src.join("secret"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::symlink("bin/tool", src.join("tool")).unwrap();

    let began = Instant::now();
    let entries = fs.upload_dir(&src, "/tmp/tree").await.expect("upload_dir");
    eprintln!(
        "files: upload_dir of {entries} entries in {:.2?}",
        began.elapsed()
    );
    assert_eq!(stdout_of(sandbox, "/tmp/tree/tool").await, "tool\n");
    let tool = fs.stat("/tmp/tree/bin/tool").await.unwrap();
    assert_eq!((tool.kind, tool.mode), (FileKind::File, 0o750));
    let link = fs.stat("/tmp/tree/tool").await.unwrap();
    assert_eq!(link.kind, FileKind::Symlink);
    assert_eq!(link.symlink_target.as_deref(), Some(Path::new("bin/tool")));

    let back = dir.path().join("back");
    fs.download_dir("/tmp/tree", &back)
        .await
        .expect("download_dir");
    for (name, mode) in [("bin/tool", 0o750), ("secret", 0o600)] {
        assert_eq!(
            std::fs::read(back.join(name)).unwrap(),
            std::fs::read(src.join(name)).unwrap()
        );
        let got = std::fs::metadata(back.join(name))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(got & 0o7777, mode, "{name}");
    }
    assert!(back.join("empty").is_dir());
    assert_eq!(
        std::fs::read_link(back.join("tool")).unwrap(),
        Path::new("bin/tool")
    );
}

async fn escaping_tar_is_refused(sandbox: &Sandbox) {
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(4);
    header.set_mode(0o644);
    // tar refuses to write `..` through set_path; an attacker would not.
    let name = b"../../etc/evil";
    header.as_old_mut().name[..name.len()].copy_from_slice(name);
    header.set_cksum();
    builder.append(&header, &b"evil"[..]).unwrap();
    let archive = builder.into_inner().unwrap();
    let err = sandbox
        .fs()
        .upload_tar(std::io::Cursor::new(archive), "/tmp/target")
        .await
        .unwrap_err();
    assert_eq!(err.agent_code(), Some(Code::InvalidArgument), "{err}");
    assert!(err.to_string().contains("../../etc/evil"), "{err}");
    let exists = sandbox.fs().stat("/etc/evil").await.unwrap_err();
    assert_eq!(exists.agent_code(), Some(Code::NotFound));
}

async fn watch_sees_a_program_create_a_file(sandbox: &Sandbox) {
    let fs = sandbox.fs();
    fs.mkdir("/tmp/watched/deep", true).await.unwrap();
    let mut watch = fs.watch("/tmp/watched", true).await.expect("watch");
    stdout_of(sandbox, "echo hi > /tmp/watched/deep/made-by-sh").await;
    let seen = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(event) = watch.next().await {
            let event = event.expect("event");
            if event.kind == WatchKind::Create
                && event.path == Path::new("/tmp/watched/deep/made-by-sh")
            {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(seen, Ok(true));
}

async fn errors_and_users(sandbox: &Sandbox) {
    let fs = sandbox.fs();
    // A directory of root's with something in it.
    fs.mkdir("/tmp/roots", true).await.unwrap();
    fs.write("/tmp/roots/kept", "x").await.unwrap();
    let code = |r: airlock::Result<()>| r.unwrap_err().agent_code();
    let err = fs.stat("/tmp/nope").await.unwrap_err();
    assert_eq!(err.agent_code(), Some(Code::NotFound));
    assert!(err.to_string().contains("/tmp/nope"), "{err}");
    assert_eq!(
        fs.read_to_vec("/tmp").await.unwrap_err().agent_code(),
        Some(Code::FailedPrecondition)
    );
    assert_eq!(
        code(fs.mkdir("/tmp/roots", false).await),
        Some(Code::AlreadyExists)
    );
    assert_eq!(
        code(fs.remove("/tmp/roots", false).await),
        Some(Code::FailedPrecondition)
    );
    assert_eq!(
        fs.write("relative", "x").await.unwrap_err().agent_code(),
        Some(Code::InvalidArgument)
    );

    // As a user: refused where it may not write, owner of what it writes.
    fs.mkdir("/tmp/shared", false).await.unwrap();
    fs.chmod("/tmp/shared", 0o777).await.unwrap();
    let as_user = || WriteOptions::new().user("1234");
    let err = fs
        .write_with(
            "/tmp/roots/mine",
            std::io::Cursor::new(b"x".to_vec()),
            as_user(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.agent_code(), Some(Code::PermissionDenied), "{err}");
    fs.write_with(
        "/tmp/shared/mine",
        std::io::Cursor::new(b"x".to_vec()),
        as_user(),
    )
    .await
    .unwrap();
    let mine = fs.stat("/tmp/shared/mine").await.unwrap();
    assert_eq!((mine.uid, mine.gid), (1234, 1234));

    fs.remove("/tmp/roots", true).await.unwrap();
    assert_eq!(
        fs.stat("/tmp/roots").await.unwrap_err().agent_code(),
        Some(Code::NotFound)
    );
}

fn run_uploads_before_and_downloads_after_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input");
    std::fs::create_dir_all(input.join("sub")).unwrap();
    std::fs::write(input.join("sub/data"), "payload").unwrap();
    let single = dir.path().join("single");
    std::fs::write(&single, "one file").unwrap();
    let output = dir.path().join("output");
    let copied = dir.path().join("copied.txt");
    let out = std::process::Command::new(airlock_tests::airlock_bin())
        .arg("run")
        .args(["--memory", "256", "--no-image"])
        .arg("--upload")
        .arg(format!("{}:/tmp/in", input.display()))
        .arg("--upload")
        .arg(format!("{}:/tmp/single", single.display()))
        .arg("--download")
        .arg(format!("/tmp/out:{}", output.display()))
        .arg("--download")
        .arg(format!("/tmp/single:{}", copied.display()))
        .args([
            "--",
            "sh",
            "-c",
            "mkdir /tmp/out && tr a-z A-Z < /tmp/in/sub/data > /tmp/out/upper",
        ])
        .output()
        .expect("run airlock");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    assert_eq!(
        std::fs::read_to_string(output.join("upper")).unwrap(),
        "PAYLOAD"
    );
    assert_eq!(std::fs::read_to_string(&copied).unwrap(), "one file");

    // A missing upload source fails before the command runs.
    let out = std::process::Command::new(airlock_tests::airlock_bin())
        .args(["run", "--memory", "256", "--no-image", "--upload"])
        .arg(format!("{}:/tmp/x", dir.path().join("missing").display()))
        .args(["--", "true"])
        .output()
        .expect("run airlock");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "stderr: {stderr}");
    assert!(stderr.contains("missing"), "stderr: {stderr}");
}
