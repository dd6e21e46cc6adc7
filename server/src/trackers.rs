//! [`Trackers`]: the change trackers of the server's sandboxes, by id, each
//! with its sandbox (`Files.TrackChanges` makes them, `ListChanges` and
//! `DownloadChanges` read them, `StopTracking` and a kill end them).
//!
//! An id is `tracker-` and 64 random bits in hex, from the library's one
//! random source ([`airlock::random`]).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tonic::Status;

use airlock::fs::ChangeTracker;
use airlock_api::limits::MAX_TRACKERS;
use airlock_api::reason;
use airlock_api::v1::ErrorReason;

/// Change trackers by id, each with its sandbox.
#[derive(Debug, Default)]
pub struct Trackers {
    by_id: Mutex<HashMap<String, (String, ChangeTracker)>>,
}

impl Trackers {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, (String, ChangeTracker)>> {
        self.by_id.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `tracker` of `sandbox` under a new id, which it returns;
    /// `GUEST_EXHAUSTED` when the sandbox has [`MAX_TRACKERS`] already.
    pub fn add(&self, sandbox: &str, tracker: ChangeTracker) -> Result<String, Status> {
        let mut trackers = self.lock();
        if trackers.values().filter(|(s, _)| s == sandbox).count() >= MAX_TRACKERS {
            return Err(reason::status(
                ErrorReason::GuestExhausted,
                format!("sandbox {sandbox} has {MAX_TRACKERS} change trackers; stop one first"),
            ));
        }
        let id = new_id()?;
        trackers.insert(id.clone(), (sandbox.to_owned(), tracker));
        Ok(id)
    }

    /// The tracker `id` of `sandbox`.
    pub fn get(&self, sandbox: &str, id: &str) -> Result<ChangeTracker, Status> {
        self.lock()
            .get(id)
            .filter(|(s, _)| s == sandbox)
            .map(|(_, tracker)| tracker.clone())
            .ok_or_else(|| no_tracker(id))
    }

    /// Takes the tracker `id` of `sandbox` out.
    pub fn take(&self, sandbox: &str, id: &str) -> Result<ChangeTracker, Status> {
        let mut trackers = self.lock();
        match trackers.get(id) {
            Some((s, _)) if s == sandbox => Ok(trackers
                .remove(id)
                .map(|(_, tracker)| tracker)
                .ok_or_else(|| no_tracker(id))?),
            _ => Err(no_tracker(id)),
        }
    }

    /// Forgets a sandbox's trackers (it was killed).
    pub fn forget_sandbox(&self, sandbox: &str) {
        self.lock().retain(|_, (s, _)| s != sandbox);
    }
}

/// A new tracker id.
fn new_id() -> Result<String, Status> {
    let random = airlock::random::hex::<8>().map_err(|error| {
        reason::status(
            ErrorReason::Internal,
            format!(
                "cannot make a tracker id: {} is unreadable: {error}",
                airlock::random::SOURCE
            ),
        )
    })?;
    Ok(format!("tracker-{random}"))
}

fn no_tracker(id: &str) -> Status {
    reason::status(ErrorReason::NotFound, format!("no change tracker {id}"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_random_hex_and_unknown_ones_are_not_found() {
        let a = new_id().unwrap();
        let b = new_id().unwrap();
        assert_ne!(a, b);
        let hex = a.strip_prefix("tracker-").unwrap();
        assert_eq!(hex.len(), 16, "{a}");
        assert!(hex
            .bytes()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        let trackers = Trackers::default();
        let missing = trackers.get("sandbox", &a).unwrap_err();
        assert_eq!(missing.code(), tonic::Code::NotFound);
        assert!(trackers.take("sandbox", &a).is_err());
    }
}
