//! [`Claim`]: taking an ownerless sandbox for adoption.
//!
//! A claim holds an exclusive `flock` on `adopt.lock` in the sandbox's
//! state directory for as long as the adoption takes, so that two
//! processes (or two tasks of one) never adopt the same sandbox: the
//! second is refused with [`AdoptError::Busy`], or, once the first has
//! finished, with [`AdoptError::Held`]. Under the lock it checks that the
//! owner is gone (or detached the sandbox), that the adoption record is
//! readable, that the recorded VMM process still runs and that the
//! lifetime ceiling has not passed; then [`Claim::own`] makes the calling
//! process the owner, and [`Claim::give_back`] undoes that if the
//! adoption fails later, leaving the sandbox to the next attempt.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use super::{standing, AdoptError, AdoptRecord, Standing};
use crate::state_dir::owner::{Comparable, OwnerRecord, ProcessId};

/// The lock file an adoption holds.
const LOCK_FILE: &str = "adopt.lock";

/// An ownerless sandbox, locked for adoption by this process.
#[derive(Debug)]
pub(crate) struct Claim {
    id: String,
    dir: PathBuf,
    record: AdoptRecord,
    _lock: Flock<File>,
}

impl Claim {
    /// Claims the sandbox `id` under `base` (see the module docs).
    pub fn take(base: &Path, id: &str) -> Result<Self, AdoptError> {
        let no_such = || AdoptError::NoSuchSandbox {
            id: id.to_owned(),
            base: base.to_owned(),
        };
        if !valid_id(id) {
            return Err(no_such());
        }
        let dir = base.join(id);
        if !dir.is_dir() {
            return Err(no_such());
        }
        let lock_path = dir.join(LOCK_FILE);
        let io = |action, source| AdoptError::Io {
            action,
            path: lock_path.clone(),
            source,
        };
        // Never through a link, and only this user's file: the directory
        // may be shared with the VMM's group.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(&lock_path)
            .map_err(|e| io("open", e))?;
        let ours =
            file.metadata().map_err(|e| io("inspect", e))?.uid() == nix::unistd::geteuid().as_raw();
        if !ours {
            return Err(io(
                "use",
                std::io::Error::other("the lock file belongs to another user"),
            ));
        }
        let lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => lock,
            Err((_, Errno::EWOULDBLOCK)) => return Err(AdoptError::Busy { id: id.to_owned() }),
            Err((_, errno)) => return Err(io("lock", std::io::Error::from(errno))),
        };
        let owner = OwnerRecord::read(&dir).map_err(|source| AdoptError::Owner {
            id: id.to_owned(),
            source,
        })?;
        match owner.comparable_here() {
            Comparable::Yes => {}
            // Every process it names ended with the boot.
            Comparable::OtherBoot => return Err(AdoptError::VmGone { id: id.to_owned() }),
            Comparable::OtherPidNamespace => {
                return Err(AdoptError::OtherPidNamespace { id: id.to_owned() })
            }
        }
        if owner.is_held() {
            return Err(AdoptError::Held {
                id: id.to_owned(),
                pid: owner.owner.pid,
            });
        }
        let record = match standing(&dir) {
            Standing::Waiting(record) => *record,
            Standing::NotAdoptable => return Err(AdoptError::NotAdoptable { id: id.to_owned() }),
            Standing::VmGone => return Err(AdoptError::VmGone { id: id.to_owned() }),
            Standing::LifetimeEnded { limit } => {
                return Err(AdoptError::LifetimeEnded {
                    id: id.to_owned(),
                    limit,
                })
            }
            Standing::Foreign(source) | Standing::Broken(source) => {
                return Err(AdoptError::Record {
                    id: id.to_owned(),
                    source,
                })
            }
        };
        if record.id != id {
            return Err(AdoptError::NotAdoptable { id: id.to_owned() });
        }
        Ok(Claim {
            id: id.to_owned(),
            dir,
            record,
            _lock: lock,
        })
    }

    /// The adoption record as the last owner left it.
    pub fn record(&self) -> &AdoptRecord {
        &self.record
    }

    /// The sandbox's state directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Makes the calling process the sandbox's owner, with `vmm` as its
    /// VMM process: from now on `gc` sees it held.
    pub fn own(&self, vmm: ProcessId) -> Result<(), AdoptError> {
        let fail = |source| AdoptError::Io {
            action: "write",
            path: self.dir.join(crate::state_dir::owner::OWNER_FILE),
            source,
        };
        let mut owner = OwnerRecord::for_current_process().map_err(fail)?;
        owner.vmm.push(vmm);
        owner.write(&self.dir).map_err(fail)
    }

    /// Leaves the sandbox to a later adoption (its owner record detached),
    /// after an adoption that failed past [`own`](Claim::own). A failure is
    /// logged: `gc` then keeps the sandbox as held by this process until it
    /// ends.
    pub fn give_back(&self) {
        let given = OwnerRecord::read(&self.dir)
            .map_err(std::io::Error::other)
            .and_then(|mut owner| {
                owner.detached = true;
                owner.write(&self.dir)
            });
        if let Err(error) = given {
            tracing::warn!(id = self.id, %error, "cannot give the sandbox back after a failed adoption");
        }
    }
}

/// A sandbox id names one directory under the base, nothing else.
fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

#[cfg(test)]
mod tests {
    use super::super::record::tests::sample;
    use super::super::tests::dead_process;
    use super::super::unix_ms;
    use super::*;
    use std::process::Command;
    use std::time::SystemTime;

    const ID: &str = "sandbox-claimed";

    /// An ownerless adoptable sandbox whose "VMM" is a sleeping process.
    fn orphan(base: &Path) -> (PathBuf, std::process::Child) {
        let dir = base.join(ID);
        std::fs::create_dir(&dir).unwrap();
        let vmm = Command::new("sleep").arg("1000").spawn().unwrap();
        let mut owner = OwnerRecord::for_current_process().unwrap();
        owner.owner = dead_process();
        owner.write(&dir).unwrap();
        let mut record = sample();
        record.id = ID.into();
        record.vmm = ProcessId::of(vmm.id()).unwrap();
        record.clock.started_at_unix_ms = unix_ms(SystemTime::now());
        record.write(&dir).unwrap();
        (dir, vmm)
    }

    #[test]
    fn one_claim_at_a_time_then_the_owner_holds_it() {
        let base = tempfile::tempdir().unwrap();
        let (dir, mut vmm) = orphan(base.path());
        let claim = Claim::take(base.path(), ID).unwrap();
        assert!(matches!(
            Claim::take(base.path(), ID),
            Err(AdoptError::Busy { .. })
        ));
        claim.own(claim.record().vmm).unwrap();
        drop(claim);
        let error = Claim::take(base.path(), ID).unwrap_err();
        assert!(
            matches!(error, AdoptError::Held { pid, .. } if pid == std::process::id()),
            "{error}"
        );
        assert_eq!(
            OwnerRecord::read(&dir).unwrap().vmm,
            [ProcessId::of(vmm.id()).unwrap()]
        );
        vmm.kill().unwrap();
        vmm.wait().unwrap();
    }

    #[test]
    fn a_claim_given_back_can_be_taken_again() {
        let base = tempfile::tempdir().unwrap();
        let (_dir, mut vmm) = orphan(base.path());
        let claim = Claim::take(base.path(), ID).unwrap();
        claim.own(claim.record().vmm).unwrap();
        claim.give_back();
        drop(claim);
        assert!(Claim::take(base.path(), ID).is_ok());
        vmm.kill().unwrap();
        vmm.wait().unwrap();
        assert!(matches!(
            Claim::take(base.path(), ID),
            Err(AdoptError::VmGone { .. })
        ));
    }

    #[test]
    fn unknown_odd_or_unadoptable_ids_are_refused() {
        let base = tempfile::tempdir().unwrap();
        for id in ["nope", "../etc", ".hidden", ""] {
            assert!(
                matches!(
                    Claim::take(base.path(), id),
                    Err(AdoptError::NoSuchSandbox { .. })
                ),
                "{id}"
            );
        }
        let plain = base.path().join("sandbox-plain");
        std::fs::create_dir(&plain).unwrap();
        let mut owner = OwnerRecord::for_current_process().unwrap();
        owner.owner = dead_process();
        owner.write(&plain).unwrap();
        assert!(matches!(
            Claim::take(base.path(), "sandbox-plain"),
            Err(AdoptError::NotAdoptable { .. })
        ));
    }
}
