//! [`Events`]: the server's event bus. [`emit`](Events::emit) numbers an
//! event, writes it to the log and sends it to every
//! [`subscribe`](Events::subscribe)r (the `Events.Watch` streams, the
//! webhooks, the usage ledger, the metrics).
//!
//! The bus also knows where each sandbox was last seen (running, paused,
//! ended), so that an event is emitted once per change whoever notices it
//! first: a handler that paused a sandbox, or the watcher that polls for
//! what the library did by itself (an idle pause, a call's auto-resume, a
//! timeout). A handler [`hold`](Events::hold)s a sandbox while it acts on
//! it, and the watcher leaves a held sandbox to the handler.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::broadcast;

use airlock::{EndReason, SandboxState};

use super::log::{EventLog, EventLogError};
use super::{Draft, Event, EventKind, PauseMode};
use crate::convert::now_ms;

/// Events a subscriber may fall behind by before it misses some
/// (`RecvError::Lagged`; the log still has them).
pub const BUS_CAPACITY: usize = 4096;

/// A reason's most bytes (a VM's console tail can be long).
pub const MAX_REASON_BYTES: usize = 4096;

/// Where a sandbox was last seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    Running,
    Paused(PauseMode),
    Ended,
}

impl Seen {
    /// Where a sandbox in library state `state` is.
    pub fn of(state: &SandboxState) -> Seen {
        match state {
            SandboxState::Running => Seen::Running,
            SandboxState::Paused => Seen::Paused(PauseMode::Memory),
            SandboxState::OnDisk => Seen::Paused(PauseMode::Disk),
            SandboxState::Ended(_) => Seen::Ended,
        }
    }
}

/// The kind of event a sandbox's end is, by the library's reason (`None`:
/// it did not end but was let go, for the next server to adopt).
pub fn end_kind(reason: &EndReason) -> Option<EventKind> {
    match reason {
        EndReason::LifetimeExceeded { .. } => Some(EventKind::TimedOut),
        EndReason::Stopped => Some(EventKind::Killed),
        EndReason::Detached => None,
        _ => Some(EventKind::Ended),
    }
}

#[derive(Debug, Default)]
struct Inner {
    log: Option<EventLog>,
    next_seq: u64,
    seen: HashMap<String, Seen>,
    held: HashMap<String, usize>,
}

/// The server's event bus.
#[derive(Debug)]
pub struct Events {
    inner: Mutex<Inner>,
    sender: broadcast::Sender<Event>,
}

impl Default for Events {
    fn default() -> Self {
        Events::in_memory()
    }
}

/// A sandbox held by a handler while it acts on it; dropping it lets the
/// watcher look at the sandbox again.
#[derive(Debug)]
pub struct Hold<'a> {
    events: &'a Events,
    id: String,
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        let mut inner = self.events.inner();
        if let Some(count) = inner.held.get_mut(&self.id) {
            *count -= 1;
            if *count == 0 {
                inner.held.remove(&self.id);
            }
        }
    }
}

fn bounded(mut reason: String) -> String {
    if reason.len() > MAX_REASON_BYTES {
        let mut end = MAX_REASON_BYTES;
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        reason.truncate(end);
    }
    reason
}

impl Events {
    /// A bus with its log in `dir` (`<data dir>/events`): numbers go on
    /// from the log's last.
    pub fn open(dir: &Path) -> Result<Events, EventLogError> {
        let log = EventLog::open(dir)?;
        let events = Events::in_memory();
        {
            let mut inner = events.inner();
            inner.next_seq = log.last_seq() + 1;
            inner.log = Some(log);
        }
        Ok(events)
    }

    /// A bus without a log (numbers from 1).
    pub fn in_memory() -> Events {
        let (sender, _) = broadcast::channel(BUS_CAPACITY);
        Events {
            inner: Mutex::new(Inner {
                next_seq: 1,
                ..Inner::default()
            }),
            sender,
        }
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every event from now on. One that falls [`BUS_CAPACITY`] behind
    /// gets `Lagged` and can read what it missed with
    /// [`after`](Events::after).
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.sender.subscribe()
    }

    /// [`subscribe`](Events::subscribe), with the number of the last event
    /// before it: every later one comes through the receiver.
    pub fn subscribe_at(&self) -> (broadcast::Receiver<Event>, u64) {
        let inner = self.inner();
        (self.sender.subscribe(), inner.next_seq - 1)
    }

    /// The events after `after_seq` still in the log, oldest first, at
    /// most `limit`.
    pub fn after(&self, after_seq: u64, limit: usize) -> Result<Vec<Event>, EventLogError> {
        match &self.inner().log {
            Some(log) => log.after(after_seq, limit),
            None => Ok(Vec::new()),
        }
    }

    /// The newest event's number (0: none yet).
    pub fn last_seq(&self) -> u64 {
        self.inner().next_seq - 1
    }

    /// Numbers, logs and sends `draft`, unless it repeats what is known of
    /// its sandbox (a `resumed` of one seen running, a `paused` of one
    /// seen paused so, anything but `snapshotted` after its end, a second
    /// end). Answers the event sent.
    pub fn emit(&self, draft: Draft) -> Option<Event> {
        let mut inner = self.inner();
        let seen = inner.seen.get(&draft.sandbox_id).copied();
        let after = match draft.kind {
            EventKind::Created => Some(Seen::Running),
            EventKind::Resumed => Some(Seen::Running),
            EventKind::Paused => Some(Seen::Paused(
                draft.details.pause_mode.unwrap_or(PauseMode::Memory),
            )),
            EventKind::Snapshotted | EventKind::Forked => None,
            kind if kind.is_end() => Some(Seen::Ended),
            _ => None,
        };
        let repeat = match (seen, after) {
            (Some(Seen::Ended), _) => draft.kind != EventKind::Snapshotted,
            (Some(before), Some(after)) => before == after && draft.kind != EventKind::Created,
            _ => false,
        };
        if repeat {
            tracing::debug!(kind = %draft.kind, id = draft.sandbox_id, "not repeating an event");
            return None;
        }
        if let Some(after) = after {
            inner.seen.insert(draft.sandbox_id.clone(), after);
        }
        let seq = inner.next_seq;
        inner.next_seq += 1;
        let mut draft = draft;
        draft.reason = bounded(std::mem::take(&mut draft.reason));
        let event = draft.numbered(seq, now_ms());
        if let Some(log) = &mut inner.log {
            if let Err(error) = log.append(&event) {
                tracing::warn!(error = %airlock::error_chain(&error), seq, "cannot log an event");
            }
        }
        // Sent under the lock, so subscribers get events in their order.
        let _ = self.sender.send(event.clone());
        drop(inner);
        tracing::info!(
            seq,
            kind = %event.kind,
            id = event.sandbox_id,
            owner = ?event.owner,
            reason = event.reason,
            "event"
        );
        Some(event)
    }

    /// Holds `id` for a handler acting on it: the watcher leaves it alone
    /// until the hold is dropped.
    pub fn hold(&self, id: &str) -> super::Hold<'_> {
        *self.inner().held.entry(id.to_owned()).or_default() += 1;
        Hold {
            events: self,
            id: id.to_owned(),
        }
    }

    /// Records where `id` is without an event (a sandbox a starting server
    /// found).
    pub fn know(&self, id: &str, seen: Seen) {
        self.inner().seen.insert(id.to_owned(), seen);
    }

    /// What the watcher saw of `id` now, in library state `state`: the
    /// event for a change since it was last seen, unless a handler holds
    /// it. A sandbox first seen alive is only recorded.
    pub fn observe(&self, id: &str, owner: Option<&str>, state: &SandboxState) -> Option<Event> {
        let draft = {
            let mut inner = self.inner();
            if inner.held.contains_key(id) {
                return None;
            }
            let now = Seen::of(state);
            let before = inner.seen.get(id).copied();
            if before == Some(now) {
                return None;
            }
            let draft = match (before, state) {
                (_, SandboxState::Ended(reason)) => {
                    let Some(kind) = end_kind(reason) else {
                        inner.seen.insert(id.to_owned(), Seen::Ended);
                        return None;
                    };
                    Draft::new(kind, id, owner).because(reason.to_string())
                }
                (None, _) | (Some(Seen::Ended), _) => {
                    inner.seen.insert(id.to_owned(), now);
                    return None;
                }
                (Some(_), SandboxState::Running) => Draft::new(EventKind::Resumed, id, owner)
                    .because("resumed for a call made while it was paused"),
                (Some(_), SandboxState::Paused) => Draft::new(EventKind::Paused, id, owner)
                    .because("paused after its idle timeout"),
                (Some(_), SandboxState::OnDisk) => Draft::new(EventKind::Paused, id, owner)
                    .because("saved to disk after its idle timeout"),
            };
            let mode = match now {
                Seen::Paused(mode) => Some(mode),
                _ => None,
            };
            let mut draft = draft;
            draft.details.pause_mode = mode;
            draft
        };
        self.emit(draft)
    }

    /// Forgets the sandboxes not in `live` (ended and gone from the
    /// registry), but for those a handler holds.
    pub fn retain(&self, live: &std::collections::HashSet<String>) {
        let mut inner = self.inner();
        let Inner { seen, held, .. } = &mut *inner;
        seen.retain(|id, _| live.contains(id) || held.contains_key(id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn kinds(events: &[Event]) -> Vec<EventKind> {
        events.iter().map(|e| e.kind).collect()
    }

    #[test]
    fn each_change_is_one_event_whoever_notices_it() {
        let bus = Events::in_memory();
        let mut sent = Vec::new();
        sent.extend(bus.emit(Draft::new(EventKind::Created, "a", Some("k"))));
        // The watcher sees it running: nothing new.
        sent.extend(bus.observe("a", Some("k"), &SandboxState::Running));
        // An idle pause, seen by the watcher once.
        sent.extend(bus.observe("a", Some("k"), &SandboxState::Paused));
        sent.extend(bus.observe("a", Some("k"), &SandboxState::Paused));
        // A handler's resume, then the watcher sees it running.
        sent.extend(bus.emit(Draft::new(EventKind::Resumed, "a", Some("k"))));
        sent.extend(bus.observe("a", Some("k"), &SandboxState::Running));
        // A timeout, seen twice.
        let timeout = SandboxState::Ended(EndReason::LifetimeExceeded {
            limit: Duration::from_secs(2),
        });
        sent.extend(bus.observe("a", Some("k"), &timeout));
        sent.extend(bus.observe("a", Some("k"), &timeout));
        sent.extend(bus.emit(Draft::new(EventKind::Killed, "a", Some("k"))));
        assert_eq!(
            kinds(&sent),
            [
                EventKind::Created,
                EventKind::Paused,
                EventKind::Resumed,
                EventKind::TimedOut
            ]
        );
        let seqs: Vec<u64> = sent.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [1, 2, 3, 4]);
        assert_eq!(sent[1].details.pause_mode, Some(PauseMode::Memory));
        assert!(sent[3].reason.contains("maximum lifetime"));
    }

    #[test]
    fn the_watcher_leaves_a_held_sandbox_to_its_handler() {
        let bus = Events::in_memory();
        bus.know("a", Seen::Running);
        let hold = bus.hold("a");
        let killed = SandboxState::Ended(EndReason::Stopped);
        assert!(bus.observe("a", None, &killed).is_none());
        let event = bus
            .emit(Draft::new(EventKind::Killed, "a", None).because("killed by a call"))
            .unwrap();
        assert_eq!(event.reason, "killed by a call");
        drop(hold);
        assert!(bus.observe("a", None, &killed).is_none());
    }

    #[test]
    fn a_sandbox_first_seen_alive_is_only_recorded_and_a_detached_one_is_no_end() {
        let bus = Events::in_memory();
        assert!(bus.observe("a", None, &SandboxState::OnDisk).is_none());
        assert!(bus
            .observe("a", None, &SandboxState::Ended(EndReason::Detached))
            .is_none());
        let ended = bus.observe(
            "b",
            None,
            &SandboxState::Ended(EndReason::Idle {
                after: Duration::from_secs(1),
            }),
        );
        assert_eq!(ended.map(|e| e.kind), Some(EventKind::Ended));
    }

    #[test]
    fn subscribers_get_events_in_order_and_the_log_numbers_on() {
        let dir = tempfile::tempdir().unwrap();
        let bus = Events::open(dir.path()).unwrap();
        let mut receiver = bus.subscribe();
        bus.emit(Draft::new(EventKind::Created, "a", None));
        bus.emit(Draft::new(EventKind::Snapshotted, "a", None));
        assert_eq!(receiver.try_recv().unwrap().seq, 1);
        assert_eq!(receiver.try_recv().unwrap().kind, EventKind::Snapshotted);
        drop(bus);
        let bus = Events::open(dir.path()).unwrap();
        assert_eq!(bus.last_seq(), 2);
        let event = bus.emit(Draft::new(EventKind::Created, "b", None)).unwrap();
        assert_eq!(event.seq, 3);
        assert_eq!(
            kinds(&bus.after(1, 10).unwrap()),
            [EventKind::Snapshotted, EventKind::Created]
        );
    }

    #[test]
    fn a_long_reason_is_cut_on_a_character() {
        let reason = "é".repeat(MAX_REASON_BYTES);
        let cut = bounded(reason);
        assert!(cut.len() <= MAX_REASON_BYTES);
    }
}
