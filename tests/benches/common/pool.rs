//! Starts from a manager's warm pool, as the clone and API benchmarks time
//! them: from `start_pooled()` to its return and to the first stdout chunk
//! of `echo`, each take once the pool (of one) has refilled.

use std::time::{Duration, Instant};

use airlock::{SandboxBuilder, Sandboxes};

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
