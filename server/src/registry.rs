//! [`Registry`]: the sandboxes the server holds, with their owners and
//! labels, and the one place that decides who may see which.
//!
//! An entry joins the library's handle (`None` for a sandbox on disk whose
//! handle is gone, say after a restart: the next call restores it) to the
//! server's [`Record`]. A sandbox that ended stays listed, with why, for
//! [`ENDED_RETENTION`]; its record file goes at once.
//!
//! Quotas: a create first [`reserve`](Registry::reserve)s its sandbox and
//! memory against the key's quota under the registry's lock, so concurrent
//! creates of one key cannot both slip under it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tonic::Status;

use airlock::{Sandbox, SandboxState};
use airlock_api::reason;
use airlock_api::v1::ErrorReason;

use crate::keys::Quota;
use crate::principal::Principal;
use crate::record::{Record, Records};

/// How long an ended sandbox stays listed.
pub const ENDED_RETENTION: Duration = Duration::from_secs(600);

/// One sandbox of the server.
#[derive(Debug, Clone)]
pub struct Entry {
    pub record: Arc<Record>,
    /// `None`: saved to disk, no handle in this process yet.
    pub handle: Option<Arc<Sandbox>>,
    /// When this server noticed it ended.
    ended_at: Option<Instant>,
    /// A sandbox this server created, for the metrics: its first program's
    /// first output is yet to be timed.
    pub first_output: Option<crate::metrics::first_output::FirstOutput>,
}

impl Entry {
    /// Where it is in its life.
    pub fn state(&self) -> SandboxState {
        match &self.handle {
            Some(handle) => handle.state(),
            None => SandboxState::OnDisk,
        }
    }
}

/// What a key has, and has asked for, at once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Holding {
    pub sandboxes: u32,
    pub memory_mib: u64,
}

/// The server's sandboxes.
#[derive(Debug)]
pub struct Registry {
    records: Records,
    entries: Mutex<BTreeMap<String, Entry>>,
    /// Creates in flight, per owner (`None`: the machine's owner).
    pending: Mutex<HashMap<Option<Arc<str>>, Holding>>,
    /// Held over a quota check and its reservation.
    reserving: Mutex<()>,
}

/// A create's place against its key's quota, given back when dropped
/// (after the sandbox joined the registry, or failed to start).
#[derive(Debug)]
pub struct Reservation<'a> {
    registry: &'a Registry,
    owner: Option<Arc<str>>,
    held: Holding,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut pending = self.registry.pending();
        if let Some(holding) = pending.get_mut(&self.owner) {
            holding.sandboxes = holding.sandboxes.saturating_sub(self.held.sandboxes);
            holding.memory_mib = holding.memory_mib.saturating_sub(self.held.memory_mib);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Registry {
    pub fn new(records: Records) -> Self {
        Registry {
            records,
            entries: Mutex::new(BTreeMap::new()),
            pending: Mutex::new(HashMap::new()),
            reserving: Mutex::new(()),
        }
    }

    fn entries(&self) -> MutexGuard<'_, BTreeMap<String, Entry>> {
        lock(&self.entries)
    }

    fn pending(&self) -> MutexGuard<'_, HashMap<Option<Arc<str>>, Holding>> {
        lock(&self.pending)
    }

    /// The records on disk, for a server starting up.
    pub fn stored_records(&self) -> Vec<Record> {
        self.records.load()
    }

    /// Forgets a record on disk whose sandbox is gone.
    pub fn forget_record(&self, id: &str) {
        self.records.remove(id);
    }

    /// Adds a sandbox (writing its record). A record from before ingress
    /// gets its traffic token here.
    pub fn insert(&self, mut record: Record, handle: Option<Arc<Sandbox>>) {
        if record.ingress_token.is_empty() {
            record.ingress_token = crate::ingress::token::new();
        }
        if let Err(error) = self.records.write(&record) {
            tracing::warn!(error = %airlock::error_chain(&error), id = record.id, "cannot write a sandbox record");
        }
        let entry = Entry {
            record: Arc::new(record),
            handle,
            ended_at: None,
            first_output: None,
        };
        self.entries().insert(entry.record.id.clone(), entry);
    }

    /// Times the first output of the first program of the sandbox `id`,
    /// just created.
    pub fn await_first_output(&self, id: &str, first: crate::metrics::first_output::FirstOutput) {
        if let Some(entry) = self.entries().get_mut(id) {
            entry.first_output = Some(first);
        }
    }

    /// Gives a sandbox on disk the handle of its restore.
    pub fn set_handle(&self, id: &str, handle: Arc<Sandbox>) {
        if let Some(entry) = self.entries().get_mut(id) {
            entry.handle = Some(handle);
        }
    }

    /// The sandbox `id`, if `principal` may see it; otherwise, and for an
    /// id nobody has, the same `SANDBOX_NOT_FOUND`, so that another key's
    /// sandbox cannot be told from one that does not exist.
    pub fn get(&self, principal: &Principal, id: &str) -> Result<Entry, Status> {
        self.sweep();
        self.entries()
            .get(id)
            .filter(|entry| principal.may_see(entry.record.owner.as_deref()))
            .cloned()
            .ok_or_else(|| not_found(id))
    }

    /// The sandbox an ingress request names, whoever owns it (its traffic
    /// token decides): `id` exactly, else the one sandbox whose id equals
    /// it but for case (a browser lowercases the host it was given).
    pub fn for_ingress(&self, id: &str) -> Option<Entry> {
        self.sweep();
        let entries = self.entries();
        if let Some(entry) = entries.get(id) {
            return Some(entry.clone());
        }
        let mut alike = entries
            .values()
            .filter(|entry| entry.record.id.eq_ignore_ascii_case(id));
        match (alike.next(), alike.next()) {
            (Some(entry), None) => Some(entry.clone()),
            _ => None,
        }
    }

    /// Gives the sandbox `id` a new traffic token, in its record and on
    /// disk.
    pub fn set_token(&self, id: &str, token: String) {
        self.update(id, |record| record.ingress_token = token);
    }

    /// Changes the record of `id` and writes it.
    fn update(&self, id: &str, change: impl FnOnce(&mut Record)) {
        let record = {
            let mut entries = self.entries();
            let Some(entry) = entries.get_mut(id) else {
                return;
            };
            let mut record = (*entry.record).clone();
            change(&mut record);
            entry.record = Arc::new(record.clone());
            record
        };
        if let Err(error) = self.records.write(&record) {
            tracing::warn!(error = %airlock::error_chain(&error), id, "cannot write a sandbox record");
        }
    }

    /// Sets when the sandbox `id` is killed (milliseconds since the Unix
    /// epoch; 0: never), in its record and on disk.
    pub fn set_ends_at(&self, id: &str, ends_at_ms: u64) {
        self.update(id, |record| record.ends_at_ms = ends_at_ms);
    }

    /// Takes the sandbox `id` out of the registry (and its record off
    /// disk), if `principal` may see it.
    pub fn remove(&self, principal: &Principal, id: &str) -> Result<Entry, Status> {
        let mut entries = self.entries();
        let visible = entries
            .get(id)
            .is_some_and(|entry| principal.may_see(entry.record.owner.as_deref()));
        let entry = visible
            .then(|| entries.remove(id))
            .flatten()
            .ok_or_else(|| not_found(id))?;
        drop(entries);
        self.records.remove(id);
        Ok(entry)
    }

    /// Every sandbox `principal` may see, by id.
    pub fn list(&self, principal: &Principal) -> Vec<Entry> {
        self.sweep();
        self.entries()
            .values()
            .filter(|entry| principal.may_see(entry.record.owner.as_deref()))
            .cloned()
            .collect()
    }

    /// Every sandbox, by id (for the owner's views and shutting down).
    pub fn all(&self) -> Vec<Entry> {
        self.entries().values().cloned().collect()
    }

    /// The live sandbox of `owner` (`None`: the machine's owner) that
    /// holds its named workspace `name`, if one does (one on disk
    /// included: its restore opens the workspace again).
    pub fn workspace_holder(&self, owner: Option<&str>, name: &str) -> Option<String> {
        self.sweep();
        self.entries()
            .values()
            .find(|e| {
                e.ended_at.is_none()
                    && e.record.owner.as_deref() == owner
                    && e.record.workspace == name
            })
            .map(|e| e.record.id.clone())
    }

    /// The ids of `key`'s live sandboxes.
    pub fn owned_by(&self, key: &str) -> Vec<String> {
        self.entries()
            .values()
            .filter(|e| e.record.owner.as_deref() == Some(key) && e.ended_at.is_none())
            .map(|e| e.record.id.clone())
            .collect()
    }

    /// How many of `owner`'s live sandboxes started from its snapshot
    /// `name`.
    pub fn started_from(&self, owner: Option<&str>, name: &str) -> u32 {
        self.sweep();
        let count = self
            .entries()
            .values()
            .filter(|e| {
                e.record.owner.as_deref() == owner
                    && e.ended_at.is_none()
                    && e.record.snapshot == name
            })
            .count();
        u32::try_from(count).unwrap_or(u32::MAX)
    }

    /// What `owner` holds now: its live sandboxes and their memory (a
    /// sandbox on disk holds no memory), plus its creates in flight.
    pub fn holding(&self, owner: Option<&str>) -> Holding {
        self.sweep();
        let mut held = Holding::default();
        for entry in self.entries().values() {
            if entry.record.owner.as_deref() != owner || entry.ended_at.is_some() {
                continue;
            }
            held.sandboxes += 1;
            if !matches!(entry.state(), SandboxState::OnDisk) {
                held.memory_mib += u64::from(entry.record.memory_mib);
            }
        }
        let key = owner.map(Arc::from);
        if let Some(pending) = self.pending().get(&key) {
            held.sandboxes += pending.sandboxes;
            held.memory_mib += pending.memory_mib;
        }
        held
    }

    /// Reserves `count` sandboxes of `memory_mib` each for `principal`
    /// against `quota` (a key's; the owner has none), or refuses with
    /// `QUOTA_EXCEEDED` and the figures.
    pub fn reserve(
        &self,
        principal: &Principal,
        quota: Option<Quota>,
        count: u32,
        memory_mib: u32,
    ) -> Result<Reservation<'_>, Status> {
        let wanted = Holding {
            sandboxes: count,
            memory_mib: u64::from(memory_mib) * u64::from(count),
        };
        let owner: Option<Arc<str>> = principal.key().map(Arc::from);
        // One reservation at a time: the check and the reservation are one
        // step.
        let _one = lock(&self.reserving);
        let now = self.holding(principal.key());
        if let Some(quota) = quota {
            if quota.max_sandboxes > 0 && now.sandboxes + wanted.sandboxes > quota.max_sandboxes {
                return Err(reason::status(
                    ErrorReason::QuotaExceeded,
                    format!(
                        "{principal} may hold {} sandboxes and holds {}; kill one first",
                        quota.max_sandboxes, now.sandboxes
                    ),
                ));
            }
            if quota.max_memory_mib > 0 && now.memory_mib + wanted.memory_mib > quota.max_memory_mib
            {
                return Err(reason::status(
                    ErrorReason::QuotaExceeded,
                    format!(
                        "{principal} may use {} MiB of guest memory and uses {} MiB; {} MiB \
                         more would pass it",
                        quota.max_memory_mib, now.memory_mib, wanted.memory_mib
                    ),
                ));
            }
        }
        let mut pending = self.pending();
        let entry = pending.entry(owner.clone()).or_default();
        entry.sandboxes += wanted.sandboxes;
        entry.memory_mib += wanted.memory_mib;
        Ok(Reservation {
            registry: self,
            owner,
            held: wanted,
        })
    }

    /// Notices sandboxes that ended: their records go from disk, and those
    /// ended longer than [`ENDED_RETENTION`] ago go from the list.
    pub fn sweep(&self) {
        let now = Instant::now();
        let mut gone = Vec::new();
        let mut entries = self.entries();
        entries.retain(|id, entry| {
            if entry.ended_at.is_none() {
                if let SandboxState::Ended(reason) = entry.state() {
                    entry.ended_at = Some(now);
                    // A sandbox let go for the next server keeps its record.
                    if reason != airlock::EndReason::Detached {
                        gone.push(id.clone());
                    }
                }
            }
            entry
                .ended_at
                .is_none_or(|at| now.duration_since(at) < ENDED_RETENTION)
        });
        drop(entries);
        for id in gone {
            tracing::info!(%id, "sandbox ended");
            self.records.remove(&id);
        }
    }
}

/// The one answer for a sandbox that does not exist or is not yours.
pub fn not_found(id: &str) -> Status {
    reason::status(ErrorReason::SandboxNotFound, format!("no sandbox {id}"))
}
