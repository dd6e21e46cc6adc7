//! [`Relays`]: the ends of programs, as the server's streams see them, for
//! `Wait` calls that arrive while a stream is attached (the agent attaches
//! one client to a program at a time, so a `Wait` listens to the stream
//! that is attached rather than taking its place).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;

use airlock_api::v1 as api;

type Key = (String, u32);

/// Exit watchers per (sandbox, pid).
#[derive(Debug, Default)]
pub struct Relays {
    exits: Mutex<HashMap<Key, watch::Sender<Option<api::ProcessExit>>>>,
}

impl Relays {
    fn exits(&self) -> MutexGuard<'_, HashMap<Key, watch::Sender<Option<api::ProcessExit>>>> {
        self.exits.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A stream of the server is attached to `pid`: from now on its exit
    /// is published here.
    pub fn attached(&self, sandbox: &str, pid: u32) {
        self.exits()
            .entry((sandbox.to_owned(), pid))
            .or_insert_with(|| watch::channel(None).0);
    }

    /// The attached stream of `pid` ended: with its exit, or broken
    /// (`None`: a `Wait` listening must look again).
    pub fn detached(&self, sandbox: &str, pid: u32, exit: Option<api::ProcessExit>) {
        if let Some(sender) = self.exits().remove(&(sandbox.to_owned(), pid)) {
            sender.send_replace(exit);
        }
    }

    /// A watcher of the attached stream of `pid`, if one is attached. It
    /// sees the exit, or its sender dropped when the stream ended without
    /// one.
    pub fn watch(
        &self,
        sandbox: &str,
        pid: u32,
    ) -> Option<watch::Receiver<Option<api::ProcessExit>>> {
        self.exits()
            .get(&(sandbox.to_owned(), pid))
            .map(watch::Sender::subscribe)
    }

    /// Forgets a sandbox's programs.
    pub fn forget_sandbox(&self, sandbox: &str) {
        self.exits().retain(|(id, _), _| id != sandbox);
    }
}
