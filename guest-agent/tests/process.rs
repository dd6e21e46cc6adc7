//! Process.Start: exit statuses, environment, working directory and errors.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashSet;
use std::os::unix::fs::PermissionsExt;

use airlock_proto::v1::exited::Status as ExitStatus;
use common::{request, Agent, AGENT_ONLY_VAR};
use tonic::Code;

#[tokio::test]
async fn output_streams_and_exit_code_arrive() {
    let agent = Agent::start().await;
    let out = agent
        .run_argv(&["sh", "-c", "echo out; echo err >&2; exit 3"])
        .await
        .unwrap();
    assert_eq!(out.stdout_text(), "out\n");
    assert_eq!(out.stderr_text(), "err\n");
    assert_eq!(out.exit, ExitStatus::Code(3));
    assert!(out.pid > 1);
}

#[tokio::test]
async fn death_by_signal_is_reported_as_the_signal() {
    let agent = Agent::start().await;
    let out = agent.run_argv(&["sh", "-c", "kill -9 $$"]).await.unwrap();
    assert_eq!(out.exit, ExitStatus::Signal(9));
}

#[tokio::test]
async fn env_is_defaults_plus_request_and_nothing_of_the_agent() {
    let agent = Agent::start().await;
    let mut req = request(&[
        "sh",
        "-c",
        &format!(
            "printf '%s|%s|%s|%s' \"$FOO\" \"$HOME\" \"$PATH\" \"${{{AGENT_ONLY_VAR}:-unset}}\""
        ),
    ]);
    req.env.insert("FOO".into(), "bar baz".into());
    let out = agent.run(req).await.unwrap();
    assert_eq!(
        out.stdout_text(),
        "bar baz|/root|/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin|unset"
    );

    let mut req = request(&["sh", "-c", "printf %s \"$HOME\""]);
    req.env.insert("HOME".into(), "/home/user".into());
    assert_eq!(agent.run(req).await.unwrap().stdout_text(), "/home/user");
}

#[tokio::test]
async fn cwd_is_applied_and_defaults_to_the_agents_home() {
    let agent = Agent::start().await;
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().canonicalize().unwrap();
    let mut req = request(&["pwd"]);
    req.cwd = cwd.display().to_string();
    let out = agent.run(req).await.unwrap();
    assert_eq!(out.stdout_text(), format!("{}\n", cwd.display()));

    // Without a cwd or a user: the agent's home (root's, /root) when this
    // host lets the agent enter it, else /.
    let home = if nix::unistd::access("/root", nix::unistd::AccessFlags::X_OK).is_ok() {
        "/root"
    } else {
        "/"
    };
    let out = agent.run_argv(&["pwd"]).await.unwrap();
    assert_eq!(out.stdout_text(), format!("{home}\n"));
}

#[tokio::test]
async fn each_program_is_its_own_process_group() {
    let agent = Agent::start().await;
    let out = agent
        .run_argv(&[
            "sh",
            "-c",
            "ps -o pgid= -p $$ 2>/dev/null || cut -d' ' -f5 /proc/$$/stat",
        ])
        .await
        .unwrap();
    assert_eq!(out.stdout_text().trim(), out.pid.to_string());
}

#[tokio::test]
async fn missing_program_is_not_found_by_name() {
    let agent = Agent::start().await;
    let err = agent
        .run_argv(&["airlock-no-such-program", "x"])
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    assert_eq!(err.message(), "program not found: airlock-no-such-program");

    let err = agent.run_argv(&["/nonexistent/prog"]).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
}

#[tokio::test]
async fn missing_cwd_is_not_found_naming_the_path() {
    let agent = Agent::start().await;
    let mut req = request(&["true"]);
    req.cwd = "/nonexistent/airlock-dir".into();
    let err = agent.run(req).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    assert_eq!(
        err.message(),
        "working directory not found: /nonexistent/airlock-dir"
    );

    let mut req = request(&["true"]);
    req.cwd = "relative/dir".into();
    let err = agent.run(req).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("relative/dir"));
}

#[tokio::test]
async fn non_executable_file_is_permission_denied() {
    let agent = Agent::start().await;
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.sh");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = agent
        .run_argv(&[script.to_str().unwrap()])
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    assert!(err.message().contains("script.sh"), "{}", err.message());
}

#[tokio::test]
async fn malformed_requests_are_invalid_arguments() {
    let agent = Agent::start().await;
    let err = agent.run_argv(&[]).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("argv is empty"));

    let err = agent.run_argv(&["echo", "a\0b"]).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("NUL"));

    let mut req = request(&["true"]);
    req.env.insert("A=B".into(), "c".into());
    let err = agent.run(req).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
}

#[tokio::test]
async fn agent_keeps_serving_after_errors() {
    let agent = Agent::start().await;
    for _ in 0..5 {
        agent
            .run_argv(&["airlock-no-such-program"])
            .await
            .unwrap_err();
    }
    let out = agent.run_argv(&["echo", "still here"]).await.unwrap();
    assert_eq!(out.stdout_text(), "still here\n");
}

/// The targets of a process's open files that are not close-on-exec, i.e.
/// those its children inherit.
fn inheritable_files(pid: u32) -> HashSet<String> {
    let mut files = HashSet::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap() {
        let entry = entry.unwrap();
        let fd = entry.file_name().into_string().unwrap();
        let (Ok(target), Ok(info)) = (
            std::fs::read_link(entry.path()),
            std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")),
        ) else {
            continue;
        };
        let flags = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .map(|f| u32::from_str_radix(f.trim(), 8).unwrap())
            .unwrap();
        if flags & 0o2000000 == 0 {
            files.insert(target.display().to_string());
        }
    }
    files
}

#[tokio::test]
async fn programs_inherit_none_of_the_agents_own_files() {
    let agent = Agent::start().await;
    // What this test process passes to the agent (e.g. cargo's jobserver
    // pipe) may pass on to programs; nothing the agent opens itself may.
    let passed_down = inheritable_files(std::process::id());
    let out = agent
        .run_argv(&["ls", "-l", "/proc/self/fd/"])
        .await
        .unwrap();
    let listing = out.stdout_text();
    let mut fds = HashSet::new();
    for line in listing.lines().filter(|l| l.contains(" -> ")) {
        let (left, target) = line.split_once(" -> ").unwrap();
        let fd: u32 = left.rsplit(' ').next().unwrap().parse().unwrap();
        fds.insert(fd);
        // ls's own handle on the directory it lists.
        if fd > 2 && !target.starts_with("/proc/") {
            assert!(
                passed_down.contains(target),
                "fd {fd} ({target}) leaked from the agent:\n{listing}"
            );
        }
    }
    assert!(
        fds.contains(&0) && fds.contains(&1) && fds.contains(&2),
        "{listing}"
    );
    assert!(
        listing.contains(" 0 -> /dev/null"),
        "stdin is not /dev/null:\n{listing}"
    );
}

/// The bit of `cap` in a `/proc/PID/status` capability line's hex mask.
fn has_cap(status: &str, line: &str, cap: u32) -> bool {
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix(line))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap();
    mask & (1 << cap) != 0
}

#[tokio::test]
async fn rlimits_no_new_privs_and_dropped_capabilities_reach_the_program() {
    const CAP_SYS_BOOT: u32 = 22;
    let agent = Agent::start().await;
    let script = "ulimit -n; cat /proc/self/status";
    let mut req = request(&["sh", "-c", script]);
    req.limits = Some(airlock_proto::v1::Limits {
        open_files: 77,
        ..Default::default()
    });
    let out = agent.run(req.clone()).await.unwrap();
    let text = out.stdout_text();
    assert!(text.starts_with("77\n"), "{text}");
    assert!(text.contains("NoNewPrivs:\t1"), "{text}");
    let ours = std::fs::read_to_string("/proc/self/status").unwrap();
    if nix::unistd::geteuid().is_root() && has_cap(&ours, "CapEff:", 8 /* CAP_SETPCAP */) {
        assert!(!has_cap(&text, "CapBnd:", CAP_SYS_BOOT), "{text}");
    }

    req.privileged = true;
    let text = agent.run(req).await.unwrap().stdout_text();
    assert!(text.contains("NoNewPrivs:\t0"), "{text}");
    assert_eq!(
        has_cap(&text, "CapBnd:", CAP_SYS_BOOT),
        has_cap(&ours, "CapBnd:", CAP_SYS_BOOT),
        "a privileged program keeps the agent's bounding set"
    );
}
