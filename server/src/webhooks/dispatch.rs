//! [`Webhooks`]: the webhooks and their outboxes, with the tasks that fill
//! and empty them.
//!
//! The pump follows the event bus. It keeps in `cursor` the number of the
//! last event it queued; at start it queues what the log holds after it
//! (events of the previous run it had not queued, and those this start
//! emitted before it ran), then each new event. Each delivery is on disk
//! (`outbox`) before it is attempted.
//!
//! A webhook's worker sends its deliveries oldest first, one at a time, so
//! a receiver gets them in order: a failure (no connection, no answer
//! within the attempt's timeout, an answer not 2xx) is retried after
//! [`backoff`] (1 s, doubling, at most 60 s) before any later delivery is
//! tried. A delivery queued more than [`MAX_AGE`] ago is dropped, with a
//! warning, as is the oldest of an outbox past `MAX_PENDING`; both count in
//! the webhook's `dropped`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use airlock_atomic_file::Mode;
use futures::future::{BoxFuture, FutureExt};
use tokio::sync::{broadcast, Notify};

use super::body::{body, webhook_type};
use super::deliver;
use super::error::WebhooksError;
use super::hooks::{Hook, Hooks};
use super::outbox::{Delivery, Outbox};
use crate::convert::now_ms;
use crate::events::{Event, Events};

/// How long a delivery is retried before it is dropped.
pub const MAX_AGE: Duration = Duration::from_secs(72 * 3600);

/// The longest wait between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Events read from the log at once.
const REPLAY_BATCH: usize = 1000;

/// The wait after a delivery's `attempts`-th failed attempt.
pub fn backoff(attempts: u32) -> Duration {
    let doubled = 1u64
        .checked_shl(attempts.saturating_sub(1))
        .unwrap_or(u64::MAX);
    Duration::from_secs(doubled).min(MAX_BACKOFF)
}

/// What a webhook's deliveries came to (since the server started).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub dropped: u64,
    pub last_error: String,
    pub last_delivered_ms: u64,
}

/// The webhooks and their outboxes.
#[derive(Debug)]
pub struct Webhooks {
    pub hooks: Hooks,
    outbox: Outbox,
    cursor: PathBuf,
    stats: Mutex<HashMap<String, Stats>>,
    wake: Mutex<HashMap<String, Arc<Notify>>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether `hook` may post to the server's own host: the owner's and the
/// server-wide ones may, a key's may not.
fn may_reach_host(hook: &Hook) -> bool {
    hook.owner.is_none()
}

impl Webhooks {
    /// The webhooks under `dir` (`<data dir>/webhooks`), with the
    /// server-wide `urls`.
    pub fn open(dir: &Path, urls: &[String]) -> Result<Webhooks, WebhooksError> {
        let hooks = Hooks::open(dir, urls, now_ms())?;
        let outbox = Outbox::new(dir.join("outbox"));
        // Outboxes of webhooks removed while the server was down.
        for id in outbox.webhooks() {
            if hooks.get(&id).is_none() {
                outbox.clear(&id)?;
            }
        }
        Ok(Webhooks {
            hooks,
            outbox,
            cursor: dir.join("cursor"),
            stats: Mutex::new(HashMap::new()),
            wake: Mutex::new(HashMap::new()),
        })
    }

    /// The tasks a server runs for its webhooks: the pump following the
    /// bus of `server` (its state) and a worker per webhook.
    pub fn tasks<S>(self: &Arc<Self>, server: Arc<S>) -> Vec<BoxFuture<'static, ()>>
    where
        S: AsRef<Events> + Send + Sync + 'static,
    {
        let mut tasks = vec![Arc::clone(self).pump(server).boxed()];
        tasks.extend(self.hooks.all().iter().map(|hook| self.worker(&hook.id)));
        tasks
    }

    /// The task of the webhook `id`'s worker (for one just registered).
    pub fn worker(self: &Arc<Self>, id: &str) -> BoxFuture<'static, ()> {
        Arc::clone(self).work(id.to_owned()).boxed()
    }

    /// What `id`'s deliveries came to, and how many wait.
    pub fn stats(&self, id: &str) -> (Stats, usize) {
        let stats = lock(&self.stats).get(id).cloned().unwrap_or_default();
        let pending = self.outbox.pending(id).map_or(0, |p| p.len());
        (stats, pending)
    }

    /// Removes the webhook `id` and its waiting deliveries.
    pub fn remove(&self, id: &str) -> Result<Option<Hook>, WebhooksError> {
        let removed = self.hooks.remove(id)?;
        if removed.is_some() {
            self.outbox.clear(id)?;
            self.notify(id);
        }
        Ok(removed)
    }

    fn notifier(&self, id: &str) -> Arc<Notify> {
        Arc::clone(lock(&self.wake).entry(id.to_owned()).or_default())
    }

    fn notify(&self, id: &str) {
        self.notifier(id).notify_one();
    }

    fn stat(&self, id: &str, change: impl FnOnce(&mut Stats)) {
        change(lock(&self.stats).entry(id.to_owned()).or_default());
    }

    fn read_cursor(&self) -> Option<u64> {
        std::fs::read_to_string(&self.cursor)
            .ok()
            .and_then(|text| text.trim().parse().ok())
    }

    fn write_cursor(&self, seq: u64) {
        let written =
            airlock_atomic_file::write(&self.cursor, format!("{seq}\n").as_bytes(), Mode::Private);
        if let Err(error) = written {
            tracing::warn!(%error, path = %self.cursor.display(), "cannot note the webhooks' last event");
        }
    }

    /// Queues `event` for every webhook that wants it.
    fn queue(&self, event: &Event) {
        for hook in self.hooks.all() {
            if !hook.wants(event) {
                continue;
            }
            let id = Delivery::id_of(&hook.id, event.seq);
            let delivery = Delivery {
                body: String::from_utf8_lossy(&body(&id, event)).into_owned(),
                id,
                webhook: hook.id.clone(),
                seq: event.seq,
                kind: webhook_type(event.kind).to_owned(),
                attempts: 0,
                queued_ms: now_ms(),
            };
            match self.outbox.put(&delivery) {
                Ok(0) => {}
                Ok(dropped) => self.stat(&hook.id, |s| s.dropped += dropped as u64),
                Err(error) => tracing::warn!(
                    error = %airlock::error_chain(&error),
                    webhook = hook.id,
                    seq = event.seq,
                    "cannot queue a delivery"
                ),
            }
            self.notify(&hook.id);
        }
        self.write_cursor(event.seq);
    }

    /// Queues the logged events after `cursor`; answers the last queued.
    fn catch_up(&self, events: &Events, mut cursor: u64) -> u64 {
        loop {
            let batch = match events.after(cursor, REPLAY_BATCH) {
                Ok(batch) => batch,
                Err(error) => {
                    tracing::warn!(error = %airlock::error_chain(&error), "cannot read the event log for webhooks");
                    return cursor;
                }
            };
            let Some(last) = batch.last().map(|e| e.seq) else {
                return cursor;
            };
            for event in &batch {
                self.queue(event);
            }
            cursor = last;
        }
    }

    /// Follows the bus, queueing each event.
    async fn pump<S: AsRef<Events>>(self: Arc<Self>, server: Arc<S>) {
        let bus: &Events = (*server).as_ref();
        let (mut events, last) = bus.subscribe_at();
        let mut cursor = match self.read_cursor() {
            Some(cursor) => cursor,
            // A first start: webhooks get the events from now on.
            None => {
                self.write_cursor(last);
                last
            }
        };
        cursor = self.catch_up(bus, cursor);
        loop {
            match events.recv().await {
                Ok(event) if event.seq <= cursor => {}
                Ok(event) => {
                    self.queue(&event);
                    cursor = event.seq;
                }
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::warn!(missed, "webhooks fell behind the events; reading the log");
                    cursor = self.catch_up(bus, cursor);
                }
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    }

    /// Sends the webhook `id`'s deliveries until it is removed.
    async fn work(self: Arc<Self>, id: String) {
        let wake = self.notifier(&id);
        loop {
            let Some(hook) = self.hooks.get(&id) else {
                return;
            };
            let next = match self.outbox.pending(&id) {
                Ok(pending) => pending.first().copied(),
                Err(error) => {
                    tracing::warn!(error = %airlock::error_chain(&error), webhook = id, "cannot read an outbox");
                    None
                }
            };
            let Some(seq) = next else {
                // Woken by a new delivery; a look now and then regardless.
                let _ = tokio::time::timeout(Duration::from_secs(5), wake.notified()).await;
                continue;
            };
            let mut delivery = match self.outbox.get(&id, seq) {
                Ok(Some(delivery)) => delivery,
                Ok(None) => continue,
                Err(error) => {
                    tracing::warn!(error = %airlock::error_chain(&error), webhook = id, seq, "dropping a delivery that cannot be read");
                    let _ = self.outbox.remove(&id, seq);
                    self.stat(&id, |s| s.dropped += 1);
                    continue;
                }
            };
            let age = Duration::from_millis(now_ms().saturating_sub(delivery.queued_ms));
            if age > MAX_AGE {
                tracing::warn!(
                    webhook = id,
                    seq,
                    attempts = delivery.attempts,
                    "dropping a delivery retried for {MAX_AGE:?}"
                );
                let _ = self.outbox.remove(&id, seq);
                self.stat(&id, |s| s.dropped += 1);
                continue;
            }
            match deliver::post(&hook.url, may_reach_host(&hook), &delivery, &hook.secret).await {
                Ok(()) => {
                    tracing::debug!(webhook = id, seq, "delivered");
                    if let Err(error) = self.outbox.remove(&id, seq) {
                        tracing::warn!(error = %airlock::error_chain(&error), webhook = id, seq, "cannot take a delivery out; it will be sent again");
                    }
                    self.stat(&id, |s| {
                        s.last_error.clear();
                        s.last_delivered_ms = now_ms();
                    });
                }
                Err(error) => {
                    delivery.attempts += 1;
                    let wait = backoff(delivery.attempts);
                    let error = airlock::error_chain(&error);
                    tracing::info!(webhook = id, seq, attempts = delivery.attempts, %error, ?wait, "a delivery failed; retrying");
                    if let Err(error) = self.outbox.update(&delivery) {
                        tracing::warn!(error = %airlock::error_chain(&error), webhook = id, seq, "cannot count an attempt");
                    }
                    self.stat(&id, |s| s.last_error = error);
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_a_second_up_to_a_minute() {
        let waits: Vec<u64> = (1..=8).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(backoff(200), MAX_BACKOFF);
        assert_eq!(backoff(0), Duration::from_secs(1));
    }
}
