//! Sandboxes that outlive the process holding them.
//!
//! A sandbox started with [`SandboxBuilder::adoptable`](crate::SandboxBuilder::adoptable)
//! keeps an adoption record (`adopt.json`, see `record`) in its state
//! directory, kept current by its owner (`keeper`). When the owner dies
//! (SIGKILL, a crash, an upgrade) or lets it go on purpose
//! ([`Sandbox::detach`](crate::Sandbox::detach)), its VM runs on: QEMU is in
//! a process group of its own, and `gc` leaves such a sandbox alone while
//! its VM runs and its lifetime ceiling has not passed (see
//! [`crate::gc`]). [`orphans`] lists those waiting, and
//! [`SandboxBuilder::adopt`](crate::SandboxBuilder::adopt) (or
//! [`Sandboxes::adopt`](crate::Sandboxes::adopt)) takes one over: the same
//! QEMU process (checked by pid and start time), a new connection to its
//! agent (which accepts one after the old one broke), the workspace locked
//! again, the watchdog started with what is left of the lifetime, the
//! network enforced again with the same secrets, placeholders and CA. Its
//! programs never stopped and its files are where they were.
//!
//! - `record`: the record and its file.
//! - `keeper`: the record kept current by its owner.
//! - `claim`: the checks an adoption makes, and the lock that keeps two
//!   processes from adopting one sandbox at once.
//! - this file: [`AdoptError`], what an orphan is, [`orphans`].
//!
//! The audit log survives: an adoptable sandbox's is kept in its state
//! directory beside the record (`audit.jsonl`, see
//! [`airlock_gateway::audit`]), and the adopter reads it back and numbers
//! on from its last record. What does not survive an adoption: the fake
//! addresses the guest's DNS answers held (a program that
//! connects to an address resolved before the adoption is refused until it
//! resolves the name again), and connections carried at the moment the
//! owner died.

mod claim;
mod keeper;
mod record;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::state_dir::owner::{Comparable, OwnerRecord};
use crate::state_dir::DIR_PREFIX;

pub(crate) use claim::Claim;
pub(crate) use keeper::Keeper;
#[cfg(test)]
pub(crate) use record::tests::sample as sample_record;
pub(crate) use record::{
    from_unix_ms, ms, unix_ms, AdoptRecord, Hidden, RecordedBackend, RecordedCa, RecordedClock,
    RecordedDefaults, RecordedIdle, RecordedIdlePolicy, RecordedLimits, RecordedNetwork,
    RecordedPausedCalls, RecordedPolicy, RecordedSecret, RECORD_VERSION,
};
pub use record::{RecordError, ADOPT_FILE};

/// Why a sandbox could not be adopted (or detached).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdoptError {
    /// No sandbox by that id under the state directory base.
    #[error("no sandbox {id} under {base}; airlock::adopt::orphans lists the ones to adopt")]
    NoSuchSandbox { id: String, base: PathBuf },
    /// The sandbox was not started adoptable (or is a pool member not yet
    /// handed out).
    #[error(
        "sandbox {id} was not started adoptable (SandboxBuilder::adoptable), so it cannot be \
         adopted or detached"
    )]
    NotAdoptable { id: String },
    /// Its owner still runs and holds it.
    #[error(
        "sandbox {id} is held by process {pid}; adopt it once that process ends or detaches it"
    )]
    Held { id: String, pid: u32 },
    /// Another process (or task) is adopting it right now.
    #[error("sandbox {id} is being adopted by another process")]
    Busy { id: String },
    /// Its VM no longer runs.
    #[error(
        "sandbox {id}'s VM no longer runs; `airlock gc` removes what is left (a sandbox saved \
         to disk is restored, not adopted)"
    )]
    VmGone { id: String },
    /// Its lifetime ceiling passed while nobody held it.
    #[error("sandbox {id} outlived its lifetime ceiling of {limit:?} while nobody held it; `airlock gc` ends it")]
    LifetimeEnded { id: String, limit: Duration },
    /// Its owner ran in another pid namespace: nothing here can tell
    /// whether it lives.
    #[error("sandbox {id}'s owner ran in another pid namespace; adopt it from there")]
    OtherPidNamespace { id: String },
    /// Its owner record cannot be read.
    #[error("sandbox {id}'s owner record")]
    Owner {
        id: String,
        #[source]
        source: crate::state_dir::owner::RecordError,
    },
    /// Its adoption record cannot be read or written.
    #[error("sandbox {id}'s adoption record")]
    Record {
        id: String,
        #[source]
        source: RecordError,
    },
    /// A file of its state directory (the adoption lock, the owner record).
    #[error("cannot {action} {path}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl AdoptError {
    /// What kind of failure this is (see [`ErrorKind`](crate::ErrorKind)).
    pub fn kind(&self) -> crate::ErrorKind {
        use crate::ErrorKind as K;
        match self {
            AdoptError::NoSuchSandbox { .. } | AdoptError::VmGone { .. } => K::NotFound,
            AdoptError::NotAdoptable { .. }
            | AdoptError::Held { .. }
            | AdoptError::LifetimeEnded { .. }
            | AdoptError::OtherPidNamespace { .. } => K::Precondition,
            AdoptError::Busy { .. } => K::Unavailable,
            AdoptError::Owner { .. } | AdoptError::Record { .. } | AdoptError::Io { .. } => {
                K::Internal
            }
        }
    }
}

/// A sandbox waiting for adoption: its owner is gone (or detached it), its
/// VM runs, and its lifetime ceiling has not passed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Orphan {
    /// What [`SandboxBuilder::adopt`](crate::SandboxBuilder::adopt) takes.
    pub id: String,
    /// Its state directory.
    pub dir: PathBuf,
    /// When its life began (a pooled sandbox's: its handout).
    pub started_at: SystemTime,
    /// When its lifetime ceiling ends it, if it has one.
    pub ends_at: Option<SystemTime>,
    /// Whether it was paused (its VM frozen) when its owner let it go; it
    /// is adopted paused.
    pub paused: bool,
    /// The VMM process (QEMU, or the agent on the process backend).
    pub pid: u32,
    /// Its workspace disk, if it has one.
    pub workspace: Option<PathBuf>,
}

/// Where an ownerless sandbox stands, from its adoption record.
#[derive(Debug)]
pub(crate) enum Standing {
    /// It has no record: not adoptable.
    NotAdoptable,
    /// It can be adopted.
    Waiting(Box<AdoptRecord>),
    /// Its VMM process no longer runs.
    VmGone,
    /// Its lifetime ceiling passed while nobody held it.
    LifetimeEnded { limit: Duration },
    /// Its record is of another format (another airlock wrote it) or not
    /// this user's private file: this library cannot judge it.
    Foreign(RecordError),
    /// Its record is broken.
    Broken(RecordError),
}

/// Where the sandbox in `dir`, whose owner is gone or let it go, stands.
pub(crate) fn standing(dir: &Path) -> Standing {
    let record = match AdoptRecord::read(dir) {
        Ok(record) => record,
        Err(error) if error.is_missing() => return Standing::NotAdoptable,
        Err(error @ (RecordError::Version { .. } | RecordError::NotPrivate { .. })) => {
            return Standing::Foreign(error)
        }
        Err(error) => return Standing::Broken(error),
    };
    if !record.vmm.is_running() {
        return Standing::VmGone;
    }
    if let (Some(ends_at), Some(limit)) = (record.ends_at(), record.policy.max_lifetime_ms) {
        if SystemTime::now() >= ends_at {
            return Standing::LifetimeEnded {
                limit: Duration::from_millis(limit),
            };
        }
    }
    Standing::Waiting(Box::new(record))
}

/// Whether the owner record of `dir` leaves the sandbox to a new owner:
/// comparable here, and its owner gone or detached.
fn ownerless(dir: &Path) -> bool {
    OwnerRecord::read(dir)
        .is_ok_and(|owner| owner.comparable_here() == Comparable::Yes && !owner.is_held())
}

/// The sandboxes under `base` (such as
/// [`state_dir::default_base`](crate::state_dir::default_base)) waiting
/// for adoption, by id. A missing `base` holds none.
pub fn orphans(base: &Path) -> Result<Vec<Orphan>, std::io::Error> {
    let entries = match std::fs::read_dir(base) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(error),
    };
    let mut orphans: Vec<Orphan> = entries
        .flatten()
        .filter(|entry| {
            entry.file_name().to_string_lossy().starts_with(DIR_PREFIX)
                && entry.file_type().is_ok_and(|kind| kind.is_dir())
        })
        .map(|entry| entry.path())
        .filter(|dir| ownerless(dir))
        .filter_map(|dir| match standing(&dir) {
            Standing::Waiting(record) => Some(Orphan {
                id: record.id.clone(),
                started_at: record.started_at(),
                ends_at: record.ends_at(),
                paused: record.vmm.is_stopped(),
                pid: record.vmm.pid,
                workspace: record.workspace.clone(),
                dir,
            }),
            _ => None,
        })
        .collect();
    orphans.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(orphans)
}

#[cfg(test)]
mod tests {
    use super::record::tests::sample;
    use super::*;
    use crate::state_dir::owner::ProcessId;
    use std::process::Command;

    /// A process that has exited and been reaped.
    pub(crate) fn dead_process() -> ProcessId {
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        let process = ProcessId::of(pid).unwrap_or(ProcessId { pid, start_time: 1 });
        child.wait().unwrap();
        process
    }

    #[test]
    fn an_ownerless_sandbox_whose_vm_runs_waits_until_its_lifetime_passes() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join(format!("{DIR_PREFIX}waiting"));
        std::fs::create_dir(&dir).unwrap();
        let mut vmm = Command::new("sleep").arg("1000").spawn().unwrap();
        let mut owner = OwnerRecord::for_current_process().unwrap();
        owner.owner = dead_process();
        owner.write(&dir).unwrap();
        let mut record = sample();
        record.id = format!("{DIR_PREFIX}waiting");
        record.vmm = ProcessId::of(vmm.id()).unwrap();
        record.clock.started_at_unix_ms = unix_ms(SystemTime::now());
        record.clock.on_disk_ms = 0;
        record.write(&dir).unwrap();

        let found = orphans(base.path()).unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].id, record.id);
        assert_eq!(found[0].pid, vmm.id());
        assert!(!found[0].paused);
        assert_eq!(found[0].ends_at, record.ends_at());

        // Its lifetime passed: no longer waiting.
        record.clock.started_at_unix_ms -= 3_600_001;
        record.write(&dir).unwrap();
        assert!(matches!(standing(&dir), Standing::LifetimeEnded { .. }));
        assert!(orphans(base.path()).unwrap().is_empty());

        // Its VM is gone.
        record.clock.started_at_unix_ms = unix_ms(SystemTime::now());
        record.write(&dir).unwrap();
        vmm.kill().unwrap();
        vmm.wait().unwrap();
        assert!(matches!(standing(&dir), Standing::VmGone));
        assert!(orphans(base.path()).unwrap().is_empty());
    }

    #[test]
    fn a_held_or_unrecorded_sandbox_is_no_orphan() {
        let base = tempfile::tempdir().unwrap();
        let held = base.path().join(format!("{DIR_PREFIX}held"));
        std::fs::create_dir(&held).unwrap();
        OwnerRecord::for_current_process()
            .unwrap()
            .write(&held)
            .unwrap();
        let mut record = sample();
        record.vmm = ProcessId::current().unwrap();
        record.clock.started_at_unix_ms = unix_ms(SystemTime::now());
        record.write(&held).unwrap();
        assert!(orphans(base.path()).unwrap().is_empty(), "its owner runs");

        // Detached by its (live) owner: waiting.
        let mut owner = OwnerRecord::read(&held).unwrap();
        owner.detached = true;
        owner.write(&held).unwrap();
        assert_eq!(orphans(base.path()).unwrap().len(), 1);

        let plain = base.path().join(format!("{DIR_PREFIX}plain"));
        std::fs::create_dir(&plain).unwrap();
        let mut owner = OwnerRecord::for_current_process().unwrap();
        owner.owner = dead_process();
        owner.write(&plain).unwrap();
        assert!(matches!(standing(&plain), Standing::NotAdoptable));
        assert_eq!(orphans(base.path()).unwrap().len(), 1);
        assert!(orphans(Path::new("/nonexistent/airlock"))
            .unwrap()
            .is_empty());
    }
}
