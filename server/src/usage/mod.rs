//! The usage ledger: what every sandbox used, per key, kept after it is
//! gone and across restarts of the server, for billing (API `Usage.Query`,
//! `airlock usage`).
//!
//! - `store`: [`UsageStore`], the ledger on disk (SQLite, a versioned
//!   schema), accruals and queries.
//! - `period`: the UTC hours figures are kept by, and days' names.
//! - `error`: [`UsageError`].
//! - this file: [`Ledger`], which reads every sandbox's meters every
//!   [`ACCRUAL_INTERVAL`] (and at a kill, and when the server stops) and
//!   accrues them.
//!
//! The source of truth is the library's usage clock (`Sandbox::usage`:
//! running, paused, on disk, guest CPU), which goes on across adoption and
//! restore; the ledger keeps the clock as last accrued for each sandbox and
//! adds only what it grew by, so a re-adopted sandbox continues its rows
//! and nothing is counted twice. A sandbox on disk whose handle is gone
//! (after a restart) is read from its saved record (`SavedUsage::until`).
//! Bytes are the library's `Sandbox::traffic`, counted from zero by each
//! handle: the ledger remembers what it took from each.
//!
//! What a crash of the server loses: the time, CPU and bytes of a sandbox
//! that ends with it since the last accrual, and the bytes of one that
//! lives on since the last accrual: at most [`ACCRUAL_INTERVAL`] (5 s) of
//! each. The time of a sandbox that lives on (adopted, or on disk) is not
//! lost: its clock carries it into the next server's first reading.

pub mod error;
pub mod period;
pub mod store;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, SystemTime};

use airlock::saved::SavedStore;
use airlock::{EndReason, Sandbox, SandboxState, Traffic};

use crate::principal::Principal;
use crate::registry::Entry;
use crate::workspaces::WorkspaceStore;
pub use store::{Bytes, Clock, Grouping, Query, Reading, Row, UsageError, UsageStore};

/// How often the ledger accrues: the most a crash of the server loses.
pub const ACCRUAL_INTERVAL: Duration = Duration::from_secs(5);

/// What the ledger remembers of a sandbox between accruals.
#[derive(Debug)]
struct Tracked {
    /// The handle it read last (never kept alive by the ledger).
    handle: Weak<Sandbox>,
    /// The bytes it took from that handle so far.
    taken: Traffic,
    /// Its end was accrued: nothing more to read.
    settled: bool,
    /// The server's record of it, for a reading after it left the registry.
    entry: Entry,
}

/// The ledger: its store, and what it read from each sandbox.
#[derive(Debug)]
pub struct Ledger {
    store: Arc<UsageStore>,
    saved: SavedStore,
    workspaces: WorkspaceStore,
    tracked: Mutex<HashMap<String, Tracked>>,
    /// One accrual at a time (the ticker, a kill, the last one).
    accruing: tokio::sync::Mutex<()>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Now, in Unix milliseconds.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The ledger's name for the owner of a sandbox ("" for the machine's
/// owner).
fn key_of(entry: &Entry) -> String {
    entry.record.owner.clone().unwrap_or_default()
}

/// A sandbox that ended for good: not one left for the next server, and
/// not one whose saved files stay for a restore.
fn ended_for_good(state: &SandboxState, saved: &SavedStore, id: &str) -> bool {
    match state {
        SandboxState::Ended(EndReason::Detached) => false,
        SandboxState::Ended(_) => !saved.contains(id),
        _ => false,
    }
}

impl Ledger {
    /// The ledger in `data_dir`; saved sandboxes are read from `saved`, and
    /// named workspaces' sizes from `workspaces`.
    pub fn open(
        data_dir: &std::path::Path,
        saved: SavedStore,
        workspaces: WorkspaceStore,
    ) -> Result<Ledger, UsageError> {
        Ok(Ledger {
            store: Arc::new(UsageStore::open(data_dir)?),
            saved,
            workspaces,
            tracked: Mutex::new(HashMap::new()),
            accruing: tokio::sync::Mutex::new(()),
        })
    }

    /// The store, for queries.
    pub fn store(&self) -> &Arc<UsageStore> {
        &self.store
    }

    /// The size of the workspace the sandbox holds (0 for none).
    fn workspace_bytes(&self, entry: &Entry) -> u64 {
        let workspace = &entry.record.workspace;
        if workspace.is_empty() {
            return 0;
        }
        let path = if workspace.starts_with('/') {
            std::path::PathBuf::from(workspace)
        } else {
            let whose = match &entry.record.owner {
                Some(key) => Principal::Key(Arc::from(key.as_str())),
                None => Principal::Owner,
            };
            self.workspaces.path(&whose, workspace)
        };
        std::fs::metadata(path).map_or(0, |metadata| metadata.len())
    }

    /// A reading of `entry` now, with `handle` (its own, or the one the
    /// ledger kept), and the bytes that handle counted since the ledger
    /// last took them; `None` for a sandbox with nothing left to read.
    fn read(
        &self,
        entry: &Entry,
        handle: Option<&Arc<Sandbox>>,
        tracked: Option<&Tracked>,
    ) -> Option<(Reading, Traffic)> {
        let id = &entry.record.id;
        let (clock, state, traffic) = match handle {
            Some(handle) => (
                Clock::from(handle.usage()),
                handle.state(),
                handle.traffic(),
            ),
            None => {
                let saved = self.saved.record(id).ok()?;
                (
                    Clock::from(saved.usage.until(now_ms())),
                    SandboxState::OnDisk,
                    Traffic::default(),
                )
            }
        };
        // Bytes count from zero with each handle.
        let taken = tracked
            .filter(|tracked| {
                handle.is_some_and(|handle| std::ptr::eq(tracked.handle.as_ptr(), &**handle))
            })
            .map(|tracked| tracked.taken)
            .unwrap_or_default();
        let bytes = Bytes {
            egress_sent: traffic.egress_sent.saturating_sub(taken.egress_sent),
            egress_received: traffic
                .egress_received
                .saturating_sub(taken.egress_received),
            ingress_received: traffic
                .ingress_received
                .saturating_sub(taken.ingress_received),
            ingress_sent: traffic.ingress_sent.saturating_sub(taken.ingress_sent),
        };
        let on_disk = matches!(state, SandboxState::OnDisk);
        let reading = Reading {
            sandbox_id: id.clone(),
            key: key_of(entry),
            memory_mib: entry.record.memory_mib,
            vcpus: entry.record.vcpus,
            created_at_ms: entry.record.created_at_ms,
            at_ms: now_ms(),
            clock,
            workspace_bytes: self.workspace_bytes(entry),
            saved_bytes: if on_disk {
                self.saved.disk_bytes(id)
            } else {
                0
            },
            bytes,
            ended: ended_for_good(&state, &self.saved, id),
        };
        Some((reading, traffic))
    }

    /// Reads every sandbox of `entries` (the registry's) and every one the
    /// ledger read before that has left it, and accrues them.
    pub async fn accrue(&self, entries: Vec<Entry>) {
        let _one = self.accruing.lock().await;
        let readings = self.readings(entries);
        self.write(readings).await;
    }

    fn readings(&self, entries: Vec<Entry>) -> Vec<Reading> {
        let mut tracked = lock(&self.tracked);
        let mut readings = Vec::new();
        let mut present = std::collections::HashSet::new();
        for entry in entries {
            let id = entry.record.id.clone();
            present.insert(id.clone());
            let known = tracked.get(&id);
            let handle = entry.handle.clone();
            if known.is_some_and(|known| known.settled)
                && handle.as_ref().is_some_and(|handle| {
                    known.is_some_and(|known| std::ptr::eq(known.handle.as_ptr(), &**handle))
                })
            {
                continue;
            }
            let Some((reading, traffic)) = self.read(&entry, handle.as_ref(), known) else {
                continue;
            };
            let settled = handle
                .as_ref()
                .is_some_and(|handle| matches!(handle.state(), SandboxState::Ended(_)));
            tracked.insert(
                id,
                Tracked {
                    handle: handle.as_ref().map(Arc::downgrade).unwrap_or_default(),
                    taken: traffic,
                    settled,
                    entry,
                },
            );
            readings.push(reading);
        }
        // Sandboxes that left the registry (a kill): their last reading.
        let gone: Vec<String> = tracked
            .keys()
            .filter(|id| !present.contains(*id))
            .cloned()
            .collect();
        for id in gone {
            let Some(known) = tracked.remove(&id) else {
                continue;
            };
            if known.settled {
                continue;
            }
            if let Some(handle) = known.handle.upgrade() {
                if let Some((reading, _)) = self.read(&known.entry, Some(&handle), Some(&known)) {
                    readings.push(reading);
                }
            }
        }
        readings
    }

    async fn write(&self, readings: Vec<Reading>) {
        if readings.is_empty() {
            return;
        }
        let store = Arc::clone(&self.store);
        let written = tokio::task::spawn_blocking(move || store.accrue(&readings)).await;
        match written {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::warn!(error = %airlock::error_chain(&error), "cannot write the usage ledger")
            }
            Err(error) => tracing::warn!(%error, "the usage ledger's write failed"),
        }
    }

    /// What a kill of `entry` needs read first: a sandbox on disk without
    /// a handle has its clock only in the saved files the kill removes.
    pub fn before_end(&self, entry: &Entry) -> Ending {
        let reading = match &entry.handle {
            Some(_) => None,
            None => self.read(entry, None, None).map(|(reading, _)| reading),
        };
        Ending {
            entry: entry.clone(),
            reading,
        }
    }

    /// Accrues a sandbox's end at once (after a kill): its last reading,
    /// marked ended.
    pub async fn settle(&self, ending: Ending) {
        let _one = self.accruing.lock().await;
        let Ending { entry, reading } = ending;
        let id = entry.record.id.clone();
        let known = lock(&self.tracked).remove(&id);
        let reading = match &entry.handle {
            Some(handle) => self
                .read(&entry, Some(handle), known.as_ref())
                .map(|(reading, _)| reading),
            None => reading,
        };
        if let Some(mut reading) = reading {
            reading.ended = true;
            self.write(vec![reading]).await;
        }
    }

    /// Accrues every [`ACCRUAL_INTERVAL`] the sandboxes `entries` gives
    /// (the registry's), until it gives none (the server is gone) or the
    /// task is ended.
    pub async fn run(self: Arc<Self>, entries: impl Fn() -> Option<Vec<Entry>>) {
        let mut ticks = tokio::time::interval(ACCRUAL_INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let Some(entries) = entries() else {
                return;
            };
            self.accrue(entries).await;
        }
    }
}

/// A kill's sandbox, read before its end (see [`Ledger::before_end`]).
#[derive(Debug)]
pub struct Ending {
    entry: Entry,
    reading: Option<Reading>,
}
