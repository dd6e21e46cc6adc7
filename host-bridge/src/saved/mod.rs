//! Sandboxes saved to disk: paused with their memory, processes and files
//! written to a snapshot file and their VM ended, so they take no memory;
//! restored into a new QEMU process on the next call, also by another
//! process after the first one (or the host) restarted.
//!
//! - `error`: [`SavedError`].
//! - `file`: one snapshot file, its checked header and atomic writing.
//! - `store`: [`SavedStore`], the directory of saved sandboxes: records,
//!   generations (the newest two are kept, and a load falls back from a
//!   damaged newest one), listing and removal.
//!
//! Saving and restoring the VM itself is `vmm::snapshot`; when a sandbox is
//! saved and restored is `lifecycle::vm`.

mod error;
mod file;
mod store;

use std::path::PathBuf;
use std::time::Duration;

pub use error::SavedError;
pub(crate) use file::{open as open_snapshot, Writing};
pub use file::{SnapshotHeader, SNAPSHOT_FORMAT};
pub(crate) use store::{unix_ms, GoodSnapshot};
pub use store::{SavedDisk, SavedRecord, SavedStore, SavedUsage, SavedVm};

/// Overrides where saved sandboxes are kept.
pub const SAVED_DIR_ENV: &str = "AIRLOCK_SAVED_DIR";

/// Where saved sandboxes are kept unless the builder says otherwise:
/// `$AIRLOCK_SAVED_DIR`, else `saved/` in the Airlock home (which, unlike
/// the runtime state directories, survives a reboot).
pub fn default_dir() -> PathBuf {
    match std::env::var_os(SAVED_DIR_ENV) {
        Some(dir) => PathBuf::from(dir),
        None => crate::artifacts::home().join("saved"),
    }
}

/// What a restore from disk used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restored {
    /// The snapshot generation it loaded.
    pub generation: u64,
    /// Newer generations it refused, with why (a truncated or foreign
    /// file, say): the sandbox then continues from an older snapshot.
    pub refused: Vec<String>,
    /// From the new VM process's start until the guest ran again.
    pub took: Duration,
}
