//! Replacing a file of an on-disk store so that a reader, or the host after
//! a crash, finds either the old file or the new one, never a part of one.
//!
//! Every store of the workspace (the adoption and owner records of a state
//! directory, saved sandboxes and their snapshots, templates and their
//! build cache, the server's sandbox records and keys, the image store's
//! names and images) writes through this crate, in one way:
//!
//! 1. a temporary file in the target's own directory (a fresh name, made
//!    with `O_EXCL`, so never a file someone else placed there), created
//!    with the [`Mode`] asked for, never the old file's mode or owner;
//! 2. the bytes written, then the file synced (`fsync`);
//! 3. renamed over the target (atomic within one directory);
//! 4. the directory synced, so the new name survives a crash.
//!
//! A write that fails or is dropped before [`AtomicFile::commit`] removes
//! its temporary file and leaves the target as it was. The steps are the
//! `atomic-write-file` crate's; this crate fixes its options for the
//! stores ([`AtomicFile::create`]). [`rename`] moves something completed
//! elsewhere (a staged directory, a disk a VM wrote) into place and syncs
//! the directory the same way.

#![forbid(unsafe_code)]

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

use std::os::unix::fs::OpenOptionsExt as _;

use atomic_write_file::unix::OpenOptionsExt as _;
use atomic_write_file::AtomicWriteFile;

/// Who may read and write a file the store makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Its owner only (0600): records that hold secrets or that other
    /// users must not change.
    Private,
    /// As [`File::create`] makes files: 0666 less the process's umask.
    Default,
}

impl Mode {
    fn bits(self) -> u32 {
        match self {
            Mode::Private => 0o600,
            Mode::Default => 0o666,
        }
    }
}

/// Writes `bytes` as the file `path`, replacing it whole (see the crate's
/// steps).
pub fn write(path: &Path, bytes: &[u8], mode: Mode) -> io::Result<()> {
    let mut file = AtomicFile::create(path, mode)?;
    file.write_all(bytes)?;
    file.commit()
}

/// A file being written under a temporary name beside its target, for
/// writers that stream (or that hand the file to another process, as a
/// snapshot's QEMU): [`commit`](AtomicFile::commit) replaces the target;
/// dropping it uncommitted leaves the target as it was.
#[derive(Debug)]
pub struct AtomicFile {
    inner: AtomicWriteFile,
}

impl AtomicFile {
    /// Starts replacing `path`: a new, empty file of `mode` in its
    /// directory, open for reading and writing, which no one else holds.
    pub fn create(path: &Path, mode: Mode) -> io::Result<Self> {
        let inner = AtomicWriteFile::options()
            .read(true)
            .mode(mode.bits())
            .preserve_mode(false)
            .preserve_owner(false)
            .open(path)?;
        Ok(AtomicFile { inner })
    }

    /// The temporary file, to write through (`&File` is [`Write`]) or to
    /// pass on.
    pub fn file(&self) -> &File {
        self.inner.as_file()
    }

    /// Syncs the file, renames it over the target and syncs the directory.
    pub fn commit(self) -> io::Result<()> {
        self.inner.commit()
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Moves `from`, a file or directory completed and synced by its writer,
/// to `to` in the same file system (replacing a file, or an empty
/// directory, there), then syncs `to`'s directory so the move survives a
/// crash.
pub fn rename(from: &Path, to: &Path) -> io::Result<()> {
    std::fs::rename(from, to)?;
    sync_dir(to)
}

/// Syncs the directory that holds `path`.
fn sync_dir(path: &Path) -> io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    fn mode_of(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_write_makes_the_file_with_its_mode_and_nothing_beside_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("record.json");
        write(&path, b"{\"a\":1}\n", Mode::Private).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"{\"a\":1}\n");
        assert_eq!(mode_of(&path), 0o600);
        assert_eq!(names(dir.path()), ["record.json"]);
    }

    #[test]
    fn a_write_replaces_the_old_file_whole_and_takes_the_mode_asked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.json");
        std::fs::write(&path, vec![b'x'; 10_000]).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        write(&path, b"short", Mode::Private).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"short");
        // The old file's mode is not carried over to a private record.
        assert_eq!(mode_of(&path), 0o600);
        assert_eq!(names(dir.path()), ["keys.json"]);
    }

    #[test]
    fn an_uncommitted_write_keeps_the_old_file_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("snapshot-1");
        write(&path, b"old", Mode::Private).unwrap();
        let mut file = AtomicFile::create(&path, Mode::Private).unwrap();
        file.write_all(b"half of the new").unwrap();
        // Not there yet: a reader still sees the old file.
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        drop(file);
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        assert_eq!(names(dir.path()), ["snapshot-1"]);
    }

    #[test]
    fn a_failed_write_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing").join("record.json");
        assert!(write(&path, b"x", Mode::Default).is_err());
        assert!(names(dir.path()).is_empty());
    }

    #[test]
    fn a_reader_sees_the_old_file_or_the_new_one_never_a_part() {
        const SIZE: usize = 256 << 10;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("names");
        write(&path, &vec![b'a'; SIZE], Mode::Default).unwrap();
        let writer = {
            let path = path.clone();
            std::thread::spawn(move || {
                for round in 0..40 {
                    let byte = if round % 2 == 0 { b'b' } else { b'a' };
                    write(&path, &vec![byte; SIZE], Mode::Default).unwrap();
                }
            })
        };
        while !writer.is_finished() {
            let bytes = std::fs::read(&path).unwrap();
            assert_eq!(bytes.len(), SIZE);
            assert!(bytes.iter().all(|&b| b == bytes[0]), "a torn read");
        }
        writer.join().unwrap();
        assert_eq!(names(dir.path()), ["names"]);
    }

    #[test]
    fn a_default_file_follows_the_umask_as_file_create_does() {
        let dir = tempfile::tempdir().unwrap();
        let ours = dir.path().join("ours");
        let theirs = dir.path().join("theirs");
        write(&ours, b"x", Mode::Default).unwrap();
        File::create(&theirs).unwrap();
        assert_eq!(mode_of(&ours), mode_of(&theirs));
    }

    #[test]
    fn rename_moves_a_finished_directory_into_place() {
        let dir = tempfile::tempdir().unwrap();
        let staged = dir.path().join(".staged");
        std::fs::create_dir(&staged).unwrap();
        write(&staged.join("meta.json"), b"{}", Mode::Default).unwrap();
        let target = dir.path().join("template");
        rename(&staged, &target).unwrap();
        assert_eq!(std::fs::read(target.join("meta.json")).unwrap(), b"{}");
        assert_eq!(names(dir.path()), ["template"]);
    }
}
