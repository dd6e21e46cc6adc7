//! Named-template benchmark: a sandbox whose server is already running in
//! its template's snapshot, against starting the same server after the
//! sandbox starts, timed from the start to the server's first HTTP answer.
//!
//! The template (built once here, not timed) is the default image with a
//! page in `/srv`, `START python3 -m http.server 8000` and
//! `READY port 8000`. Three ways to reach an answering server:
//! - from the named template (`SandboxBuilder::template`): start, then ask;
//! - a cold boot of the same root image, then START (the same command in
//!   the background), then ask until it answers;
//! - a clone of the image's configuration snapshot (what `airlock run`
//!   does by default), then START, then ask until it answers;
//! - the API's create from the named template (what `airlock sandbox
//!   create --template` asks a server; here a server in this process),
//!   then a GET from the host through the server's HTTP ingress: a user's
//!   whole path to the server's answer.
//!
//! "Ask" is one HTTP/1.0 GET over bash's `/dev/tcp` in the guest, retried
//! every 20 ms until the status line arrives (through the ingress: an
//! HTTP/1.1 GET on a new connection, retried every 20 ms until it is 200). Each row is the median of
//! `AIRLOCK_BENCH_STARTS` starts (default 10), with the slowest; the ratio
//! is against the template's row, measured in the same run.
//!
//! Run with `scripts/bench`, or `cargo bench -p airlock-tests --bench
//! template_start [-- --json]`.

#![allow(clippy::expect_used, clippy::unwrap_used)]

#[allow(dead_code)]
mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use airlock::template::named::NAMED_DIR_ENV;
use airlock::template::{BuildOptions, NamedStore, NamedTemplate, Ready, TemplateSpec};
use airlock::{Command, Sandbox, SandboxBuilder};
use airlock_client::{api, Client};
use airlock_testkit::{Options, TestServer};
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use serde_json::json;

const START: &str = "python3 -m http.server 8000";
/// START's port.
const PORT: u16 = 8000;
/// One GET; exits 0 once the status line arrives.
const ASK: &str = "exec 3<>/dev/tcp/127.0.0.1/8000 && printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3 \
                   && head -c 12 <&3 | grep -q '^HTTP/1.0 200'";

#[tokio::main]
async fn main() {
    let json_out = std::env::args().skip(1).any(|arg| arg == "--json");
    let n: usize = std::env::var("AIRLOCK_BENCH_STARTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(10);
    let dir = tempfile::tempdir().unwrap();
    // The server started below finds its named templates here (set before
    // any other thread reads the environment).
    std::env::set_var(NAMED_DIR_ENV, dir.path().join("named"));
    let template = build(dir.path()).await;
    let snapshots = dir.path().join("snapshots");

    let mut rows: Vec<(&str, Vec<Duration>)> = Vec::new();
    rows.push((
        "named template (server in the snapshot)",
        timed(n, || {
            let builder = airlock_tests::builder().template(&template);
            async move {
                let began = Instant::now();
                let sandbox = builder.start().await.unwrap();
                ask_until_answered(&sandbox).await;
                (began.elapsed(), sandbox)
            }
        })
        .await,
    ));
    let image = template.rootfs_path();
    let plain = |from_template: bool| {
        airlock_tests::builder()
            .image(&image)
            .memory_mib(template.meta().memory_mib)
            .from_template(from_template)
            .template_dir(&snapshots)
    };
    rows.push((
        "cold boot, then START until it answers",
        timed(n, || started_then_asked(plain(false))).await,
    ));
    // The configuration snapshot is made by the first start, not counted.
    plain(true).start().await.unwrap().kill();
    rows.push((
        "configuration clone, then START until it answers",
        timed(n, || started_then_asked(plain(true))).await,
    ));
    rows.push((
        "API create --template, first answer via ingress",
        through_the_api(n, dir.path(), &template).await,
    ));

    let floor = median(&rows[0].1);
    let mut text = format!("start to the server's first HTTP answer (median of {n}):\n");
    let mut report = serde_json::Map::new();
    for (name, times) in &rows {
        let median = median(times);
        let slowest = times.iter().max().copied().unwrap_or_default();
        text.push_str(&format!(
            "  {name:<50} {:>8.0} ms  (slowest {:>6.0} ms)  {:>5.1}x\n",
            ms(median),
            ms(slowest),
            median.as_secs_f64() / floor.as_secs_f64()
        ));
        report.insert(
            (*name).to_owned(),
            json!({ "median_ms": ms(median), "slowest_ms": ms(slowest), "n": times.len() }),
        );
    }
    if json_out {
        eprint!("{text}");
        println!("{}", serde_json::Value::Object(report));
    } else {
        print!("{text}");
    }
}

/// Builds the benchmark's template into `dir` (not timed).
async fn build(dir: &std::path::Path) -> NamedTemplate {
    let spec = TemplateSpec::from_image(airlock::images::DEFAULT_IMAGE)
        .run("mkdir -p /srv && echo '<h1>bench</h1>' > /srv/index.html")
        .workdir("/srv")
        .start(START)
        .ready(Ready::port(8000));
    let mut options = BuildOptions::new("bench", dir);
    options.store = NamedStore::new(dir.join("named"));
    options.sandbox = airlock_tests::builder();
    let began = Instant::now();
    let template = airlock::template::build(&spec, &options, |_| {})
        .await
        .expect("the benchmark's template builds");
    eprintln!(
        "built the benchmark's template in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    template
}

/// `n` creates of the named template through a server's API (in this
/// process, on its Unix socket, with its HTTP ingress on loopback), each
/// timed from the create to the guest server's first 200 through the
/// ingress, then killed. The port is public, so no token is asked for.
async fn through_the_api(n: usize, dir: &Path, template: &NamedTemplate) -> Vec<Duration> {
    let options = Options {
        dir: Some(dir.to_owned()),
        ..Options::default()
    };
    let server = TestServer::start_with(options, airlock_tests::builder).await;
    let (client, ingress_addr) = (&server.owner().await, server.ingress);
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let began = Instant::now();
        let id = client
            .sandboxes()
            .create(api::CreateSandboxRequest {
                template: template.meta().name.clone(),
                memory_mib: template.meta().memory_mib,
                public_ports: vec![u32::from(PORT)],
                ..api::CreateSandboxRequest::default()
            })
            .await
            .expect("create from the named template")
            .into_inner()
            .sandbox_id;
        let host = format!("{PORT}-{id}.{}", airlock_server::DEFAULT_INGRESS_DOMAIN);
        get_until_ok(ingress_addr, &host).await;
        times.push(began.elapsed());
        kill(client, id).await;
    }
    server.stop().await;
    times.sort();
    times
}

/// GETs `/` from `host` through the ingress at `addr`, each on a new
/// connection, until one is 200 (at most 60 s).
async fn get_until_ok(addr: SocketAddr, host: &str) {
    let began = Instant::now();
    loop {
        let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .expect("handshake");
        tokio::spawn(connection);
        let request = Request::get("/")
            .header("host", host)
            .body(Empty::<Bytes>::new())
            .unwrap();
        let response = sender.send_request(request).await.expect("request");
        let status = response.status();
        let _ = response.into_body().collect().await;
        if status == StatusCode::OK {
            return;
        }
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "the server never answered through the ingress: {status}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn kill(client: &Client, id: String) {
    client
        .sandboxes()
        .kill(api::KillSandboxRequest { sandbox_id: id })
        .await
        .expect("kill");
}

/// Starts `builder`, starts the server in `/srv` in
/// the background and asks until it answers.
async fn started_then_asked(builder: SandboxBuilder) -> (Duration, Sandbox) {
    let began = Instant::now();
    let sandbox = builder.start().await.unwrap();
    let argv: Vec<&str> = START.split(' ').collect();
    let server = sandbox
        .exec(
            &Command::new(argv[0])
                .args(argv[1..].iter().copied())
                .cwd("/srv")
                .tag("start"),
        )
        .await
        .unwrap();
    drop(server);
    ask_until_answered(&sandbox).await;
    (began.elapsed(), sandbox)
}

/// Asks the guest's server until it answers (at most 60 s).
async fn ask_until_answered(sandbox: &Sandbox) {
    let began = Instant::now();
    loop {
        let out = sandbox
            .exec(&Command::new("bash").arg("-c").arg(ASK))
            .await
            .unwrap()
            .output()
            .await
            .unwrap();
        if out.status.success() {
            return;
        }
        assert!(
            began.elapsed() < Duration::from_secs(60),
            "the server never answered: {out:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn timed<F, Fut>(n: usize, mut one: F) -> Vec<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = (Duration, Sandbox)>,
{
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let (took, sandbox) = one().await;
        sandbox.kill();
        times.push(took);
    }
    times.sort();
    times
}

fn median(sorted: &[Duration]) -> Duration {
    sorted[sorted.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
