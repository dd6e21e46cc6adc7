//! Persistent workspaces: what one run writes, the next run on the same
//! workspace reads; `/tmp` stays per-run; two sandboxes cannot share one.

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::process::Command as HostCommand;
use std::time::Duration;

use airlock::{Command, Error, WorkspaceError};

fn airlock_run(workspace: &Path, script: &str) -> (String, String, Option<i32>) {
    let out = HostCommand::new(airlock_tests::airlock_bin())
        .args([
            "run",
            "--memory",
            "256",
            "--workspace-size",
            "256M",
            "--workspace",
        ])
        .arg(workspace)
        .args(["--", "sh", "-c", script])
        .output()
        .expect("run airlock");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.code(),
    )
}

#[test]
fn a_file_written_in_one_run_is_there_in_the_next() {
    airlock_tests::default_image();
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws.img");

    let (stdout, stderr, code) = airlock_run(
        &workspace,
        "echo kept > /root/note; mkdir -p /home/dev && echo mine > /home/dev/file; \
         echo scratch > /tmp/scratch; python3 -c 'import site; print(site.USER_SITE)'",
    );
    assert_eq!(code, Some(0), "stderr: {stderr}");
    assert!(stdout.contains("/root/.local/lib/python3.11"), "{stdout}");
    assert!(workspace.is_file(), "the workspace was created");

    let (stdout, stderr, code) = airlock_run(
        &workspace,
        "cat /root/note /home/dev/file; test -e /tmp/scratch && echo tmp-survived || echo tmp-fresh",
    );
    assert_eq!(code, Some(0), "stderr: {stderr}");
    assert_eq!(stdout, "kept\nmine\ntmp-fresh\n");
}

#[tokio::test]
async fn a_workspace_holds_one_sandbox_at_a_time() {
    let image = airlock_tests::default_image();
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws.img");
    let first = airlock_tests::builder()
        .image(&image)
        .workspace(&workspace)
        .workspace_size(64 << 20)
        .start()
        .await
        .expect("first sandbox");

    let error = airlock_tests::builder()
        .image(&image)
        .workspace(&workspace)
        .start()
        .await
        .expect_err("a second sandbox on the same workspace");
    assert!(
        matches!(error, Error::Workspace(WorkspaceError::Busy(_))),
        "{error}"
    );
    assert!(error.to_string().contains("ws.img"), "{error}");

    let out = first
        .exec(&Command::new("sh").arg("-c").arg("echo one > /root/owner"))
        .await
        .expect("start")
        .output()
        .await
        .expect("output");
    assert!(out.status.success());
    first
        .shutdown(Duration::from_secs(20))
        .await
        .expect("shutdown");

    // Once the first is gone the workspace is free, with its content.
    let second = airlock_tests::builder()
        .image(&image)
        .workspace(&workspace)
        .start()
        .await
        .expect("second sandbox after the first");
    let out = second
        .exec(&Command::new("cat").arg("/root/owner"))
        .await
        .expect("start")
        .output()
        .await
        .expect("output");
    assert_eq!(out.stdout, b"one\n");
}
