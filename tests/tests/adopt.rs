//! Sandboxes that outlive their owner, on real VMs: an owner process (this
//! binary run again, `airlock_tests::owner`) starts an adoptable sandbox
//! and is killed with SIGKILL; its QEMU runs on, `gc` (the library's and
//! `airlock gc`) leaves it waiting for adoption, and the test adopts it:
//! the counter program it started never stopped, its file is intact,
//! programs run, the recorded environment and network policy (changed
//! after the start) are in force against loopback servers, the secret's
//! placeholder the guest kept still carries the secret over HTTPS checked
//! against the CA bundle written before, and a kill leaves nothing. A
//! paused one comes back paused, and its lifetime ceiling (shortened
//! before its owner died) still ends it. Detach and adopt in one process,
//! running and paused; a workspace locked again by its adopter; and a soak
//! of ten detach and adopt cycles on two sandboxes at a time.
//! `adopt_process.rs` checks the same on the process backend in seconds.

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use airlock::gc::{GcOptions, KeepReason};
use airlock::state_dir::STATE_DIR_ENV;
use airlock::{
    Command, EndReason, Error, NetworkOptions, NetworkPolicy, Origin, Sandbox, SandboxBuilder,
    SandboxState, Secret, StaticResolver, WorkspaceError,
};
use airlock_tests::owner::{self, Leftovers, Owner};
use airlock_tests::{sh, stdout_of, testkit};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

/// How long an owner may take to start its sandbox (the first start of a
/// configuration makes its template).
const OWNER_READY: Duration = Duration::from_secs(300);
/// How long anything else here may take to happen.
const PATIENCE: Duration = Duration::from_secs(60);
/// What is left of the paused owner's lifetime when it announces itself.
const LIFE_LEFT: Duration = Duration::from_secs(30);
/// Detach and adopt cycles of the soak.
const SOAK_CYCLES: usize = 10;
/// The secret's value: the upstream must receive it after the adoption.
const SECRET_VALUE: &str = "sk-adopted-0123456789abcdef";

/// The counter the owner starts: a number appended to `/root/count` five
/// times a second.
const COUNTER: &str = "i=0; while :; do echo $i >> /root/count; i=$((i+1)); sleep 0.2; done";

fn main() -> ExitCode {
    if let Some(role) = owner::role() {
        owner::block_on(hold_a_sandbox(&role));
        return ExitCode::SUCCESS;
    }
    owner::run(airlock_tests::owner_tests![
        a_killed_owners_sandbox_is_adopted_with_its_programs_files_and_network,
        a_paused_sandbox_comes_back_paused_and_its_lifetime_still_ends_it,
        detach_then_adopt_in_one_process_running_and_paused,
        a_workspace_is_locked_again_by_its_adopter,
        soak_detach_and_adopt_two_at_a_time,
    ])
}

/// `*.test` names on the host's loopback.
fn resolver() -> Arc<StaticResolver> {
    let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
    Arc::new(
        StaticResolver::new()
            .with("plain.test", loopback)
            .with("api.test", loopback)
            .with("other.test", loopback),
    )
}

fn unix_ms(time: SystemTime) -> u64 {
    u64::try_from(time.duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

/// Lines in the guest's `/root/count`.
async fn count(sandbox: &Sandbox) -> u64 {
    stdout_of(sandbox, "wc -l < /root/count")
        .await
        .trim()
        .parse()
        .expect("a line count")
}

/// The one QEMU process of the sandbox in `dir`.
fn qemu_of(dir: &Path) -> Vec<u32> {
    airlock_tests::processes_mentioning(dir)
}

/// The one-letter state of process `pid` (`T` when stopped).
fn process_state(pid: u32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit(')')
        .next()
        .and_then(|rest| rest.trim_start().chars().next())
        .unwrap_or('?')
}

/// After the sandbox in `dir` was killed and dropped: no QEMU, no state
/// directory.
fn nothing_left(dir: &Path) {
    assert!(
        airlock_tests::wait_until(PATIENCE, || qemu_of(dir).is_empty()),
        "QEMU left: {:?}",
        qemu_of(dir)
    );
    assert!(!dir.exists(), "state directory left: {}", dir.display());
}

/// The owner process (see the module docs).
async fn hold_a_sandbox(role: &str) {
    let base = std::env::var("ADOPT_BASE").expect("ADOPT_BASE");
    match role {
        "network" => {
            let upstream_ca = std::env::var("ADOPT_UPSTREAM_CA").expect("ADOPT_UPSTREAM_CA");
            let upstream_ca = std::fs::read(upstream_ca).expect("the test CA");
            let options = NetworkOptions::new()
                .policy(NetworkPolicy::new().allow("127.0.0.1/32".parse().unwrap()))
                // The test servers are on the host's loopback; the
                // adopter gets this from the record.
                .host_access(airlock::HostAccess::Allowed)
                .resolver(resolver())
                .secret(
                    Secret::new("API_KEY", SECRET_VALUE)
                        .unwrap()
                        .host("api.test"),
                );
            let upstream_ca = airlock::trust::CaCert::from_der(upstream_ca).expect("the test CA");
            let sandbox = airlock_tests::builder()
                .ca_cert(upstream_ca)
                .image(airlock_tests::default_image())
                .from_template(true)
                .state_dir_base(&base)
                .adoptable(true)
                .network(options)
                .env("GREETING", "hello from the builder")
                .start()
                .await
                .expect("the owner's sandbox");
            // A change after the start, which the record must keep.
            let mut policy = sandbox.network_policy().unwrap();
            policy.push("plain.test".parse().unwrap());
            policy.push("api.test".parse().unwrap());
            sandbox.set_network_policy(policy).unwrap();
            stdout_of(
                &sandbox,
                "echo kept > /root/note; echo $API_KEY > /root/key",
            )
            .await;
            drop(
                sandbox
                    .exec(sh(COUNTER).tag("counter"))
                    .await
                    .expect("counter"),
            );
            while count_or_zero(&sandbox).await < 3 {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let counted = count(&sandbox).await;
            owner::announce(&[
                sandbox.id(),
                &unix_ms(sandbox.started_at()).to_string(),
                &counted.to_string(),
            ]);
            std::future::pending::<()>().await;
        }
        "paused" => {
            let sandbox = airlock_tests::builder()
                .from_template(true)
                .state_dir_base(&base)
                .adoptable(true)
                .start()
                .await
                .expect("the owner's sandbox");
            stdout_of(&sandbox, "echo kept > /tmp/note").await;
            // What is left of its life: LIFE_LEFT, in the record too.
            let age = SystemTime::now()
                .duration_since(sandbox.started_at())
                .unwrap_or_default();
            sandbox.set_max_lifetime(Some(age + LIFE_LEFT));
            sandbox.pause().await.expect("pause");
            owner::announce(&[sandbox.id()]);
            std::future::pending::<()>().await;
        }
        other => panic!("no owner role {other}"),
    }
}

/// Lines in `/root/count`, 0 before it exists.
async fn count_or_zero(sandbox: &Sandbox) -> u64 {
    stdout_of(sandbox, "cat /root/count 2>/dev/null | wc -l")
        .await
        .trim()
        .parse()
        .unwrap_or(0)
}

/// Starts an owner in `role` under `base` (with `envs` besides) and kills
/// it once its sandbox runs; returns what it announced.
fn orphan(role: &str, base: &Path, envs: &[(&str, String)]) -> Vec<String> {
    let mut envs = envs.to_vec();
    envs.push(("ADOPT_BASE", base.display().to_string()));
    let mut owner = Owner::spawn(role, &envs);
    let ready = owner.ready(OWNER_READY);
    owner.kill();
    ready
}

/// Loopback servers for the guest: plain HTTP, and HTTPS for `api.test`
/// with a certificate of a test CA; both answer `ok <request line>`.
struct Servers {
    http: u16,
    https: u16,
    /// Every request head received, in order.
    heads: Arc<Mutex<Vec<String>>>,
    /// The test CA's certificate (DER), for the sandbox's upstream roots.
    ca_der: Vec<u8>,
}

async fn start_servers() -> Servers {
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let https = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let issued = testkit::tls::issue("adopt test CA", &["api.test"]);
    let acceptor = issued.acceptor();
    let servers = Servers {
        http: http.local_addr().unwrap().port(),
        https: https.local_addr().unwrap().port(),
        heads: Arc::default(),
        ca_der: issued.ca_der,
    };
    let heads = Arc::clone(&servers.heads);
    tokio::spawn(async move {
        while let Ok((stream, _)) = http.accept().await {
            tokio::spawn(answer(stream, Arc::clone(&heads)));
        }
    });
    let heads = Arc::clone(&servers.heads);
    tokio::spawn(async move {
        while let Ok((stream, _)) = https.accept().await {
            let (acceptor, heads) = (acceptor.clone(), Arc::clone(&heads));
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(stream).await {
                    answer(tls, heads).await;
                }
            });
        }
    });
    servers
}

/// Reads one request head and answers `ok <request line>`.
async fn answer<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, heads: Arc<Mutex<Vec<String>>>) {
    let mut head = Vec::new();
    let mut chunk = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&chunk[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let line = head.lines().next().unwrap_or_default().to_owned();
    heads.lock().unwrap().push(head);
    let body = format!("ok {line}");
    let response = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// Runs Python `code` in the guest; its stdout, trimmed.
async fn python(sandbox: &Sandbox, code: &str) -> String {
    let out = airlock_tests::run(sandbox, Command::new("python3").arg("-c").arg(code)).await;
    assert!(
        out.status.success(),
        "{code}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// `airlock gc` on `base`: its stdout.
fn airlock_gc(base: &Path) -> String {
    let out = std::process::Command::new(airlock_tests::airlock_bin())
        .arg("gc")
        .env(STATE_DIR_ENV, base)
        .output()
        .expect("airlock gc");
    assert!(out.status.success(), "airlock gc: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn a_killed_owners_sandbox_is_adopted_with_its_programs_files_and_network() {
    let servers = start_servers().await;
    let base = tempfile::tempdir().unwrap();
    let _leftovers = Leftovers::under(base.path());
    let files = tempfile::tempdir().unwrap();
    let upstream_ca = files.path().join("ca.der");
    std::fs::write(&upstream_ca, &servers.ca_der).unwrap();
    let ready = orphan(
        "network",
        base.path(),
        &[("ADOPT_UPSTREAM_CA", upstream_ca.display().to_string())],
    );
    let announced = Instant::now();
    let (id, started_ms, counted): (String, u64, u64) = (
        ready[0].clone(),
        ready[1].parse().unwrap(),
        ready[2].parse().unwrap(),
    );
    let dir = base.path().join(&id);
    assert_eq!(qemu_of(&dir).len(), 1, "QEMU outlives its owner");

    // Neither gc collects it: it waits for adoption.
    let report = airlock::gc::collect(base.path(), &GcOptions::new()).unwrap();
    assert!(report.removed.is_empty(), "{report:?}");
    assert!(
        matches!(report.kept[0].why, KeepReason::AwaitingAdoption { .. }),
        "{report:?}"
    );
    let said = airlock_gc(base.path());
    assert!(
        said.contains(&format!("kept {}: waiting for adoption", dir.display())),
        "{said}"
    );
    assert_eq!(qemu_of(&dir).len(), 1, "gc left it running");
    let orphans = airlock::adopt::orphans(base.path()).unwrap();
    assert_eq!(orphans.len(), 1, "{orphans:?}");
    assert_eq!(
        (orphans[0].id.as_str(), orphans[0].paused),
        (id.as_str(), false)
    );
    // Let it run ownerless for a while (each turn of the counter forks
    // `sleep` in an emulated guest: a few per second).
    tokio::time::sleep(Duration::from_secs(2)).await;

    // The adopter gives only a resolver; the policy is the recorded one.
    let sandbox = airlock_tests::builder()
        .state_dir_base(base.path())
        .network(NetworkOptions::new().resolver(resolver()))
        .adopt(&id)
        .await
        .expect("adopt");
    assert_eq!(sandbox.origin(), &Origin::Adopted);
    assert_eq!(sandbox.state(), SandboxState::Running);
    assert_eq!(unix_ms(sandbox.started_at()), started_ms);

    // The counter never stopped and goes on; the file is intact.
    let after = count(&sandbox).await;
    assert!(
        after > counted,
        "the counter stopped while nobody held its sandbox: {after} lines {:?} after its \
         owner announced {counted}",
        announced.elapsed()
    );
    let deadline = Instant::now() + PATIENCE;
    while count(&sandbox).await <= after {
        assert!(
            Instant::now() < deadline,
            "the counter does not go on after the adoption: still {after} lines"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(stdout_of(&sandbox, "cat /root/note").await, "kept\n");
    assert_eq!(
        stdout_of(&sandbox, "echo $GREETING").await,
        "hello from the builder\n"
    );

    // The policy in force: the rule added after the start lets the
    // guest reach the loopback server, a name without a rule is refused.
    let port = servers.http;
    let answer = python(
        &sandbox,
        &format!(
            "import urllib.request as u\n\
             print(u.urlopen('http://plain.test:{port}/after-adoption').read().decode())"
        ),
    )
    .await;
    assert_eq!(answer, "ok GET /after-adoption HTTP/1.1");
    assert_eq!(servers.heads.lock().unwrap().len(), 1);

    // The placeholder a program got before its owner died is the one
    // programs get now, and it still carries the secret, over TLS the
    // guest checks against the CA bundle written before.
    let kept_key = stdout_of(&sandbox, "cat /root/key").await;
    assert!(kept_key.starts_with("airlock-placeholder-"), "{kept_key}");
    assert_eq!(stdout_of(&sandbox, "echo $API_KEY").await, kept_key);
    let port = servers.https;
    let answer = python(
        &sandbox,
        &format!(
            "import urllib.request as u\n\
             key = open('/root/key').read().strip()\n\
             r = u.Request('https://api.test:{port}/secret', headers={{'Authorization': 'Bearer ' + key}})\n\
             print(u.urlopen(r).read().decode())"
        ),
    )
    .await;
    assert_eq!(answer, "ok GET /secret HTTP/1.1");
    let secret_head = servers.heads.lock().unwrap().last().cloned().unwrap();
    assert!(
        secret_head
            .to_ascii_lowercase()
            .contains(&format!("authorization: bearer {SECRET_VALUE}")),
        "{secret_head}"
    );
    let refused = python(
        &sandbox,
        "import socket\n\
         try:\n    socket.gethostbyname('other.test'); print('resolved')\n\
         except OSError:\n    print('refused')",
    )
    .await;
    assert_eq!(refused, "refused");
    let audit = sandbox.network_audit().unwrap();
    assert!(
        audit
            .iter()
            .any(|r| r.name.as_deref() == Some("other.test")
                && r.verdict != airlock::Verdict::Allowed),
        "{audit:?}"
    );

    sandbox.kill();
    drop(sandbox);
    nothing_left(&dir);
}

async fn a_paused_sandbox_comes_back_paused_and_its_lifetime_still_ends_it() {
    let base = tempfile::tempdir().unwrap();
    let _leftovers = Leftovers::under(base.path());
    let ready = orphan("paused", base.path(), &[]);
    let id = ready[0].clone();
    let dir = base.path().join(&id);
    let qemu = qemu_of(&dir);
    assert_eq!(qemu.len(), 1, "a paused QEMU outlives its owner");
    // SIGSTOP takes effect when QEMU is next scheduled.
    assert!(
        airlock_tests::wait_until(Duration::from_secs(5), || process_state(qemu[0]) == 'T'),
        "a frozen QEMU stays frozen when its owner dies: {}",
        process_state(qemu[0])
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(process_state(qemu[0]), 'T', "and stays frozen");

    let sandbox = airlock_tests::builder()
        .state_dir_base(base.path())
        .adopt(&id)
        .await
        .expect("adopt");
    assert_eq!(sandbox.state(), SandboxState::Paused);
    // Thawed to reach its agent, then frozen again (SIGSTOP takes effect
    // when QEMU is next scheduled).
    assert!(
        airlock_tests::wait_until(Duration::from_secs(5), || process_state(qemu[0]) == 'T'),
        "adopted frozen: {}",
        process_state(qemu[0])
    );
    let ends_at = sandbox.ends_at().expect("a lifetime ceiling");
    let left = ends_at
        .duration_since(SystemTime::now())
        .unwrap_or_default();
    assert!(
        left <= LIFE_LEFT && !left.is_zero(),
        "what is left of its life: {left:?}"
    );

    // A call resumes it (the recorded PausedCalls::Resume).
    assert_eq!(stdout_of(&sandbox, "cat /tmp/note").await, "kept\n");
    assert_eq!(sandbox.state(), SandboxState::Running);

    // Its recorded ceiling ends it.
    let reason = loop {
        if let Some(reason) = sandbox.end_reason() {
            break reason;
        }
        assert!(
            SystemTime::now() < ends_at + PATIENCE,
            "still running past its lifetime"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        matches!(reason, EndReason::LifetimeExceeded { .. }),
        "{reason}"
    );
    assert!(
        SystemTime::now() + Duration::from_millis(200) >= ends_at,
        "ended before its time"
    );
    drop(sandbox);
    nothing_left(&dir);
}

/// A small adoptable sandbox (busybox, a clone) under `base`.
fn small(base: &Path) -> SandboxBuilder {
    airlock_tests::builder()
        .from_template(true)
        .state_dir_base(base)
        .adoptable(true)
}

async fn detach_then_adopt_in_one_process_running_and_paused() {
    let base = tempfile::tempdir().unwrap();
    let _leftovers = Leftovers::under(base.path());
    let sandbox = small(base.path()).start().await.expect("start");
    let dir = sandbox.state_dir().to_owned();
    stdout_of(&sandbox, "echo kept > /tmp/note").await;
    drop(
        sandbox
            .exec(sh(&COUNTER.replace("/root", "/tmp")).tag("counter"))
            .await
            .unwrap(),
    );

    let id = sandbox.detach().await.expect("detach");
    assert_eq!(qemu_of(&dir).len(), 1, "a detached sandbox runs on");
    let report = airlock::gc::collect(base.path(), &GcOptions::new()).unwrap();
    assert!(
        matches!(report.kept[0].why, KeepReason::AwaitingAdoption { .. }),
        "{report:?}"
    );

    let sandbox = small(base.path()).adopt(&id).await.expect("adopt");
    assert_eq!(stdout_of(&sandbox, "cat /tmp/note").await, "kept\n");
    let lines = || async {
        let text = stdout_of(&sandbox, "wc -l < /tmp/count").await;
        text.trim().parse::<u64>().expect("a line count")
    };
    let first = lines().await;
    let deadline = Instant::now() + PATIENCE;
    while lines().await <= first {
        assert!(
            Instant::now() < deadline,
            "the counter does not go on after the adoption: still {first} lines"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Paused, detached and adopted: still paused.
    sandbox.pause().await.unwrap();
    let id = sandbox.detach().await.expect("detach paused");
    let qemu = qemu_of(&dir);
    assert!(
        airlock_tests::wait_until(Duration::from_secs(5), || process_state(qemu[0]) == 'T'),
        "detached frozen: {}",
        process_state(qemu[0])
    );
    let sandbox = small(base.path()).adopt(&id).await.expect("adopt paused");
    assert_eq!(sandbox.state(), SandboxState::Paused);
    assert_eq!(stdout_of(&sandbox, "cat /tmp/note").await, "kept\n");
    assert_eq!(sandbox.state(), SandboxState::Running);

    sandbox.kill();
    drop(sandbox);
    nothing_left(&dir);
}

/// Whether another holder could lock the workspace file now.
fn workspace_free(path: &Path) -> bool {
    let file = std::fs::File::open(path).unwrap();
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).is_ok()
}

async fn a_workspace_is_locked_again_by_its_adopter() {
    let base = tempfile::tempdir().unwrap();
    let _leftovers = Leftovers::under(base.path());
    let files = tempfile::tempdir().unwrap();
    let workspace = files.path().join("ws.img");
    let with_workspace = || {
        airlock_tests::builder()
            .image(airlock_tests::default_image())
            .workspace(&workspace)
            .state_dir_base(base.path())
    };
    let sandbox = with_workspace()
        .adoptable(true)
        .start()
        .await
        .expect("start");
    let dir = sandbox.state_dir().to_owned();
    stdout_of(&sandbox, "echo kept > /root/work").await;
    assert!(!workspace_free(&workspace), "held by its sandbox");

    let id = sandbox.detach().await.expect("detach");
    assert!(
        workspace_free(&workspace),
        "a detached sandbox lets its workspace go"
    );

    let sandbox = airlock_tests::builder()
        .state_dir_base(base.path())
        .adopt(&id)
        .await
        .expect("adopt");
    assert!(!workspace_free(&workspace), "locked again by its adopter");
    let error = with_workspace().start().await.unwrap_err();
    assert!(
        matches!(error, Error::Workspace(WorkspaceError::Busy(_))),
        "{error}"
    );
    assert_eq!(stdout_of(&sandbox, "cat /root/work").await, "kept\n");

    sandbox.kill();
    drop(sandbox);
    nothing_left(&dir);
    assert!(workspace_free(&workspace));
}

async fn soak_detach_and_adopt_two_at_a_time() {
    let base = tempfile::tempdir().unwrap();
    let _leftovers = Leftovers::under(base.path());
    let began = Instant::now();
    let (a, b) = tokio::join!(small(base.path()).start(), small(base.path()).start());
    let mut held = vec![a.expect("start"), b.expect("start")];
    let dirs: Vec<_> = held.iter().map(|s| s.state_dir().to_owned()).collect();
    let mut adoptions = Vec::new();
    let base_dir = base.path();
    for cycle in 0..SOAK_CYCLES {
        let rounds = held.into_iter().map(|sandbox| async move {
            stdout_of(&sandbox, &format!("echo {cycle} >> /tmp/cycles")).await;
            let id = sandbox.detach().await.expect("detach");
            let begin = Instant::now();
            let sandbox = small(base_dir).adopt(&id).await.expect("adopt");
            let took = begin.elapsed();
            let expected: String = (0..=cycle).map(|n| format!("{n}\n")).collect();
            assert_eq!(stdout_of(&sandbox, "cat /tmp/cycles").await, expected);
            (sandbox, took)
        });
        let adopted = futures::future::join_all(rounds).await;
        held = Vec::with_capacity(adopted.len());
        for (sandbox, took) in adopted {
            adoptions.push(took);
            held.push(sandbox);
        }
    }
    adoptions.sort();
    eprintln!(
        "soak: {} adoptions in {:?}; median {:?}, slowest {:?}",
        adoptions.len(),
        began.elapsed(),
        adoptions[adoptions.len() / 2],
        adoptions[adoptions.len() - 1]
    );
    drop(held);
    for dir in &dirs {
        nothing_left(dir);
    }
    assert!(airlock::adopt::orphans(base.path()).unwrap().is_empty());
}
