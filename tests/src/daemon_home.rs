//! A private home for `airlock`'s daemon, for the tests that drive the CLI.
//!
//! [`DaemonHome`] is a temporary state directory, so the `airlock sandbox`
//! commands run against it start and talk to a daemon of their own. It runs
//! `airlock` clients there ([`DaemonHome::client`], [`DaemonHome::ok`]),
//! each under a time limit past which the client is killed and the test
//! fails with the daemon's log; dropping the home ends the daemon and what
//! is left of its VMs, whatever the test did.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::{airlock_bin, processes_mentioning, wait_until};

/// How long one client may take by default: far more than a boot under
/// TCG on a loaded host.
pub const CLIENT_LIMIT: Duration = Duration::from_secs(180);

/// How long the daemons have to exit after a signal.
const EXIT_LIMIT: Duration = Duration::from_secs(20);

/// A private state directory, so a private daemon; dropping it ends the
/// daemon and what is left of its VMs.
#[derive(Debug)]
pub struct DaemonHome {
    dir: tempfile::TempDir,
}

impl DaemonHome {
    /// A new, empty state directory; no daemon runs until a client starts
    /// one.
    pub fn new() -> DaemonHome {
        match tempfile::tempdir() {
            Ok(dir) => DaemonHome { dir },
            Err(error) => panic!("cannot make a state directory: {error}"),
        }
    }

    /// The state directory (`AIRLOCK_STATE_DIR`).
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The daemon's socket.
    pub fn socket(&self) -> PathBuf {
        self.path().join("daemon.sock")
    }

    /// Where its daemon keeps sandboxes saved to disk (`AIRLOCK_SAVED_DIR`).
    pub fn saved_dir(&self) -> PathBuf {
        self.path().join("saved")
    }

    /// Where its server keeps keys and sandbox records
    /// (`AIRLOCK_SERVER_DIR`).
    pub fn server_dir(&self) -> PathBuf {
        self.path().join("server")
    }

    /// What the daemon has logged so far (empty before it starts).
    pub fn daemon_log(&self) -> String {
        std::fs::read_to_string(self.path().join("daemon.log")).unwrap_or_default()
    }

    /// The daemon's pids (its command line names the socket).
    pub fn daemons(&self) -> Vec<u32> {
        processes_mentioning(&self.socket())
    }

    /// Sends `signal` (a name such as `TERM`) to every daemon and waits,
    /// for 20 s at most, for them to go; whether they went.
    pub fn signal_daemons(&self, signal: &str) -> bool {
        for pid in self.daemons() {
            kill(signal, pid);
        }
        wait_until(EXIT_LIMIT, || self.daemons().is_empty())
    }

    /// `airlock ARGS` in this home, to adjust (`.env`, `.stdin`, `.limit`)
    /// and run with [`Client::output`].
    pub fn client<'a>(&'a self, args: &'a [&'a str]) -> Client<'a> {
        Client {
            home: self,
            args,
            env: Vec::new(),
            stdin: None,
            limit: CLIENT_LIMIT,
        }
    }

    /// Runs `airlock ARGS` in this home with no stdin, to its end; the exit
    /// status is the caller's to check.
    pub fn airlock(&self, args: &[&str]) -> Output {
        self.client(args).output()
    }

    /// Runs `airlock sandbox ARGS` and requires success; returns stdout,
    /// which must be UTF-8.
    pub fn ok(&self, args: &[&str]) -> String {
        let argv = [&["sandbox"], args].concat();
        let out = self.airlock(&argv);
        assert!(
            out.status.success(),
            "airlock {argv:?} failed ({:?}): {}\ndaemon log:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            self.daemon_log()
        );
        match String::from_utf8(out.stdout) {
            Ok(stdout) => stdout,
            Err(error) => panic!("airlock {argv:?} printed other than UTF-8: {error}"),
        }
    }
}

impl Default for DaemonHome {
    fn default() -> DaemonHome {
        DaemonHome::new()
    }
}

impl Drop for DaemonHome {
    fn drop(&mut self) {
        if !self.signal_daemons("TERM") {
            self.signal_daemons("KILL");
        }
        for pid in processes_mentioning(self.path()) {
            kill("KILL", pid);
        }
    }
}

/// One `airlock` invocation in a [`DaemonHome`]: its arguments, extra
/// environment, stdin and time limit.
#[derive(Debug)]
pub struct Client<'a> {
    home: &'a DaemonHome,
    args: &'a [&'a str],
    env: Vec<(String, String)>,
    stdin: Option<Vec<u8>>,
    limit: Duration,
}

impl Client<'_> {
    /// Sets `key=value` in the client's environment.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }

    /// Feeds `data` to the client's stdin (otherwise it reads /dev/null).
    pub fn stdin(mut self, data: &[u8]) -> Self {
        self.stdin = Some(data.to_vec());
        self
    }

    /// How long the client may take ([`CLIENT_LIMIT`] unless set).
    pub fn limit(mut self, limit: Duration) -> Self {
        self.limit = limit;
        self
    }

    /// Runs the client to its end and collects its output. A client still
    /// running after the limit is killed and fails the test with the
    /// daemon's log, rather than hanging it.
    pub fn output(self) -> Output {
        let Client {
            home,
            args,
            env,
            stdin,
            limit,
        } = self;
        let spawned = Command::new(airlock_bin())
            .args(args)
            .envs(env)
            .env("AIRLOCK_STATE_DIR", home.path())
            .env("AIRLOCK_SAVED_DIR", home.saved_dir())
            .env("AIRLOCK_SERVER_DIR", home.server_dir())
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(error) => panic!("cannot run airlock {args:?}: {error}"),
        };
        let pid = child.id();
        let pipe = child.stdin.take();
        let (done, finished) = std::sync::mpsc::channel();
        // The feeding and the waiting happen on a thread, so that the limit
        // covers both.
        std::thread::spawn(move || {
            // The pipe closes at the end of this arm: the client sees the
            // end of its input.
            let fed = match (pipe, stdin) {
                (Some(mut pipe), Some(data)) => pipe.write_all(&data),
                _ => Ok(()),
            };
            let _ = done.send((fed, child.wait_with_output()));
        });
        match finished.recv_timeout(limit) {
            Ok((Err(error), _)) => panic!("cannot feed stdin to airlock {args:?}: {error}"),
            Ok((Ok(()), Err(error))) => panic!("cannot wait for airlock {args:?}: {error}"),
            Ok((Ok(()), Ok(output))) => output,
            Err(_) => {
                kill("KILL", pid);
                panic!(
                    "airlock {args:?} did not finish within {limit:?}; daemon log:\n{}",
                    home.daemon_log()
                );
            }
        }
    }
}

/// Sends `signal` (a name such as `KILL`) to `pid`, ignoring failure: the
/// process may have gone already.
fn kill(signal: &str, pid: u32) {
    let _ = Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status();
}
