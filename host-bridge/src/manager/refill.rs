//! The tasks that keep a pool full: one keeper per pooled manager, which
//! tops the pool up whenever it is woken (a member was taken, a fill
//! ended) and on a short tick (a slot came free, a frozen member ended),
//! and one task per fill, which starts a sandbox, warms it up (`warm_up`),
//! freezes it and hands it to the pool.
//!
//! Both hold the manager weakly: a dropped manager is never kept alive by
//! its refills, and a fill that finishes after it is gone drops (kills)
//! its sandbox.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, OwnedSemaphorePermit};
use tokio::task::JoinHandle;

use super::pool::FillOrder;
use super::warm_up::WarmUp;
use super::Inner;
use crate::error::Result;
use crate::sandbox::Sandbox;

/// How often the keeper looks without being woken.
const TICK: Duration = Duration::from_millis(250);

/// Starts the keeper of `inner`'s pool.
pub(super) fn spawn_keeper(inner: &Arc<Inner>) -> JoinHandle<()> {
    let weak = Arc::downgrade(inner);
    let wake = Arc::clone(&inner.wake);
    tokio::spawn(keep(weak, wake))
}

async fn keep(inner: Weak<Inner>, wake: Arc<Notify>) {
    loop {
        match inner.upgrade() {
            Some(inner) => top_up(&inner),
            None => return,
        }
        tokio::select! {
            () = wake.notified() => {}
            () = tokio::time::sleep(TICK) => {}
        }
    }
}

/// Drops what ended in the pool and starts the fills it lacks, each with
/// a slot taken now: the pool only uses slots that are free.
fn top_up(inner: &Arc<Inner>) {
    let mut pool = inner.pool();
    let ended = pool.prune_ended();
    let wanted = pool.fills_wanted(inner.slots.available_permits(), Instant::now());
    for _ in 0..wanted {
        let Ok(slot) = Arc::clone(&inner.slots).try_acquire_owned() else {
            break;
        };
        let Some(order) = pool.order_fill() else {
            break;
        };
        let id = order.id;
        tracing::debug!(fill = id, "pool fill started");
        let task = tokio::spawn(fill(Arc::downgrade(inner), order, slot));
        pool.fill_started(id, task);
    }
    drop(pool);
    ended.dispose();
}

/// One fill: a sandbox started in `slot` and frozen, for the pool (a
/// trace of its own: no call waits for it).
#[tracing::instrument(name = "pool_fill", skip_all)]
async fn fill(inner: Weak<Inner>, order: FillOrder, slot: OwnedSemaphorePermit) {
    let FillOrder {
        id,
        generation,
        builder,
        warm_up,
    } = order;
    let result = start_frozen(builder, &warm_up, slot).await;
    // A manager that is gone drops the sandbox, and so kills it.
    let Some(inner) = inner.upgrade() else { return };
    let discarded = inner
        .pool()
        .fill_finished(id, generation, result, Instant::now());
    discarded.dispose();
    inner.wake.notify_one();
}

/// Starts a member, warms it up and freezes it. A member whose warm-up
/// failed is dropped (killed) here: it is never handed out.
async fn start_frozen(
    mut builder: crate::SandboxBuilder,
    warm_up: &WarmUp,
    slot: OwnedSemaphorePermit,
) -> Result<Sandbox> {
    // An adoptable member's record is written at its handout.
    builder.pooled = true;
    let sandbox = builder.start_in_slot(Some(slot)).await?;
    warm_up.run(&sandbox).await?;
    sandbox.pause().await?;
    Ok(sandbox)
}
