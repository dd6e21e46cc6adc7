//! The API benchmark's rows for the server's other clients: the `airlock`
//! CLI (a process per call) and the Python SDK (`sdk/python`, through its
//! helper `sdk/python/bench/bench_sdk.py`, run with the interpreter of a
//! virtualenv that has the SDK: `AIRLOCK_BENCH_PYTHON`, which
//! `scripts/bench` makes with `scripts/sdk-python venv`), and the exec round
//! trip through the library and the Rust client for comparison.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use airlock::{Command, Sandbox};
use airlock_client::{api, Client};
use airlock_tests::DaemonHome;

/// The interpreter of a virtualenv with the SDK installed.
pub const PYTHON_ENV: &str = "AIRLOCK_BENCH_PYTHON";

/// The program every exec row runs, as `commands.run("true")` runs it.
pub const SHELL_TRUE: [&str; 3] = ["/bin/sh", "-c", "true"];

/// The SDK's helper process (`sdk/python/bench/bench_sdk.py`): one
/// command a line on its stdin, the milliseconds it took on its stdout, so
/// that its calls alternate with the other clients' take by take.
pub struct SdkHelper {
    child: std::process::Child,
    replies: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
}

impl SdkHelper {
    /// Starts the helper with `python` for the server on `socket`.
    pub fn start(python: &Path, socket: &Path) -> SdkHelper {
        let helper =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../sdk/python/bench/bench_sdk.py");
        let mut child = std::process::Command::new(python)
            .arg(&helper)
            .arg("--socket")
            .arg(socket)
            .env_remove("AIRLOCK_HOST")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{} {}: {e}", python.display(), helper.display()));
        let stdout = child.stdout.take().expect("the helper's stdout");
        SdkHelper {
            child,
            replies: std::io::BufReader::new(stdout).lines(),
        }
    }

    /// Runs one command; the time the helper measured.
    pub fn call(&mut self, command: &str) -> Duration {
        use std::io::Write;
        let stdin = self.child.stdin.as_mut().expect("the helper's stdin");
        writeln!(stdin, "{command}").expect("write to the SDK's helper");
        let reply = self
            .replies
            .next()
            .unwrap_or_else(|| panic!("the SDK's helper ended at {command:?}"))
            .expect("read from the SDK's helper");
        let ms: f64 = reply
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("the SDK's helper answered {reply:?} to {command:?}"));
        Duration::from_secs_f64(ms / 1e3)
    }
}

impl Drop for SdkHelper {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// `airlock sandbox create` then `airlock sandbox exec ID -- echo ready`,
/// to the exit of the second (its output is written by then); the sandbox
/// is killed after.
pub async fn cli_create_to_echo(home: &DaemonHome, client: &Client) -> Duration {
    let began = Instant::now();
    let created = home.airlock(&["sandbox", "create"]);
    assert!(created.status.success(), "{created:?}");
    let id = String::from_utf8_lossy(&created.stdout).trim().to_owned();
    let echoed = home.airlock(&["sandbox", "exec", &id, "--", "echo", "ready"]);
    let took = began.elapsed();
    assert_eq!(echoed.stdout, b"ready\n", "{echoed:?}");
    let info = client
        .sandboxes()
        .get(api::GetSandboxRequest {
            sandbox_id: id.clone(),
        })
        .await
        .expect("get")
        .into_inner();
    assert_eq!(info.origin, "pool", "not from the pool: {info:?}");
    client
        .sandboxes()
        .kill(api::KillSandboxRequest { sandbox_id: id })
        .await
        .expect("kill");
    took
}

/// `Sandboxes.Get` of `id`: answered without the guest.
pub async fn api_get(client: &Client, id: &str) -> Duration {
    let began = Instant::now();
    client
        .sandboxes()
        .get(api::GetSandboxRequest {
            sandbox_id: id.to_owned(),
        })
        .await
        .expect("get");
    began.elapsed()
}

/// `airlock sandbox exec ID -- /bin/sh -c true`, process start to exit.
pub fn cli_exec(home: &DaemonHome, id: &str) -> Duration {
    let began = Instant::now();
    let out = home.airlock(&[&["sandbox", "exec", id, "--"][..], &SHELL_TRUE[..]].concat());
    let took = began.elapsed();
    assert!(out.status.success(), "{out:?}");
    took
}

/// `Processes.Start` of `/bin/sh -c true` to its exit.
pub async fn api_exec(client: &Client, id: &str) -> Duration {
    let began = Instant::now();
    let mut stream = client
        .start(api::StartProcess {
            sandbox_id: id.to_owned(),
            argv: SHELL_TRUE.iter().map(|a| (*a).to_owned()).collect(),
            ..Default::default()
        })
        .await
        .expect("start");
    while let Some(event) = stream.next_event().await.expect("events") {
        if let api::process_event::Event::Exited(exit) = event {
            assert_eq!(exit.exit_code, 0);
            return began.elapsed();
        }
    }
    panic!("the stream ended without an exit");
}

/// `Sandbox::exec` of `/bin/sh -c true` to its exit: the floor.
pub async fn library_exec(sandbox: &Sandbox) -> Duration {
    let began = Instant::now();
    let exit = sandbox
        .exec(&Command::new(SHELL_TRUE[0]).args(SHELL_TRUE[1..].iter().copied()))
        .await
        .expect("exec")
        .wait()
        .await
        .expect("wait");
    let took = began.elapsed();
    assert_eq!(exit.status.code(), Some(0));
    took
}
