//! The command line's side of running code and tracking changes:
//! `airlock run --changes --download-changes` prints what the command
//! created, modified and deleted and fetches those files; `airlock sandbox
//! run-code` runs cells in a sandbox the daemon keeps (the value printed,
//! variables kept between invocations, `--json`, an error's traceback and
//! exit code, bash, an image saved to a file). Two VMs.

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use airlock_tests::{airlock_bin, DaemonHome};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn run_prints_and_downloads_what_the_command_changed() {
    let host = tempfile::tempdir().unwrap();
    let out = Command::new(airlock_bin())
        .args(["run", "--memory", "256", "--changes"])
        .arg("--download-changes")
        .arg(host.path())
        .args([
            "--",
            "sh",
            "-c",
            "echo hello > /tmp/greeting.txt && mkdir /root/out && printf 'x' > /root/out/data.bin \
             && echo done",
        ])
        .output()
        .expect("run airlock");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    assert_eq!(text(&out.stdout), "done\n", "the program's stdout alone");
    assert!(
        stderr.contains("airlock: 3 changes under /root, /tmp\n"),
        "stderr: {stderr}"
    );
    assert!(
        stderr.contains("created   /root/out/  \n"),
        "stderr: {stderr}"
    );
    assert!(
        stderr.contains("created   /root/out/data.bin  1 B\n"),
        "stderr: {stderr}"
    );
    assert!(
        stderr.contains("created   /tmp/greeting.txt  6 B\n"),
        "stderr: {stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(host.path().join("tmp/greeting.txt")).unwrap(),
        "hello\n"
    );
    assert_eq!(
        std::fs::read(host.path().join("root/out/data.bin")).unwrap(),
        b"x"
    );
}

/// How long one client may take here: a boot with the default image under
/// TCG on a loaded host, with room to spare.
const CLIENT_LIMIT: Duration = Duration::from_secs(300);

/// Runs `airlock ARGS` in `home` under this file's [`CLIENT_LIMIT`].
fn airlock(home: &DaemonHome, args: &[&str]) -> Output {
    home.client(args).limit(CLIENT_LIMIT).output()
}

#[test]
fn sandbox_run_code_prints_values_keeps_state_and_saves_images() {
    let home = DaemonHome::new();
    // A server names images from its store; the default one is there.
    airlock_tests::default_image();
    let created = airlock(
        &home,
        &["sandbox", "create", "--image", "default", "--memory", "512"],
    );
    assert!(
        created.status.success(),
        "{}\n{}",
        text(&created.stderr),
        home.daemon_log()
    );
    let id = text(&created.stdout).trim().to_owned();
    let run_code = |args: &[&str]| {
        let argv = [&["sandbox", "run-code", id.as_str()], args].concat();
        airlock(&home, &argv)
    };

    let out = run_code(&["-c", "print('hi'); 1 + 1"]);
    assert_eq!(text(&out.stdout), "hi\n2\n", "{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(0));

    // Separate invocations, one context.
    run_code(&["-c", "x = 5"]);
    assert_eq!(text(&run_code(&["-c", "x * 2"]).stdout), "10\n");

    let out = run_code(&["--json", "-c", "{'a': [1, 2]}"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)));
    assert_eq!(json["status"], "ok");
    assert_eq!(
        json["result"]["application/json"],
        serde_json::json!({"a": [1, 2]})
    );
    assert_eq!(json["result"]["text/plain"], "{'a': [1, 2]}");

    let out = run_code(&["-c", "def f():\n    raise ValueError('bad input')\nf()"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("ValueError: bad input"), "{stderr}");
    assert!(stderr.contains("line 2, in f"), "{stderr}");

    let out = run_code(&["--lang", "bash", "-c", "cd /tmp; echo $((2 + 3))"]);
    assert_eq!(text(&out.stdout), "5\n");
    let out = run_code(&["--lang", "bash", "-c", "pwd"]);
    assert_eq!(text(&out.stdout), "/tmp\n", "bash kept its directory");

    // A PNG output goes to a file whose path is printed.
    let saved = tempfile::tempdir().unwrap();
    let code = "class Png:\n    def _repr_png_(self):\n        return b'\\x89PNG\\r\\n\\x1a\\nrest'\nPng()";
    let out = run_code(&["--save-dir", saved.path().to_str().unwrap(), "-c", code]);
    let stdout = text(&out.stdout);
    let path = stdout
        .trim()
        .strip_prefix("[image/png saved to ")
        .and_then(|rest| rest.strip_suffix(']'))
        .unwrap_or_else(|| panic!("no saved image in {stdout:?}"));
    assert!(Path::new(path).starts_with(saved.path()), "{path}");
    assert!(std::fs::read(path)
        .unwrap()
        .starts_with(b"\x89PNG\r\n\x1a\n"));

    let out = run_code(&["--timeout", "1", "-c", "while True: pass"]);
    assert_eq!(out.status.code(), Some(124), "{}", text(&out.stderr));
    assert_eq!(
        text(&run_code(&["-c", "x"]).stdout),
        "5\n",
        "the context answers"
    );

    let killed = airlock(&home, &["sandbox", "kill", &id]);
    assert!(killed.status.success(), "{}", text(&killed.stderr));
}
