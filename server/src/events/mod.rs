//! Lifecycle events: what happens to the server's sandboxes, numbered,
//! logged and sent to whoever listens.
//!
//! - `event`: [`Event`] (a number that goes on across restarts, the time,
//!   the [`EventKind`], the sandbox and its owner, why, and the kind's
//!   [`Details`]) and the [`Draft`] a handler fills in.
//! - `log`: the events on disk (`<data dir>/events/`), bounded, for
//!   numbering across restarts and replaying what a client missed.
//! - `bus`: [`Events`], the bus in `State::events`: `emit` numbers, logs
//!   and broadcasts, `subscribe` listens; it remembers where each sandbox
//!   was last seen so that each change is one event.
//! - `watcher`: the task that notices what the library did by itself (a
//!   timeout, an idle pause or stop, an exited or hung VM, a call's
//!   auto-resume) within a poll.
//!
//! Handlers emit what they do (create, pause, resume, snapshot, fork,
//! kill) with [`Draft`]s, holding the sandbox meanwhile
//! ([`Events::hold`]); `serve.rs` emits `lost` for a record whose sandbox
//! is gone at start.

mod bus;
mod event;
mod log;
mod watcher;

pub use bus::{Events, Hold, Seen};
pub use event::{Details, Draft, Event, EventKind, PauseMode};
pub use log::EventLogError;
pub use watcher::watch;

use crate::record::Record;

/// The `created` event of the sandbox `record` describes, started as
/// `origin` (`SandboxInfo.origin`'s names).
pub fn created(record: &Record, origin: &str, reason: impl Into<String>) -> Draft {
    Draft::new(EventKind::Created, &record.id, record.owner.as_deref())
        .because(reason)
        .with(Details {
            origin: origin.to_owned(),
            snapshot: record.snapshot.clone(),
            image: record.image.clone(),
            template: record.template.clone(),
            memory_mib: record.memory_mib,
            vcpus: record.vcpus,
            ..Details::default()
        })
}
