//! Persistent workspaces: a disk that outlives the sandbox.
//!
//! A workspace is a sparse file holding an ext4 filesystem. The guest
//! mounts it as the writable upper layer of its overlay root, so whatever a
//! run writes outside `/tmp` is there in the next run that attaches it.
//!
//! `Workspace::open` creates and formats the file on first use
//! (`mkfs.ext4` on a sparse file of the requested size), refuses a file that
//! is not ext4, and takes an exclusive `flock` that is held as long as the
//! `Workspace` lives: a second sandbox on the same file gets
//! [`WorkspaceError::Busy`] instead of two kernels corrupting one filesystem.
//!
//! A file it creates is the caller's alone (mode 0600), or, when the VMM
//! will run as another user, given to the VMM's group (mode 0660), so that
//! an unprivileged QEMU can read and write it. A file that exists is used
//! as it is: whether the VMM can use it decides who runs the VMM (see
//! `vmm::user`). [`remove`] deletes a workspace no sandbox holds.

mod error;

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

pub use error::WorkspaceError;

/// Size of a new workspace unless configured: 4 GiB (sparse, so it costs
/// only what is written).
pub const DEFAULT_WORKSPACE_BYTES: u64 = 4 << 30;
/// The smallest workspace worth formatting.
const MIN_WORKSPACE_BYTES: u64 = 16 << 20;
/// Offset and value of the ext2/3/4 superblock magic.
const EXT4_MAGIC_OFFSET: u64 = 1024 + 56;
const EXT4_MAGIC: u16 = 0xEF53;

/// An attached workspace: the file, locked for this sandbox's life.
#[derive(Debug)]
pub(crate) struct Workspace {
    path: PathBuf,
    created: bool,
    _lock: Flock<File>,
}

impl Workspace {
    /// Opens (creating and formatting on first use) and locks a workspace.
    /// A file this creates is given to `group` (mode 0660), the group of a
    /// VMM that runs as another user; without one it is mode 0600.
    #[tracing::instrument(skip_all, fields(path = %path.display()))]
    pub fn open(path: &Path, size_bytes: u64, group: Option<u32>) -> Result<Self, WorkspaceError> {
        let path = absolute(path)?;
        let io = |action, source| WorkspaceError::Io {
            action,
            path: path.clone(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|e| io("open", e))?;
        let mut lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => lock,
            Err((_, Errno::EWOULDBLOCK)) => return Err(WorkspaceError::Busy(path)),
            Err((_, errno)) => return Err(io("lock", std::io::Error::from(errno))),
        };
        let len = lock.metadata().map_err(|e| io("inspect", e))?.len();
        let created = len == 0;
        if created {
            if size_bytes < MIN_WORKSPACE_BYTES {
                return Err(WorkspaceError::TooSmall(size_bytes));
            }
            if let Some(gid) = group {
                std::os::unix::fs::fchown(&*lock, None, Some(gid))
                    .and_then(|()| lock.set_permissions(std::fs::Permissions::from_mode(0o660)))
                    .map_err(|e| io("share with the VMM's group", e))?;
            }
            lock.set_len(size_bytes).map_err(|e| io("size", e))?;
            if let Err(error) = format(&path) {
                // Leave an empty file, so the next open formats again.
                let _ = lock.set_len(0);
                return Err(error);
            }
            tracing::info!(bytes = size_bytes, "workspace created");
        } else if !has_ext4_magic(&mut lock).map_err(|e| io("read", e))? {
            return Err(WorkspaceError::NotExt4(path));
        }
        Ok(Self {
            path,
            created,
            _lock: lock,
        })
    }

    /// The workspace file (absolute).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether this open created the workspace.
    pub fn created(&self) -> bool {
        self.created
    }
}

/// Deletes the workspace at `path`, unless a sandbox holds it
/// ([`WorkspaceError::Busy`]); [`WorkspaceError::Missing`] if there is
/// none. The lock is held while the name goes, so no sandbox can be
/// starting on the file being removed; one that opens the name later gets
/// a new workspace.
pub fn remove(path: &Path) -> Result<(), WorkspaceError> {
    let path = absolute(path)?;
    let file = match File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(WorkspaceError::Missing(path))
        }
        Err(source) => {
            return Err(WorkspaceError::Io {
                action: "open",
                path,
                source,
            })
        }
    };
    let _lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => lock,
        Err((_, Errno::EWOULDBLOCK)) => return Err(WorkspaceError::Busy(path)),
        Err((_, errno)) => {
            return Err(WorkspaceError::Io {
                action: "lock",
                path,
                source: std::io::Error::from(errno),
            })
        }
    };
    std::fs::remove_file(&path).map_err(|source| WorkspaceError::Io {
        action: "remove",
        path: path.clone(),
        source,
    })?;
    tracing::info!(path = %path.display(), "workspace removed");
    Ok(())
}

fn absolute(path: &Path) -> Result<PathBuf, WorkspaceError> {
    std::path::absolute(path).map_err(|source| WorkspaceError::Io {
        action: "resolve",
        path: path.to_owned(),
        source,
    })
}

fn has_ext4_magic(file: &mut File) -> std::io::Result<bool> {
    let mut magic = [0u8; 2];
    file.seek(SeekFrom::Start(EXT4_MAGIC_OFFSET))?;
    match file.read_exact(&mut magic) {
        Ok(()) => Ok(u16::from_le_bytes(magic) == EXT4_MAGIC),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}

/// Formats the file as ext4 without touching the (sparse, zero) body.
fn format(path: &Path) -> Result<(), WorkspaceError> {
    let program = mkfs_ext4();
    let output = Command::new(&program)
        .args(["-q", "-F", "-L", "airlock-ws", "-m", "0"])
        .args(["-E", "assume_storage_prezeroed=1"])
        .arg(path)
        .output()
        .map_err(|source| WorkspaceError::Mkfs {
            path: path.to_owned(),
            program: program.clone(),
            source,
        })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(WorkspaceError::Format {
            path: path.to_owned(),
            detail: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }
}

/// `mkfs.ext4` from `PATH`, else from `/usr/sbin` or `/sbin` (not on a
/// normal user's `PATH` on Debian).
pub(crate) fn mkfs_ext4() -> PathBuf {
    let in_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("mkfs.ext4"))
            .find(|p| p.is_file())
    });
    in_path
        .or_else(|| {
            ["/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"]
                .into_iter()
                .map(PathBuf::from)
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| PathBuf::from("mkfs.ext4"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn created_sparse_formatted_and_exclusive() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ws.img");
        let ws = Workspace::open(&path, 64 << 20, None).unwrap();
        assert!(ws.created());
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.len(), 64 << 20);
        use std::os::unix::fs::MetadataExt;
        assert!(meta.blocks() * 512 < 16 << 20, "not sparse: {meta:?}");

        let err = Workspace::open(&path, 64 << 20, None).unwrap_err();
        assert!(matches!(err, WorkspaceError::Busy(_)), "{err}");
        assert!(err.to_string().contains("ws.img"), "{err}");

        drop(ws);
        let again = Workspace::open(&path, 1 << 30, None).unwrap();
        assert!(!again.created());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 64 << 20);
    }

    #[test]
    fn a_new_workspace_is_the_callers_alone_or_its_vmm_groups() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let private = dir.path().join("private.img");
        drop(Workspace::open(&private, 32 << 20, None).unwrap());
        let meta = std::fs::metadata(&private).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600);

        // Root may give a file to any group; anyone to their own.
        let group = if nix::unistd::geteuid().is_root() {
            65534
        } else {
            nix::unistd::getegid().as_raw()
        };
        let shared = dir.path().join("shared.img");
        drop(Workspace::open(&shared, 32 << 20, Some(group)).unwrap());
        let meta = std::fs::metadata(&shared).unwrap();
        assert_eq!((meta.mode() & 0o777, meta.gid()), (0o660, group));

        // An existing file is used as it is.
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o640)).unwrap();
        drop(Workspace::open(&shared, 32 << 20, Some(group)).unwrap());
        assert_eq!(std::fs::metadata(&shared).unwrap().mode() & 0o777, 0o640);
    }

    #[test]
    fn removal_waits_for_no_sandbox_and_names_what_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ws.img");
        let held = Workspace::open(&path, 32 << 20, None).unwrap();
        let err = remove(&path).unwrap_err();
        assert!(matches!(err, WorkspaceError::Busy(_)), "{err}");
        assert!(path.is_file(), "a held workspace stays");
        drop(held);
        remove(&path).unwrap();
        assert!(!path.exists());
        let err = remove(&path).unwrap_err();
        assert!(matches!(err, WorkspaceError::Missing(_)), "{err}");
        assert!(err.to_string().contains("ws.img"), "{err}");
    }

    #[test]
    fn a_file_that_is_not_ext4_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notes.txt");
        std::fs::write(&path, vec![b'x'; 4096]).unwrap();
        let err = Workspace::open(&path, 64 << 20, None).unwrap_err();
        assert!(matches!(err, WorkspaceError::NotExt4(_)), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), vec![b'x'; 4096]);
    }

    #[test]
    fn tiny_sizes_are_refused_and_leave_nothing_formatted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ws.img");
        assert!(matches!(
            Workspace::open(&path, 1024, None),
            Err(WorkspaceError::TooSmall(1024))
        ));
        assert!(Workspace::open(&path, 32 << 20, None).unwrap().created());
    }
}
