//! CA certificates the guest trusts (`SandboxBuilder::ca_cert`,
//! `airlock run --ca-cert`, `--trust-host-roots`), on real VMs against an
//! HTTPS server on the host's loopback whose certificate comes from a
//! throwaway CA (`index.test`, resolved to 127.0.0.1 by a `StaticResolver`):
//! the guest's curl, Python's urllib and `pip download` (from the server's
//! simple index) fail without the CA and succeed with it, on a clone of a
//! template and on a cold start; a fork installs them again; a workspace
//! keeps no root from one start to the next; `--trust-host-roots` gives the guest the host's store; a
//! malformed file is refused, naming it, before anything boots.
//!
//! The image is `network_refusals.rs`'s, Debian's with pip, requests and
//! curl, built by the first run into the image store as `test-net-tools`
//! (debootstrap, as root, from Debian's mirror; cached by the hash of its
//! inputs afterwards, so the two files share it).

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use airlock::{ExitStatus, NetworkOptions, NetworkPolicy, Origin, Sandbox, StaticResolver};
use airlock_rootfs::image::{self, BuildOptions, DebianSpec, Source};
use airlock_tests::tls_index::{TlsIndex, HELLO, PACKAGE, WHEEL};
use airlock_tests::{run, sh};

/// The name the test server's certificate is for.
const SERVER_NAME: &str = "index.test";

/// The image: the default packages plus pip, requests and curl, named
/// `test-net-tools` (the same inputs as `network_refusals.rs`'s).
fn tls_image() -> PathBuf {
    let extra = ["python3-pip", "python3-requests", "curl"].map(str::to_owned);
    let spec = DebianSpec::new(
        image::debian::DEFAULT_SUITE,
        image::debian::DEFAULT_MIRROR,
        &extra,
    );
    let options = BuildOptions {
        name: Some("test-net-tools".into()),
        ..BuildOptions::new(Source::Debian(spec))
    };
    match image::build(&options) {
        Ok(built) => built.info.path,
        Err(error) => panic!(
            "cannot build the curl and pip image: {}",
            airlock::error_chain(&error)
        ),
    }
}

/// A sandbox of the test image whose network reaches the test server.
async fn builder() -> airlock::SandboxBuilder {
    let image = tokio::task::spawn_blocking(tls_image).await.unwrap();
    let resolver = StaticResolver::new().with(SERVER_NAME, IpAddr::V4(Ipv4Addr::LOCALHOST));
    let policy = NetworkPolicy::new()
        .allow(SERVER_NAME.parse().unwrap())
        .allow("127.0.0.1/32".parse().unwrap());
    airlock_tests::builder()
        .image(image)
        .memory_mib(512)
        .network(
            NetworkOptions::new()
                .policy(policy)
                .host_access(airlock::HostAccess::Allowed)
                .resolver(Arc::new(resolver)),
        )
        // None unless the test adds one, whatever AIRLOCK_CA_CERTS says.
        .ca_certs([])
        .from_template(true)
}

async fn start(builder: airlock::SandboxBuilder) -> Sandbox {
    match builder.start().await {
        Ok(sandbox) => sandbox,
        Err(error) => panic!("sandbox did not start: {}", airlock::error_chain(&error)),
    }
}

/// What a client in the guest did: whether it succeeded, and its output.
struct Attempt {
    ok: bool,
    out: String,
}

async fn attempt(sandbox: &Sandbox, script: &str) -> Attempt {
    let output = run(sandbox, sh(script)).await;
    Attempt {
        ok: output.status == ExitStatus::Code(0),
        out: format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    }
}

async fn curl(sandbox: &Sandbox, server: &TlsIndex) -> Attempt {
    let url = server.url("/hello");
    attempt(sandbox, &format!("curl -sS --max-time 120 {url}")).await
}

async fn urllib(sandbox: &Sandbox, server: &TlsIndex) -> Attempt {
    let url = server.url("/hello");
    attempt(
        sandbox,
        &format!(
            "python3 -c 'import sys, urllib.request; \
             print(urllib.request.urlopen(sys.argv[1], timeout=120).read().decode())' {url}"
        ),
    )
    .await
}

async fn pip_download(sandbox: &Sandbox, server: &TlsIndex) -> Attempt {
    let index = server.url("/simple/");
    attempt(
        sandbox,
        &format!(
            "rm -rf /tmp/dl && python3 -m pip download --no-deps --retries 0 --timeout 120 \
             --disable-pip-version-check --no-cache-dir -d /tmp/dl --index-url {index} {PACKAGE} \
             && ls /tmp/dl"
        ),
    )
    .await
}

/// Each client fails over the certificate, and the server sees no request.
async fn all_refuse(sandbox: &Sandbox, server: &TlsIndex) {
    let curl = curl(sandbox, server).await;
    assert!(!curl.ok, "curl succeeded without the CA: {}", curl.out);
    assert!(
        curl.out.contains("SSL certificate problem"),
        "curl: {}",
        curl.out
    );
    let urllib = urllib(sandbox, server).await;
    assert!(
        !urllib.ok,
        "urllib succeeded without the CA: {}",
        urllib.out
    );
    assert!(
        urllib.out.contains("CERTIFICATE_VERIFY_FAILED"),
        "urllib: {}",
        urllib.out
    );
    let pip = pip_download(sandbox, server).await;
    assert!(!pip.ok, "pip succeeded without the CA: {}", pip.out);
    assert!(
        pip.out.contains("CERTIFICATE_VERIFY_FAILED"),
        "pip: {}",
        pip.out
    );
    assert_eq!(
        server.requests(),
        Vec::<String>::new(),
        "no request got through"
    );
}

/// Each client reaches the server.
async fn all_succeed(sandbox: &Sandbox, server: &TlsIndex) {
    let curl = curl(sandbox, server).await;
    assert!(curl.ok && curl.out == HELLO, "curl: {}", curl.out);
    let urllib = urllib(sandbox, server).await;
    assert!(
        urllib.ok && urllib.out.trim() == HELLO,
        "urllib: {}",
        urllib.out
    );
    let pip = pip_download(sandbox, server).await;
    assert!(pip.ok, "pip: {}", pip.out);
    assert!(pip.out.trim_end().ends_with(WHEEL), "pip: {}", pip.out);
    let requests = server.requests();
    assert!(
        requests.contains(&format!("GET /files/{WHEEL} HTTP/1.1")),
        "{requests:?}"
    );
}

#[tokio::test]
async fn without_the_ca_curl_urllib_and_pip_refuse_the_server() {
    let server = TlsIndex::start(SERVER_NAME).await;
    let sandbox = start(builder().await).await;
    assert!(
        matches!(sandbox.origin(), Origin::Clone { .. }),
        "{:?}",
        sandbox.origin()
    );
    all_refuse(&sandbox, &server).await;
}

#[tokio::test]
async fn with_the_ca_a_clone_reaches_the_server() {
    let server = TlsIndex::start(SERVER_NAME).await;
    let sandbox = start(builder().await.ca_cert(server.ca.clone())).await;
    assert!(
        matches!(sandbox.origin(), Origin::Clone { .. }),
        "{:?}",
        sandbox.origin()
    );
    all_succeed(&sandbox, &server).await;
    // The image's own roots are still trusted, and the new one is in
    // OpenSSL's directory under its subject hash.
    let out = attempt(
        &sandbox,
        "openssl verify -CApath /etc/ssl/certs -no-CAfile \
         /usr/local/share/ca-certificates/airlock-1.crt && \
         grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/ca-certificates.crt",
    )
    .await;
    assert!(out.ok, "{}", out.out);
    let count: usize = out.out.lines().last().unwrap().trim().parse().unwrap();
    assert!(count > 100, "the image's roots are kept: {}", out.out);
}

#[tokio::test]
async fn with_the_ca_a_cold_start_reaches_the_server() {
    let server = TlsIndex::start(SERVER_NAME).await;
    let builder = builder()
        .await
        .from_template(false)
        .ca_cert(server.ca.clone());
    let sandbox = start(builder).await;
    assert_eq!(sandbox.origin(), &Origin::Cold);
    all_succeed(&sandbox, &server).await;
}

#[tokio::test]
async fn a_fork_installs_the_roots_again_and_still_reaches_the_server() {
    let server = TlsIndex::start(SERVER_NAME).await;
    let saved = tempfile::tempdir().unwrap();
    let builder = builder()
        .await
        .saved_dir(saved.path())
        .ca_cert(server.ca.clone());
    let parent = start(builder).await;
    let reached = curl(&parent, &server).await;
    assert!(reached.ok, "{}", reached.out);
    let child = parent.fork(1).await.unwrap().remove(0);
    assert!(matches!(child.origin(), Origin::Fork { .. }));
    // The child's start took its parent's mounts away and made its own.
    let mounts = attempt(&child, "grep -c /run/airlock/trust /proc/mounts").await;
    assert_eq!(
        mounts.out, "2\n",
        "one overlay each over the two directories"
    );
    let reached = curl(&child, &server).await;
    assert!(reached.ok && reached.out == HELLO, "{}", reached.out);
}

#[tokio::test]
async fn a_workspace_keeps_no_root_from_one_start_to_the_next() {
    let server = TlsIndex::start(SERVER_NAME).await;
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws.img");
    let with_ca = builder()
        .await
        .workspace(&workspace)
        .workspace_size(256 << 20)
        .ca_cert(server.ca.clone());
    let sandbox = start(with_ca).await;
    let reached = curl(&sandbox, &server).await;
    assert!(reached.ok, "{}", reached.out);
    let out = attempt(&sandbox, "echo kept > /root/note").await;
    assert!(out.ok, "{}", out.out);
    sandbox
        .shutdown(std::time::Duration::from_secs(10))
        .await
        .unwrap();

    let sandbox = start(builder().await.workspace(&workspace)).await;
    let note = attempt(&sandbox, "cat /root/note").await;
    assert_eq!(note.out, "kept\n", "the workspace is the same");
    let refused = curl(&sandbox, &server).await;
    assert!(!refused.ok, "the root stayed: {}", refused.out);
    let listed = attempt(
        &sandbox,
        "ls /usr/local/share/ca-certificates /etc/ssl/certs | grep -c airlock; \
         grep -c /run/airlock/trust /proc/mounts",
    )
    .await;
    assert_eq!(listed.out, "0\n0\n", "{}", listed.out);
}

/// The certificates of a PEM bundle, as their base64 bodies.
fn bundle_set(text: &str) -> BTreeSet<String> {
    text.split("-----BEGIN CERTIFICATE-----")
        .skip(1)
        .filter_map(|block| block.split("-----END CERTIFICATE-----").next())
        .map(|body| body.split_whitespace().collect())
        .collect()
}

#[test]
fn trust_host_roots_gives_the_guest_exactly_the_host_store() {
    let state = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(airlock_tests::airlock_bin())
        .env("AIRLOCK_STATE_DIR", state.path())
        .env_remove("AIRLOCK_CA_CERTS")
        .args([
            "run",
            "--trust-host-roots",
            "--",
            "cat",
            "/etc/ssl/certs/ca-certificates.crt",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let host_path = std::env::var_os("SSL_CERT_FILE")
        .map(PathBuf::from)
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("/etc/ssl/certs/ca-certificates.crt"));
    let host = bundle_set(&std::fs::read_to_string(&host_path).unwrap());
    let guest = bundle_set(&String::from_utf8_lossy(&out.stdout));
    assert!(!host.is_empty());
    assert_eq!(guest, host, "the guest's bundle is the host's store");
}

/// Writes the files a user might wrongly give, each with what its error
/// must say.
fn bad_files(dir: &Path) -> Vec<(PathBuf, &'static str)> {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "Expired Test CA");
    ca.not_before = rcgen::date_time_ymd(2015, 1, 1);
    ca.not_after = rcgen::date_time_ymd(2016, 1, 1);
    let expired = ca.self_signed(&key).unwrap();
    let write = |name: &str, contents: &[u8]| {
        let path = dir.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    };
    vec![
        (
            write("notes.txt", b"just some text\n"),
            "holds no PEM certificate",
        ),
        (
            write("ca.key", key.serialize_pem().as_bytes()),
            "holds a private key",
        ),
        (write("expired.pem", expired.pem().as_bytes()), "expired on"),
        (write("ca.der", expired.der()), "looks like DER"),
        (dir.join("missing.pem"), "cannot read"),
    ]
}

#[test]
fn a_malformed_file_is_refused_with_its_path_before_a_boot() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    for (path, says) in bad_files(dir.path()) {
        let shown = path.display().to_string();
        let out = std::process::Command::new(airlock_tests::airlock_bin())
            .env("AIRLOCK_STATE_DIR", state.path())
            .env_remove("AIRLOCK_CA_CERTS")
            .args(["run", "--ca-cert", &shown, "--", "true"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{shown}: {stderr}");
        assert!(stderr.contains(&shown), "{shown}: {stderr}");
        assert!(stderr.contains(says), "{shown}: {stderr}");

        // The same file named by AIRLOCK_CA_CERTS fails the start.
        let out = std::process::Command::new(airlock_tests::airlock_bin())
            .env("AIRLOCK_STATE_DIR", state.path())
            .env("AIRLOCK_CA_CERTS", &shown)
            .args(["run", "--", "true"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{shown}: {stderr}");
        assert!(stderr.contains("AIRLOCK_CA_CERTS"), "{shown}: {stderr}");
        assert!(stderr.contains(&shown), "{shown}: {stderr}");
    }
    let started: Vec<_> = std::fs::read_dir(state.path())
        .map(|entries| entries.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(started.is_empty(), "nothing booted: {started:?}");
}
