//! [`Keeper`]: an adoptable sandbox's record, kept current while its owner
//! holds it. Every change that a new owner would need (the clock at a
//! pause, resume, save or restore; a new QEMU after a restore; the
//! lifetime ceiling; the network policy) rewrites the file at once, so the
//! record is right whenever the owner dies.
//!
//! A pool's member keeps its record dormant (not written) until it is
//! handed out: a frozen sandbox nobody was given is not worth adopting,
//! and `gc` collects it like any orphan.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::error::RecordError;
use super::record::AdoptRecord;

/// The record of one adoptable sandbox and where it is written.
#[derive(Debug)]
pub(crate) struct Keeper {
    dir: PathBuf,
    record: Mutex<AdoptRecord>,
    /// Whether changes are written (a pool member's are not yet).
    active: AtomicBool,
}

impl Keeper {
    /// A keeper of `record` in the state directory `dir`; nothing is
    /// written until [`activate`](Keeper::activate).
    pub fn new(dir: PathBuf, record: AdoptRecord) -> Self {
        Keeper {
            dir,
            record: Mutex::new(record),
            active: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, AdoptRecord> {
        self.record.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes the record now and every change from now on. Idempotent.
    pub fn activate(&self) -> Result<(), RecordError> {
        let record = self.lock();
        record.write(&self.dir)?;
        self.active.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Whether the record is being written.
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::SeqCst)
    }

    /// Applies `change` to the record and writes it (when active). A write
    /// that fails is logged: the sandbox runs on, but a new owner would
    /// find the record as it was before.
    pub fn update(&self, change: impl FnOnce(&mut AdoptRecord)) {
        let mut record = self.lock();
        change(&mut record);
        if !self.is_active() {
            return;
        }
        if let Err(error) = record.write(&self.dir) {
            tracing::warn!(
                id = record.id,
                error = %crate::error_chain(&error),
                "cannot update the adoption record; a new owner would find it stale"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::record::tests::sample;
    use super::super::record::ADOPT_FILE;
    use super::*;

    #[test]
    fn a_dormant_record_is_written_once_activated_and_then_kept_current() {
        let dir = tempfile::tempdir().unwrap();
        let keeper = Keeper::new(dir.path().to_owned(), sample());
        keeper.update(|record| record.policy.max_lifetime_ms = Some(1));
        assert!(!dir.path().join(ADOPT_FILE).exists(), "dormant");
        keeper.activate().unwrap();
        assert_eq!(
            AdoptRecord::read(dir.path())
                .unwrap()
                .policy
                .max_lifetime_ms,
            Some(1)
        );
        keeper.update(|record| record.policy.max_lifetime_ms = None);
        assert_eq!(
            AdoptRecord::read(dir.path())
                .unwrap()
                .policy
                .max_lifetime_ms,
            None
        );
    }
}
