//! Starts from a warm pool, as the clone, API and first-output benchmarks
//! time them: from the library's `start_pooled()` to its return and to the
//! first stdout chunk of `echo`, each take once the pool (of one) has
//! refilled; and from a server's `Sandboxes.Create` to a program's first
//! stdout chunk, each take once the server's pool holds a frozen member.

use std::time::{Duration, Instant};

use airlock::{SandboxBuilder, Sandboxes};
use airlock_client::{api, Client};
use airlock_tests::DaemonHome;

use super::first_echo;

/// Starts from a pool, sorted.
pub struct PooledTimes {
    /// From `start_pooled()` to its return.
    pub returned: Vec<Duration>,
    /// From `start_pooled()` to the first stdout chunk of `echo`.
    pub echoed: Vec<Duration>,
}

/// `n` starts from a pool of one of `builder`'s configuration, each once
/// the pool has refilled and its member has waited `frozen` more; each
/// sandbox is killed after its `echo`.
pub async fn pooled_starts(n: usize, frozen: Duration, builder: SandboxBuilder) -> PooledTimes {
    let manager = Sandboxes::with_pool(2, builder, 1).expect("pool");
    let mut times = PooledTimes {
        returned: Vec::with_capacity(n),
        echoed: Vec::with_capacity(n),
    };
    for _ in 0..n {
        let member = refilled(&manager).await;
        tokio::time::sleep(frozen).await;
        let began = Instant::now();
        let sandbox = manager.start_pooled().await.expect("start from the pool");
        let returned = Instant::now();
        let first = first_echo(&sandbox).await;
        assert_eq!(sandbox.id(), member, "not a pool member");
        times.returned.push(returned - began);
        times.echoed.push(first - began);
        manager.kill(sandbox.id()).expect("kill");
    }
    times.returned.sort();
    times.echoed.sort();
    times
}

/// Waits for the pool's one member; returns its id.
pub async fn refilled(manager: &Sandboxes) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let status = manager.pool_status();
        if let Some(member) = status.ready.first() {
            return member.id.clone();
        }
        assert!(
            Instant::now() < deadline,
            "the pool did not refill: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A start through the API, from the `Create` call.
#[derive(Debug, Clone, Copy)]
pub struct ApiStart {
    /// Until `Create` returned.
    pub created: Duration,
    /// Until the program's first stdout chunk.
    pub first_output: Duration,
}

/// `Sandboxes.Create` (with no options: the pool's configuration) then
/// `Processes.Start` of `argv`, to its first stdout chunk; the sandbox must
/// come from the pool, and is killed after the program's exit.
pub async fn create_to_first_output(client: &Client, argv: &[&str]) -> ApiStart {
    let began = Instant::now();
    let info = client
        .sandboxes()
        .create(api::CreateSandboxRequest::default())
        .await
        .expect("create")
        .into_inner();
    let created = began.elapsed();
    assert_eq!(info.origin, "pool", "not from the pool: {info:?}");
    let mut stream = client
        .start(api::StartProcess {
            sandbox_id: info.sandbox_id.clone(),
            argv: argv.iter().map(|&arg| arg.to_owned()).collect(),
            ..Default::default()
        })
        .await
        .expect("start");
    let mut first = None;
    while let Some(event) = stream.next_event().await.expect("events") {
        match event {
            api::process_event::Event::Stdout(_) => {
                first.get_or_insert_with(Instant::now);
            }
            api::process_event::Event::Exited(_) => break,
            _ => {}
        }
    }
    let first_output = first.unwrap_or_else(|| panic!("{argv:?} printed nothing")) - began;
    client
        .sandboxes()
        .kill(api::KillSandboxRequest {
            sandbox_id: info.sandbox_id,
        })
        .await
        .expect("kill");
    ApiStart {
        created,
        first_output,
    }
}

/// Waits until the server in `home` holds a frozen pool member (a QEMU of
/// the server's, stopped).
pub async fn wait_for_frozen_member(home: &DaemonHome) {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let frozen = airlock_tests::processes_mentioning(home.path())
            .into_iter()
            .any(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                comm.starts_with("qemu-system")
                    && stat
                        .rsplit_once(')')
                        .is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
            });
        if frozen {
            // Settled: the member's thaw check finds it answering.
            tokio::time::sleep(Duration::from_millis(200)).await;
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the pool did not refill; log:\n{}",
            home.daemon_log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
