//! [`watch`]: the task that turns what the library does by itself into
//! events. The library ends a sandbox at its timeout, on its idle policy,
//! when its VM exits or its agent stops answering, and pauses or resumes
//! one on its idle policy or for a call; the registry learns of it only
//! when asked. Every [`POLL`] the watcher sweeps the registry (so an ended
//! sandbox's record goes promptly too) and shows each sandbox's state to
//! the bus, which emits an event for each change it had not seen.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use crate::state::State;

/// How often the watcher looks.
pub const POLL: Duration = Duration::from_millis(500);

/// Watches the server's sandboxes until the task is ended.
pub async fn watch(state: Arc<State>) {
    let mut ticks = tokio::time::interval(POLL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        look(&state);
    }
}

/// One look at every sandbox.
pub fn look(state: &State) {
    state.registry.sweep();
    let entries = state.registry.all();
    let mut live = HashSet::with_capacity(entries.len());
    for entry in entries {
        let id = &entry.record.id;
        state
            .events
            .observe(id, entry.record.owner.as_deref(), &entry.state());
        live.insert(id.clone());
    }
    state.events.retain(&live);
}
