//! [`Outbox`]: the deliveries waiting for each webhook, on disk before any
//! attempt, so a restart of the server loses none.
//!
//! One file per delivery, `<dir>/<webhook id>/<seq, 20 digits>.json` (mode
//! 0600), written atomically: the delivery's stable id, the event's
//! number, the body as it will be signed and sent, how many attempts it
//! has had and when it was first queued. A webhook holds at most
//! [`MAX_PENDING`]; past it the oldest is dropped, with a warning. Putting
//! a delivery that is there already changes nothing, so an event queued
//! twice (a crash between queueing and noting it) is sent once.

use std::path::{Path, PathBuf};

use super::error::OutboxError;
use airlock_atomic_file::Mode;
use serde::{Deserialize, Serialize};

/// Deliveries a webhook's outbox holds at most.
pub const MAX_PENDING: usize = 10_000;

/// One delivery of one event to one webhook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    /// `<webhook id>-<seq>`: the same on every attempt and across restarts.
    pub id: String,
    pub webhook: String,
    pub seq: u64,
    /// The event's webhook type, for the `airlock-event-type` header.
    pub kind: String,
    /// The JSON body, as signed.
    pub body: String,
    /// Attempts made so far.
    pub attempts: u32,
    /// When it was queued, in milliseconds since the Unix epoch.
    pub queued_ms: u64,
}

impl Delivery {
    /// The stable id of the delivery of event `seq` to `webhook`.
    pub fn id_of(webhook: &str, seq: u64) -> String {
        format!("{webhook}-{seq}")
    }
}

/// The outboxes of every webhook, under one directory.
#[derive(Debug, Clone)]
pub struct Outbox {
    dir: PathBuf,
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> OutboxError {
    let path = path.to_owned();
    move |source| OutboxError::Io {
        action,
        path,
        source,
    }
}

/// The number a delivery file is named by, if it is one.
fn seq_of(name: &str) -> Option<u64> {
    name.strip_suffix(".json")?.parse().ok()
}

impl Outbox {
    pub fn new(dir: PathBuf) -> Outbox {
        Outbox { dir }
    }

    fn hook_dir(&self, webhook: &str) -> PathBuf {
        self.dir.join(webhook)
    }

    fn path(&self, webhook: &str, seq: u64) -> PathBuf {
        self.hook_dir(webhook).join(format!("{seq:020}.json"))
    }

    /// Queues `delivery` (unless it is queued already). Answers how many
    /// older deliveries were dropped to stay within [`MAX_PENDING`].
    pub fn put(&self, delivery: &Delivery) -> Result<usize, OutboxError> {
        let dir = self.hook_dir(&delivery.webhook);
        std::fs::create_dir_all(&dir).map_err(io("make", &dir))?;
        let path = self.path(&delivery.webhook, delivery.seq);
        if path.exists() {
            return Ok(0);
        }
        self.write(&path, delivery)?;
        let pending = self.pending(&delivery.webhook)?;
        let over = pending.len().saturating_sub(MAX_PENDING);
        for &seq in &pending[..over] {
            tracing::warn!(
                webhook = delivery.webhook,
                seq,
                "a webhook's outbox is full; dropping its oldest delivery"
            );
            self.remove(&delivery.webhook, seq)?;
        }
        Ok(over)
    }

    fn write(&self, path: &Path, delivery: &Delivery) -> Result<(), OutboxError> {
        // Serializing strings and numbers does not fail.
        let bytes = serde_json::to_vec(delivery).unwrap_or_default();
        airlock_atomic_file::write(path, &bytes, Mode::Private).map_err(io("write", path))
    }

    /// Writes back a delivery queued before (its attempts counted).
    pub fn update(&self, delivery: &Delivery) -> Result<(), OutboxError> {
        let path = self.path(&delivery.webhook, delivery.seq);
        if !path.exists() {
            // Delivered or dropped meanwhile.
            return Ok(());
        }
        self.write(&path, delivery)
    }

    /// The numbers of `webhook`'s queued deliveries, oldest first.
    pub fn pending(&self, webhook: &str) -> Result<Vec<u64>, OutboxError> {
        let dir = self.hook_dir(webhook);
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => return Err(io("read", &dir)(error)),
        };
        let mut seqs: Vec<u64> = entries
            .filter_map(Result::ok)
            .filter_map(|entry| seq_of(&entry.file_name().to_string_lossy()))
            .collect();
        seqs.sort_unstable();
        Ok(seqs)
    }

    /// The delivery of event `seq` to `webhook`, if it is still queued.
    pub fn get(&self, webhook: &str, seq: u64) -> Result<Option<Delivery>, OutboxError> {
        let path = self.path(webhook, seq);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(io("read", &path)(error)),
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|source| OutboxError::Corrupt { path, source })
    }

    /// Takes a delivery out (sent, dropped or corrupt).
    pub fn remove(&self, webhook: &str, seq: u64) -> Result<(), OutboxError> {
        let path = self.path(webhook, seq);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(error) => Err(io("remove", &path)(error)),
        }
    }

    /// Takes out every delivery of `webhook` (it was removed).
    pub fn clear(&self, webhook: &str) -> Result<(), OutboxError> {
        let dir = self.hook_dir(webhook);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(error) => Err(io("remove", &dir)(error)),
        }
    }

    /// The webhooks that have an outbox on disk.
    pub fn webhooks(&self) -> Vec<String> {
        std::fs::read_dir(&self.dir)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .filter(|entry| entry.path().is_dir())
                    .map(|entry| entry.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(seq: u64) -> Delivery {
        Delivery {
            id: Delivery::id_of("wh_a", seq),
            webhook: "wh_a".into(),
            seq,
            kind: "sandbox.lifecycle.created".into(),
            body: format!("{{\"seq\":{seq}}}"),
            attempts: 0,
            queued_ms: 1,
        }
    }

    #[test]
    fn deliveries_come_back_oldest_first_and_survive_a_new_outbox() {
        let dir = tempfile::tempdir().unwrap();
        let outbox = Outbox::new(dir.path().to_owned());
        for seq in [3, 1, 20] {
            assert_eq!(outbox.put(&delivery(seq)).unwrap(), 0);
        }
        let outbox = Outbox::new(dir.path().to_owned());
        assert_eq!(outbox.pending("wh_a").unwrap(), [1, 3, 20]);
        assert_eq!(outbox.get("wh_a", 3).unwrap(), Some(delivery(3)));
        outbox.remove("wh_a", 3).unwrap();
        assert_eq!(outbox.pending("wh_a").unwrap(), [1, 20]);
        assert_eq!(outbox.get("wh_a", 3).unwrap(), None);
        assert_eq!(outbox.webhooks(), ["wh_a"]);
    }

    #[test]
    fn a_delivery_queued_twice_keeps_its_attempts() {
        let dir = tempfile::tempdir().unwrap();
        let outbox = Outbox::new(dir.path().to_owned());
        outbox.put(&delivery(1)).unwrap();
        let mut tried = delivery(1);
        tried.attempts = 3;
        outbox.update(&tried).unwrap();
        outbox.put(&delivery(1)).unwrap();
        assert_eq!(outbox.get("wh_a", 1).unwrap().unwrap().attempts, 3);
        // An update of one sent meanwhile does not bring it back.
        outbox.remove("wh_a", 1).unwrap();
        outbox.update(&tried).unwrap();
        assert!(outbox.pending("wh_a").unwrap().is_empty());
    }

    #[test]
    fn a_full_outbox_drops_its_oldest() {
        let dir = tempfile::tempdir().unwrap();
        let outbox = Outbox::new(dir.path().to_owned());
        for seq in 1..=MAX_PENDING as u64 {
            let path = outbox.path("wh_a", seq);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, b"{}").unwrap();
        }
        let dropped = outbox.put(&delivery(MAX_PENDING as u64 + 1)).unwrap();
        assert_eq!(dropped, 1);
        let pending = outbox.pending("wh_a").unwrap();
        assert_eq!(pending.len(), MAX_PENDING);
        assert_eq!(pending[0], 2);
        assert_eq!(*pending.last().unwrap(), MAX_PENDING as u64 + 1);
    }

    #[test]
    fn clearing_a_webhook_takes_its_deliveries() {
        let dir = tempfile::tempdir().unwrap();
        let outbox = Outbox::new(dir.path().to_owned());
        outbox.put(&delivery(1)).unwrap();
        outbox.clear("wh_a").unwrap();
        assert!(outbox.pending("wh_a").unwrap().is_empty());
        outbox.clear("wh_a").unwrap();
    }
}
