//! `airlock mcp` as an agent host meets it, driven by an independent
//! client: the official MCP Python SDK (`mcp` from PyPI, in the virtualenv
//! `scripts/mcp-client-venv` makes; `tests/mcp/client.py` runs the checks),
//! against a private Airlock server with real VMs. Over stdio and over
//! streamable HTTP (TLS, an API key of the server): the tools and their
//! schemas; `1 + 1` is `2`; variables persist between cells; a matplotlib
//! plot comes back as PNG image content; `exit 3` is an error result with
//! exit code 3; 10 MiB of output is cut with a note naming the log file
//! that holds all of it; a server started in the background answers the
//! URL `expose_port` gives (over stdio: the local server serves ingress),
//! and a server without ingress is an error result naming `--ingress`; a
//! snapshot of the session's sandbox starts a copy with its file and its
//! Python variable, is listed and deleted (over stdio);
//! over HTTP a missing or wrong key is refused; and
//! after the client has gone, the sandboxes its session used are gone too.

#![allow(clippy::expect_used)]

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use airlock_tests::images::matplotlib_image;
use airlock_tests::{airlock_bin, processes_mentioning, wait_until, DaemonHome, TlsServer};

/// The checks `client.py` runs in one session, in order.
const CHECKS: [&str; 6] = ["tools", "value", "state", "exit3", "big", "plot"];
/// How long one client run may take: several boots and a matplotlib import
/// under TCG on a loaded host.
const CLIENT_LIMIT: Duration = Duration::from_secs(900);
/// The HTTP server's idle timeout: a session with no call in flight this
/// long ends.
const IDLE_SECS: u64 = 5;
/// How long a session's sandboxes may take to go after its client did.
const GONE_LIMIT: Duration = Duration::from_secs(30);

/// The matplotlib image, built once for both tests (two builds at once in
/// one process race on the image's name file).
fn plot_image() {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(matplotlib_image);
}

/// The virtualenv's python, failing with the set-up command when missing.
fn python() -> PathBuf {
    let python = airlock::artifacts::home().join("venvs/mcp-client/bin/python");
    assert!(
        python.is_file(),
        "{} is missing: run scripts/mcp-client-venv (scripts/test does)",
        python.display()
    );
    python
}

/// `tests/mcp/client.py`.
fn client_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mcp/client.py")
}

/// Runs `client.py ARGS` in `home` (its server, its state) to its end.
fn run_client(home: &DaemonHome, args: &[&str]) -> Output {
    let mut child = Command::new(python())
        .arg(client_script())
        .args(args)
        .env("AIRLOCK_STATE_DIR", home.path())
        .env("AIRLOCK_SAVED_DIR", home.saved_dir())
        .env("AIRLOCK_SERVER_DIR", home.server_dir())
        .env_remove("AIRLOCK_HOST")
        .env_remove("AIRLOCK_API_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot run the MCP client");
    let pid = child.id();
    let stdout = child.stdout.take().expect("stdout");
    let stderr = child.stderr.take().expect("stderr");
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::Read;
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let errs = std::thread::spawn(move || {
            let mut stderr = stderr;
            let _ = stderr.read_to_end(&mut err);
            err
        });
        let mut stdout = stdout;
        let _ = stdout.read_to_end(&mut out);
        let err = errs.join().unwrap_or_default();
        let _ = done.send((child.wait(), out, err));
    });
    match finished.recv_timeout(CLIENT_LIMIT) {
        Ok((Ok(status), stdout, stderr)) => Output {
            status,
            stdout,
            stderr,
        },
        Ok((Err(error), _, _)) => panic!("cannot wait for the MCP client: {error}"),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!(
                "the MCP client did not finish within {CLIENT_LIMIT:?}; server log:\n{}",
                home.daemon_log()
            );
        }
    }
}

/// Asserts that every check in `expected` printed `ok NAME`; returns the
/// sandboxes the session used.
fn passed(home: &DaemonHome, out: &Output, expected: &[&str]) -> Vec<String> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let context = || {
        format!(
            "client stdout:\n{stdout}\nclient stderr:\n{stderr}\nserver log:\n{}",
            home.daemon_log()
        )
    };
    let ok: BTreeSet<&str> = stdout
        .lines()
        .filter_map(|line| line.strip_prefix("ok "))
        .collect();
    for name in expected {
        assert!(
            ok.contains(name),
            "check {name} did not pass\n{}",
            context()
        );
    }
    assert!(out.status.success(), "the client failed\n{}", context());
    stdout
        .lines()
        .filter_map(|line| line.strip_prefix("sandbox "))
        .map(str::to_owned)
        .collect()
}

/// Asserts that each of `sandboxes` is gone: not live in the owner's list,
/// its state directory removed and no process running for it.
fn gone(home: &DaemonHome, sandboxes: &[String]) {
    assert!(!sandboxes.is_empty(), "the session used no sandbox");
    let live = || -> Vec<String> {
        let listed = home.ok(&["ls", "--json"]);
        let listed: serde_json::Value = serde_json::from_str(&listed).expect("ls --json");
        listed
            .as_array()
            .expect("a list")
            .iter()
            .filter(|s| s["state"] != "ended")
            .filter_map(|s| s["id"].as_str().map(str::to_owned))
            .collect()
    };
    let all_gone = wait_until(GONE_LIMIT, || {
        let live = live();
        sandboxes.iter().all(|id| {
            !live.contains(id)
                && !home.path().join(id).exists()
                && processes_mentioning(&home.path().join(id)).is_empty()
        })
    });
    assert!(
        all_gone,
        "sandboxes {sandboxes:?} outlived their session; live: {:?}\nserver log:\n{}",
        live(),
        home.daemon_log()
    );
}

#[test]
fn a_stdio_session_runs_code_and_its_sandboxes_end_with_it() {
    plot_image();
    let home = DaemonHome::new();
    let bin = airlock_bin();
    // The local server serves ingress on a loopback port of its own.
    let checks = [&CHECKS[..], &["expose", "snapshot"]].concat();
    let args: Vec<&str> = [&["stdio", bin.to_str().expect("utf-8")], &checks[..]].concat();
    let out = run_client(&home, &args);
    let sandboxes = passed(&home, &out, &checks);
    // The session's own sandbox, the matplotlib one it created and the
    // copy of its snapshot.
    assert_eq!(sandboxes.len(), 3, "{sandboxes:?}");
    gone(&home, &sandboxes);
}

/// `airlock mcp --http` on an ephemeral loopback port with TLS, in front
/// of `server`; its URL (with the name its certificate is for).
fn start_http(home: &DaemonHome, server: &TlsServer) -> (Child, String) {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(home.path().join("mcp.log"))
        .expect("log");
    let mut child = Command::new(airlock_bin())
        .args([
            "--verbose",
            "mcp",
            "--http",
            "127.0.0.1:0",
            "--idle-timeout",
        ])
        .arg(IDLE_SECS.to_string())
        .arg("--tls-cert")
        .arg(&server.cert)
        .arg("--tls-key")
        .arg(&server.key)
        .envs(server.env())
        .env("AIRLOCK_STATE_DIR", home.path())
        .env_remove("AIRLOCK_API_KEY")
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(Stdio::piped())
        .spawn()
        .expect("airlock mcp --http");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let url = loop {
        match lines.next() {
            Some(Ok(line)) => {
                if let Some(url) = line.strip_prefix("airlock: MCP listening on ") {
                    break url.replace("127.0.0.1", "localhost");
                }
            }
            _ => panic!("airlock mcp --http said no address"),
        }
    };
    std::thread::spawn(move || {
        use std::io::Write;
        let mut log = log;
        for line in lines.map_while(Result::ok) {
            let _ = writeln!(log, "{line}");
        }
    });
    (child, url)
}

#[test]
fn an_http_session_needs_a_key_runs_code_and_its_sandboxes_end_with_it() {
    plot_image();
    let home = DaemonHome::new();
    let server = TlsServer::start(&home, &[]);
    let made = home.airlock(&["key", "create", "agent"]);
    assert!(made.status.success(), "{made:?}");
    let key = String::from_utf8_lossy(&made.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .trim()
        .to_owned();
    let (mut mcp, url) = start_http(&home, &server);
    let ca = server.ca.to_str().expect("utf-8").to_owned();
    let idle = format!("idle={IDLE_SECS}");
    let args: Vec<&str> = [
        &["http", &url, &key, &ca],
        &CHECKS[..],
        // This server serves no ingress.
        &["expose_refused", idle.as_str(), "refusals"],
    ]
    .concat();
    let out = run_client(&home, &args);
    let mcp_log = std::fs::read_to_string(home.path().join("mcp.log")).unwrap_or_default();
    let expected = [
        &CHECKS[..],
        &[
            "expose_refused",
            "idle",
            "no_key",
            "wrong_key",
            "sdk_wrong_key",
        ],
    ]
    .concat();
    let sandboxes = passed(&home, &out, &expected);
    // The session's own, the matplotlib one and the idle session's.
    assert_eq!(sandboxes.len(), 3, "{sandboxes:?}\n{mcp_log}");
    // The session ended when the client deleted it.
    gone(&home, &sandboxes);
    // The refusals were logged, the keys never.
    let mcp_log = std::fs::read_to_string(home.path().join("mcp.log")).unwrap_or_default();
    assert!(mcp_log.contains("refused an MCP request"), "{mcp_log}");
    assert!(!mcp_log.contains(&key[3..]), "the key is in the log");
    let _ = Command::new("kill")
        .args(["-TERM", &mcp.id().to_string()])
        .status();
    let _ = mcp.wait();
}
