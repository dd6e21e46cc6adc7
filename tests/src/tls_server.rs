//! `airlock serve` with a TCP listener and TLS, for the tests that drive it
//! as a remote user would: [`TlsServer::start`] makes a throwaway CA and a
//! certificate for `localhost`, starts the server in a [`DaemonHome`] on
//! an ephemeral loopback port, and gives the environment a remote client
//! needs (`AIRLOCK_HOST`, `AIRLOCK_CA_CERT`; the key is the caller's).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use crate::{airlock_bin, DaemonHome};

/// A running `airlock serve --listen ... --tls-cert ... --tls-key ...`.
#[derive(Debug)]
pub struct TlsServer {
    child: Child,
    /// The port it listens on (127.0.0.1).
    pub port: u16,
    /// The CA that signed its certificate.
    pub ca: PathBuf,
    /// Its certificate (for `localhost`) and key, PEM: another TLS server
    /// of the test may serve them too.
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TlsServer {
    /// Starts the server for `home` with `extra` arguments.
    pub fn start(home: &DaemonHome, extra: &[&str]) -> TlsServer {
        let airlock_testkit::tls::Files { ca, cert, key } =
            airlock_testkit::tls::write_files(home.path(), &["localhost"]);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(home.path().join("daemon.log"))
            .unwrap_or_else(|e| panic!("the server's log: {e}"));
        let mut child = Command::new(airlock_bin())
            .args(["--verbose", "serve", "--socket"])
            .arg(home.socket())
            .args(["--listen", "127.0.0.1:0", "--tls-cert"])
            .arg(&cert)
            .arg("--tls-key")
            .arg(&key)
            .args(extra)
            .env("AIRLOCK_STATE_DIR", home.path())
            .env("AIRLOCK_SAVED_DIR", home.saved_dir())
            .env("AIRLOCK_SERVER_DIR", home.server_dir())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap_or_else(|e| panic!("log: {e}")))
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("airlock serve: {e}"));
        let stderr = child.stderr.take().unwrap_or_else(|| panic!("no stderr"));
        let mut lines = BufReader::new(stderr).lines();
        let port = loop {
            match lines.next() {
                Some(Ok(line)) => {
                    if let Some(address) = line.strip_prefix("airlock: listening on ") {
                        let port = address.rsplit(':').next().and_then(|p| p.parse().ok());
                        break port.unwrap_or_else(|| panic!("no port in {line:?}"));
                    }
                }
                _ => panic!(
                    "airlock serve said no address; its log:\n{}",
                    home.daemon_log()
                ),
            }
        };
        // The rest of its stderr goes to the log.
        std::thread::spawn(move || {
            use std::io::Write;
            let mut log = log;
            for line in lines.map_while(Result::ok) {
                let _ = writeln!(log, "{line}");
            }
        });
        TlsServer {
            child,
            port,
            ca,
            cert,
            key,
        }
    }

    /// `AIRLOCK_HOST` and `AIRLOCK_CA_CERT` for a remote client.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            (
                "AIRLOCK_HOST".into(),
                format!("https://localhost:{}", self.port),
            ),
            (
                "AIRLOCK_CA_CERT".into(),
                self.ca.to_string_lossy().into_owned(),
            ),
        ]
    }

    /// The server's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the server with `signal` (a name such as `KILL`) and reaps it.
    pub fn signal(&mut self, signal: &str) {
        let _ = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.signal("TERM");
        }
    }
}
