//! SDKs as peers of the API benchmark: a program of the SDK's language
//! that the benchmark drives over a line protocol, so that its figures are
//! taken in the same run, on the same server and pool, interleaved with the
//! library's and the Rust client's. One request per stdin line, one JSON
//! answer per stdout line:
//!
//! - `create-echo CONN`: create (the default configuration, from the pool)
//!   to the first stdout chunk of `echo ready`; `{"ms": N, "origin": ...}`;
//! - `exec CONN SANDBOX_ID`: one round trip of the SDK's command call
//!   running `true` (`/bin/sh -c true`), start to exit; `{"ms": N}`;
//! - `get CONN SANDBOX_ID`: the SDK's call of `Sandboxes.Get` (which the
//!   server answers without the guest); `{"ms": N}`;
//!
//! each timed in the peer, on a connection it keeps per `CONN` (and a
//! sandbox handle per id), as a program using the SDK would;
//! a failure answers `{"error": "..."}`. `CONN` names how the SDK reaches
//! the server (`unix`, `tls`, `web`); the peer reads the server's socket,
//! address, key and CA from `AIRLOCK_BENCH_*` variables.
//! `sdk/typescript/bench/peer.mjs` is the TypeScript SDK's.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// A running SDK peer.
pub struct SdkPeer {
    name: String,
    _child: Child,
    stdin: ChildStdin,
    answers: Lines<BufReader<ChildStdout>>,
}

/// Where the peer finds the server.
pub struct PeerServer<'a> {
    pub socket: &'a Path,
    /// `https://localhost:PORT`.
    pub host: &'a str,
    pub key: &'a str,
    pub ca: &'a Path,
}

impl SdkPeer {
    /// Starts `program args` as the peer `name`, told where the server is.
    pub fn start(name: &str, program: &str, args: &[&str], server: &PeerServer) -> SdkPeer {
        let mut child = Command::new(program)
            .args(args)
            .env("AIRLOCK_BENCH_SOCKET", server.socket)
            .env("AIRLOCK_BENCH_HOST", server.host)
            .env("AIRLOCK_BENCH_KEY", server.key)
            .env("AIRLOCK_BENCH_CA", server.ca)
            // How a browser or edge runtime trusts a private CA: its store.
            .env("NODE_EXTRA_CA_CERTS", server.ca)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("the {name} peer ({program}): {e}"));
        let stdin = child.stdin.take().expect("the peer's stdin");
        let stdout = child.stdout.take().expect("the peer's stdout");
        SdkPeer {
            name: name.to_owned(),
            _child: child,
            stdin,
            answers: BufReader::new(stdout).lines(),
        }
    }

    /// The peer's name ("TypeScript SDK").
    pub fn name(&self) -> &str {
        &self.name
    }

    async fn ask(&mut self, request: &str) -> Value {
        self.stdin
            .write_all(format!("{request}\n").as_bytes())
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", self.name));
        let line = self
            .answers
            .next_line()
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", self.name))
            .unwrap_or_else(|| panic!("{} ended before answering {request}", self.name));
        let answer: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("{} answered {line:?}: {e}", self.name));
        if let Some(error) = answer.get("error") {
            panic!("{} failed {request}: {error}", self.name);
        }
        answer
    }

    /// One create from the pool to the first output of `echo`.
    pub async fn create_echo(&mut self, conn: &str) -> Duration {
        let answer = self.ask(&format!("create-echo {conn}")).await;
        assert_eq!(
            answer["origin"], "pool",
            "{}: not from the pool: {answer}",
            self.name
        );
        millis(&answer["ms"])
    }

    /// One command round trip on `sandbox`.
    pub async fn exec(&mut self, conn: &str, sandbox: &str) -> Duration {
        millis(&self.ask(&format!("exec {conn} {sandbox}")).await["ms"])
    }

    /// One `Sandboxes.Get` of `sandbox`.
    pub async fn get(&mut self, conn: &str, sandbox: &str) -> Duration {
        millis(&self.ask(&format!("get {conn} {sandbox}")).await["ms"])
    }
}

fn millis(value: &Value) -> Duration {
    Duration::from_secs_f64(value.as_f64().expect("milliseconds") / 1e3)
}
