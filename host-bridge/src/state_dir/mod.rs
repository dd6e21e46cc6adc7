//! A sandbox's private state directory: sockets, console log, VMM logs.
//!
//! Created mode 0700 under `$AIRLOCK_STATE_DIR`, else `$XDG_RUNTIME_DIR/airlock`,
//! else `<tmp>/airlock`, and removed when the sandbox is dropped (the
//! `StateDir` guard; a detached sandbox's directory stays for its next
//! owner, see [`crate::adopt`]). It records its owner (`owner.json`, see
//! [`owner`]): the owning process and, once they run, the VMM processes, so
//! that `gc` can find and end the sandboxes of an owner that died without
//! cleaning up. An adoptable sandbox also keeps `adopt.json` there.
//!
//! When the VMM runs as another (unprivileged) user, the directory is shared
//! with that user's group: owned by the caller, group-writable and sticky
//! (mode 1770), so the VMM creates its sockets and logs in it but can neither
//! rewrite nor remove the owner record.

pub mod owner;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Error, Result};
use owner::{OwnerRecord, ProcessId};

/// The environment variable that overrides the state directories' parent.
pub const STATE_DIR_ENV: &str = "AIRLOCK_STATE_DIR";

/// Every state directory's name starts with this.
pub const DIR_PREFIX: &str = "sandbox-";
/// Random bytes in a new sandbox's id (128 bits, in hex after the prefix):
/// an id is never guessed, so a stranger probing ids learns nothing.
pub const ID_RANDOM_BYTES: usize = 16;

/// The parent of all sandboxes' state directories.
pub fn default_base() -> PathBuf {
    if let Some(dir) = std::env::var_os(STATE_DIR_ENV) {
        return PathBuf::from(dir);
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(run) => PathBuf::from(run).join("airlock"),
        None => std::env::temp_dir().join("airlock"),
    }
}

/// A sandbox's state directory, removed (with everything in it) when
/// dropped, unless [`keep`](StateDir::keep) was called.
#[derive(Debug)]
pub(crate) struct StateDir {
    path: PathBuf,
    keep: AtomicBool,
}

impl StateDir {
    /// The existing directory `path` (an adopted sandbox's), from now on
    /// removed when dropped like one created here.
    pub fn existing(path: PathBuf) -> Self {
        StateDir {
            path,
            keep: AtomicBool::new(false),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// With `keep`, leaves the directory in place when dropped: a detached
    /// sandbox's, for the process that adopts it (or one being adopted,
    /// until the adoption succeeds).
    pub fn keep(&self, keep: bool) {
        self.keep.store(keep, Ordering::SeqCst);
    }
}

impl Drop for StateDir {
    fn drop(&mut self) {
        if self.keep.load(Ordering::SeqCst) {
            return;
        }
        if let Err(error) = std::fs::remove_dir_all(&self.path) {
            if error.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(dir = %self.path.display(), %error, "cannot remove a state directory");
            }
        }
    }
}

/// Creates a fresh private directory under `base` named by a new id
/// ([`DIR_PREFIX`] and [`ID_RANDOM_BYTES`] random bytes in hex), recording
/// the calling process as its owner.
pub(crate) fn create(base: &Path) -> Result<StateDir> {
    let random = crate::random::hex::<ID_RANDOM_BYTES>().map_err(|source| Error::StateDir {
        base: base.to_owned(),
        source,
    })?;
    make(base, &format!("{DIR_PREFIX}{random}"))
}

/// Creates the private directory `base/name` (a sandbox restored under
/// its id), which must not exist yet, recording the calling process as its
/// owner.
pub(crate) fn create_named(base: &Path, name: &str) -> Result<StateDir> {
    make(base, name)
}

/// The private directory `base/name`, made here (never one that exists).
fn make(base: &Path, name: &str) -> Result<StateDir> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let fail = |source| Error::StateDir {
        base: base.to_owned(),
        source,
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(base)
        .map_err(fail)?;
    let mut builder = tempfile::Builder::new();
    builder
        .prefix(name)
        .rand_bytes(0)
        .permissions(std::fs::Permissions::from_mode(0o700));
    let dir = builder.tempdir_in(base).map_err(fail)?;
    OwnerRecord::for_current_process()
        .and_then(|record| record.write(dir.path()))
        .map_err(fail)?;
    Ok(StateDir::existing(dir.keep()))
}

/// Adds a started VMM process to `dir`'s owner record.
pub(crate) fn record_vmm_process(dir: &Path, process: ProcessId) -> std::io::Result<()> {
    let mut record = OwnerRecord::read(dir).map_err(std::io::Error::other)?;
    record.vmm.push(process);
    record.write(dir)
}

/// Marks `dir`'s owner record detached: the owner let the sandbox go on
/// purpose, for a new owner to adopt.
pub(crate) fn detach_owner(dir: &Path) -> std::io::Result<()> {
    let mut record = OwnerRecord::read(dir).map_err(std::io::Error::other)?;
    record.detached = true;
    record.write(dir)
}

/// Lets processes of group `gid` create files in `dir` (mode 1770, group
/// `gid`) without being able to touch the caller's files there.
pub(crate) fn share_with_group(dir: &Path, gid: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::os::unix::fs::chown(dir, None, Some(gid))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1770))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn private_and_removed_on_drop() {
        let base = tempfile::tempdir().unwrap();
        let dir = create(&base.path().join("nested")).unwrap();
        let path = dir.path().to_owned();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o700);
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let random = name.strip_prefix(DIR_PREFIX).unwrap();
        assert_eq!(random.len(), 2 * ID_RANDOM_BYTES, "{name}");
        assert!(
            random
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
            "{name}"
        );
        let other = create(&base.path().join("nested")).unwrap();
        assert_ne!(other.path(), path, "each id is new");
        let record = OwnerRecord::read(&path).unwrap();
        assert_eq!(record.owner.pid, std::process::id());
        assert!(record.owner.is_running());
        assert!(record.vmm.is_empty());
        drop(dir);
        assert!(!path.exists());
    }

    #[test]
    fn a_kept_directory_stays() {
        let base = tempfile::tempdir().unwrap();
        let dir = create(base.path()).unwrap();
        let path = dir.path().to_owned();
        dir.keep(true);
        drop(dir);
        assert!(path.join(owner::OWNER_FILE).is_file());
        drop(StateDir::existing(path.clone()));
        assert!(!path.exists());
    }

    #[test]
    fn a_named_directory_is_made_once() {
        let base = tempfile::tempdir().unwrap();
        let dir = create_named(base.path(), "sandbox-abc").unwrap();
        assert_eq!(dir.path(), base.path().join("sandbox-abc"));
        assert!(OwnerRecord::read(dir.path()).is_ok());
        assert!(create_named(base.path(), "sandbox-abc").is_err());
        drop(dir);
        assert!(create_named(base.path(), "sandbox-abc").is_ok());
    }

    #[test]
    fn vmm_processes_are_added_to_the_record() {
        let base = tempfile::tempdir().unwrap();
        let dir = create(base.path()).unwrap();
        let me = ProcessId::current().unwrap();
        record_vmm_process(dir.path(), me).unwrap();
        record_vmm_process(dir.path(), me).unwrap();
        assert_eq!(OwnerRecord::read(dir.path()).unwrap().vmm, [me, me]);
        // Only the record, no temporary files left.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn sharing_makes_the_directory_sticky_and_group_writable() {
        use std::os::unix::fs::MetadataExt;
        let base = tempfile::tempdir().unwrap();
        let dir = create(base.path()).unwrap();
        let gid = std::fs::metadata(dir.path()).unwrap().gid();
        share_with_group(dir.path(), gid).unwrap();
        let mode = std::fs::metadata(dir.path()).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o1770);
    }
}
