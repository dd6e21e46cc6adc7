//! StartRequest.user: programs run as the named user, resolved in the
//! guest's /etc/passwd and /etc/group.

#![allow(clippy::unwrap_used)]

mod common;

use airlock_proto::v1::StartRequest;
use common::{request, Agent};
use tonic::Code;

fn as_user(argv: &[&str], user: &str) -> StartRequest {
    StartRequest {
        user: user.into(),
        ..request(argv)
    }
}

#[tokio::test]
async fn programs_run_as_the_requested_user() {
    let agent = Agent::start().await;
    let script = "printf '%s %s %s' \"$(id -u)\" \"$(id -g)\" \"$HOME\"";
    if nix::unistd::geteuid().is_root() {
        let out = agent
            .run(as_user(&["sh", "-c", script], "65534:65534"))
            .await
            .unwrap();
        assert_eq!(
            out.stdout_text().split(' ').take(2).collect::<Vec<_>>(),
            ["65534", "65534"]
        );

        let out = agent
            .run(as_user(&["sh", "-c", script], "0"))
            .await
            .unwrap();
        assert_eq!(out.stdout_text(), "0 0 /root");

        // A user that may not enter the working directory cannot start there.
        let dir = tempfile::tempdir().unwrap();
        let private = dir.path().join("private");
        std::fs::create_dir(&private).unwrap();
        std::os::unix::fs::chown(&private, Some(0), Some(0)).unwrap();
        std::fs::set_permissions(
            &private,
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .unwrap();
        let mut req = as_user(&["true"], "65534");
        req.cwd = private.display().to_string();
        let err = agent.run(req).await.unwrap_err();
        assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    } else {
        // Unprivileged (a developer's machine): itself is fine, others not.
        let me = nix::unistd::geteuid().to_string();
        let out = agent.run(as_user(&["id", "-u"], &me)).await.unwrap();
        assert_eq!(out.stdout_text().trim(), me);
        let err = agent.run(as_user(&["true"], "0")).await.unwrap_err();
        assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    }
}

#[tokio::test]
async fn unknown_or_malformed_users_are_refused_by_name() {
    let agent = Agent::start().await;
    let err = agent
        .run(as_user(&["true"], "airlock-no-such-user"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    assert!(
        err.message().contains("airlock-no-such-user"),
        "{}",
        err.message()
    );

    let err = agent
        .run(as_user(&["true"], "root:airlock-no-such-group"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");

    let err = agent.run(as_user(&["true"], "a:b:c")).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
}

/// A program of another user may reopen its own output pipes (the
/// interpreter driver reads its stdout back through `/proc/self/fd/1`):
/// the pipes are that user's.
#[tokio::test]
async fn another_users_program_may_reopen_its_output() {
    if !nix::unistd::geteuid().is_root() {
        return; // Only root starts programs as another user.
    }
    let agent = Agent::start().await;
    let script = "exec 3</proc/self/fd/1 4</proc/self/fd/2 && echo reopened";
    let out = agent
        .run(as_user(&["sh", "-c", script], "65534:65534"))
        .await
        .unwrap();
    assert_eq!(out.stdout_text(), "reopened\n", "{:?}", out.stderr_text());
}
