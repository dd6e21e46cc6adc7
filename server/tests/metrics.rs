//! Prometheus metrics: the listener answers `GET /metrics` without a key
//! and nothing else; a real Prometheus (Debian's `prometheus`, which
//! `scripts/setup` installs) scrapes a server that ran a known number of
//! creates, execs, refusals and kills, and its query API reads the same
//! counts back; the alert rules in `deploy/prometheus/` pass `promtool`.
//! On the process backend, no VMs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use airlock_client::api;
use airlock_testkit::{create, create_sandbox, run, Options, TestServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `GET path` over HTTP/1.0 (no chunks, the connection closes): the status
/// and the body.
async fn get(address: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(address).await.expect("connect");
    let request = format!("GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8(answer).expect("a text answer");
    let (head, body) = answer.split_once("\r\n\r\n").expect("a head and a body");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, body.to_owned())
}

/// The value of the one series `series` (its name and labels as written)
/// in a scrape.
fn scraped(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in the scrape:\n{text}"))
        .parse()
        .unwrap()
}

#[tokio::test]
async fn the_listener_answers_get_metrics_without_a_key_and_404_otherwise() {
    let server = TestServer::start(Options {
        metrics: true,
        ..Options::default()
    })
    .await;
    let address = server.metrics.unwrap();
    let (status, text) = get(address, "/metrics").await;
    assert_eq!(status, 200, "{text}");
    assert!(
        text.contains("# TYPE airlock_creates_total counter"),
        "{text}"
    );
    assert_eq!(scraped(&text, r#"airlock_sandboxes{state="running"}"#), 0.0);
    assert!(scraped(&text, "airlock_host_memory_bytes") > 0.0);
    assert!(scraped(&text, "airlock_host_cpus") >= 1.0);
    for path in ["/", "/metrics/", "/api/v1/query", "/metrics?x=../keys"] {
        let (status, _) = get(address, path).await;
        let expected = if path.starts_with("/metrics?") {
            200
        } else {
            404
        };
        assert_eq!(status, expected, "{path}");
    }
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream
        .write_all(b"POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.0 404"), "{answer}");

    // Without the option nothing is served or counted.
    let plain = TestServer::start(Options::default()).await;
    assert!(plain.metrics.is_none());
    plain.stop().await;
    server.stop().await;
}

#[tokio::test]
async fn a_create_an_exec_and_a_refusal_show_in_the_scrape() {
    let server = TestServer::start(Options {
        metrics: true,
        ..Options::default()
    })
    .await;
    let owner = server.owner().await;
    let id = create_sandbox(&owner, create()).await;
    let (out, _, exit) = run(&owner, &id, &["echo", "hi"]).await;
    assert_eq!((out.as_slice(), exit.exit_code), (&b"hi\n"[..], 0));
    let refused = owner
        .sandboxes()
        .get(api::GetSandboxRequest {
            sandbox_id: "sbx-nobody".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::NotFound);
    let (_, text) = get(server.metrics.unwrap(), "/metrics").await;
    let created: f64 = ["pool", "clone", "snapshot", "template", "cold", "fork"]
        .iter()
        .map(|origin| {
            scraped(
                &text,
                &format!(r#"airlock_creates_total{{origin="{origin}",outcome="ok"}}"#),
            )
        })
        .sum();
    assert_eq!(created, 1.0, "{text}");
    assert_eq!(scraped(&text, r#"airlock_execs_total{outcome="ok"}"#), 1.0);
    assert_eq!(
        scraped(&text, r#"airlock_errors_total{reason="SANDBOX_NOT_FOUND"}"#),
        1.0
    );
    assert_eq!(scraped(&text, r#"airlock_sandboxes{state="running"}"#), 1.0);
    assert!(
        scraped(&text, "airlock_guest_memory_committed_bytes") >= f64::from(1u32 << 20),
        "{text}"
    );
    server.stop().await;
}

/// Debian's `prometheus` or `promtool`, or a failure naming the set-up.
fn tool(name: &str) -> PathBuf {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    });
    found.unwrap_or_else(|| {
        panic!("{name} not found; run scripts/setup (it installs Debian's prometheus package, which brings promtool)")
    })
}

fn alerts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/prometheus")
}

#[test]
fn the_alert_rules_pass_promtool_and_their_tests() {
    let promtool = tool("promtool");
    let dir = alerts_dir();
    for args in [
        ["check", "rules", "airlock-alerts.yml"],
        ["test", "rules", "airlock-alerts.test.yml"],
    ] {
        let output = Command::new(&promtool)
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("run promtool");
        assert!(
            output.status.success(),
            "promtool {}:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// A Prometheus of the test's own, killed when dropped.
struct Prometheus {
    child: Child,
    address: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Scraping `target` every second, its web API on a free loopback port.
    fn start(target: SocketAddr) -> Prometheus {
        let binary = tool("prometheus");
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 rule_files:\n  - {rules}\n\
                 scrape_configs:\n  - job_name: airlock\n    static_configs:\n      - targets: ['{target}']\n",
                rules = alerts_dir().join("airlock-alerts.yml").display(),
            ),
        )
        .unwrap();
        // A free port, as the kernel gives one (Prometheus cannot report
        // a port 0 it bound).
        let address = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={address}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        Prometheus {
            child,
            address,
            _dir: dir,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// The value of `query` (one series, or the sum of several), `None`
    /// while Prometheus has none.
    async fn query(&self, query: &str) -> Option<f64> {
        let encoded: String = form_urlencoded::byte_serialize(query.as_bytes()).collect();
        TcpStream::connect(self.address).await.ok()?;
        let (status, body) = get(self.address, &format!("/api/v1/query?query={encoded}")).await;
        if status != 200 {
            return None;
        }
        let answer: serde_json::Value = serde_json::from_str(&body).ok()?;
        let result = answer["data"]["result"].as_array()?;
        let first = result.first()?;
        first["value"][1].as_str()?.parse().ok()
    }

    /// Waits until `query` is `expected`, failing after a minute with what
    /// it was.
    async fn expect(&self, query: &str, expected: f64) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut last = None;
        while Instant::now() < deadline {
            last = self.query(query).await;
            if last == Some(expected) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!(
            "Prometheus says {query} is {last:?}, not {expected}\n--- its log ---\n{}",
            self.log()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_reads_the_counts_of_a_known_run() {
    // Fail first, naming the set-up, when Prometheus is missing.
    tool("prometheus");
    let server = TestServer::start(Options {
        metrics: true,
        ..Options::default()
    })
    .await;
    let prometheus = Prometheus::start(server.metrics.unwrap());
    let owner = server.owner().await;

    // Three creates, four execs (two in the first sandbox), two kills.
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(create_sandbox(&owner, create()).await);
    }
    for id in ids.iter().chain(&ids[..1]) {
        let (out, _, exit) = run(&owner, id, &["echo", "hi"]).await;
        assert_eq!((out.as_slice(), exit.exit_code), (&b"hi\n"[..], 0));
    }
    for id in &ids[1..] {
        owner
            .sandboxes()
            .kill(api::KillSandboxRequest {
                sandbox_id: id.clone(),
            })
            .await
            .unwrap();
    }
    // Refusals: a bad start (no program), a sandbox nobody has, no key,
    // a wrong key.
    let bad = owner
        .start(api::StartProcess {
            sandbox_id: ids[0].clone(),
            ..api::StartProcess::default()
        })
        .await;
    assert!(bad.is_err(), "a start without a program");
    let refused = owner
        .sandboxes()
        .kill(api::KillSandboxRequest {
            sandbox_id: "sbx-nobody".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::NotFound);
    for key in [None, Some(format!("ak_{}", "A".repeat(43)))] {
        let refused = server
            .remote(key.as_deref())
            .await
            .sandboxes()
            .list(api::ListSandboxesRequest::default())
            .await
            .unwrap_err();
        assert_eq!(refused.code(), tonic::Code::Unauthenticated);
    }

    prometheus.expect(r#"up{job="airlock"}"#, 1.0).await;
    prometheus
        .expect(r#"sum(airlock_creates_total{outcome="ok"})"#, 3.0)
        .await;
    prometheus
        .expect(r#"sum(airlock_creates_total{outcome!="ok"})"#, 0.0)
        .await;
    prometheus
        .expect(r#"sum(airlock_create_ready_seconds_count)"#, 3.0)
        .await;
    prometheus
        .expect(r#"sum(airlock_first_output_seconds_count)"#, 3.0)
        .await;
    prometheus
        .expect(r#"airlock_execs_total{outcome="ok"}"#, 4.0)
        .await;
    prometheus
        .expect(r#"airlock_execs_total{outcome="INVALID_ARGUMENT"}"#, 1.0)
        .await;
    prometheus
        .expect(r#"airlock_errors_total{reason="INVALID_ARGUMENT"}"#, 1.0)
        .await;
    prometheus
        .expect(r#"airlock_errors_total{reason="SANDBOX_NOT_FOUND"}"#, 1.0)
        .await;
    prometheus
        .expect(r#"airlock_errors_total{reason="UNAUTHENTICATED"}"#, 2.0)
        .await;
    prometheus
        .expect(r#"sum(airlock_auth_failures_total{front="api"})"#, 2.0)
        .await;
    prometheus
        .expect(
            r#"airlock_auth_failures_total{front="api",cause="missing"}"#,
            1.0,
        )
        .await;
    prometheus
        .expect(r#"airlock_sandboxes{state="running"}"#, 1.0)
        .await;
    prometheus
        .expect(
            "airlock_guest_memory_committed_bytes",
            512.0 * 1024.0 * 1024.0,
        )
        .await;
    prometheus.expect("airlock_sandboxes_overdue", 0.0).await;
    // The rules load, and none fires on a healthy server.
    prometheus
        .expect(r#"count(ALERTS{alertstate="firing"}) or vector(0)"#, 0.0)
        .await;
    drop(prometheus);
    server.stop().await;
}
