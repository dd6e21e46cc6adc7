//! What the guest says about a file ([`Metadata`]) and about a change
//! ([`WatchEvent`]), plus the options of a write ([`WriteOptions`]).

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use airlock_proto::v1::{FileInfo, FileType, WatchEventKind};

/// The kind of a guest file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A regular file.
    File,
    /// A directory.
    Directory,
    /// A symbolic link (not followed).
    Symlink,
    /// A device, socket, fifo, or something the agent did not name.
    Other,
}

/// A guest file's metadata, as `lstat` sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    /// The guest path.
    pub path: PathBuf,
    /// File, directory, symlink ...
    pub kind: FileKind,
    /// Size in bytes.
    pub size: u64,
    /// Permission bits (`0o7777`).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Last modification.
    pub modified: SystemTime,
    /// Where a symlink points.
    pub symlink_target: Option<PathBuf>,
}

impl Metadata {
    pub(crate) fn from_proto(info: FileInfo) -> Self {
        let kind = match info.r#type() {
            FileType::File => FileKind::File,
            FileType::Directory => FileKind::Directory,
            FileType::Symlink => FileKind::Symlink,
            FileType::Other | FileType::Unspecified => FileKind::Other,
        };
        let nanos = info.mtime_unix_nanos;
        let modified = if nanos >= 0 {
            SystemTime::UNIX_EPOCH + Duration::from_nanos(nanos.unsigned_abs())
        } else {
            SystemTime::UNIX_EPOCH - Duration::from_nanos(nanos.unsigned_abs())
        };
        Metadata {
            path: PathBuf::from(info.path),
            kind,
            size: info.size,
            mode: info.mode,
            uid: info.uid,
            gid: info.gid,
            modified,
            symlink_target: (!info.symlink_target.is_empty())
                .then(|| PathBuf::from(info.symlink_target)),
        }
    }

    /// Whether this is a directory.
    pub fn is_dir(&self) -> bool {
        self.kind == FileKind::Directory
    }
}

/// What happened to an entry below a watched directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchKind {
    /// Created.
    Create,
    /// Written to.
    Modify,
    /// Removed.
    Delete,
    /// Renamed away (paired with `RenameTo` by `cookie`).
    RenameFrom,
    /// Renamed here.
    RenameTo,
}

/// One change reported by [`Files::watch`](super::Files::watch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchEvent {
    /// What happened.
    pub kind: WatchKind,
    /// The guest path it happened to.
    pub path: PathBuf,
    /// Whether the entry is a directory.
    pub is_dir: bool,
    /// Pairs the two halves of a rename.
    pub cookie: u32,
}

impl WatchEvent {
    pub(crate) fn from_proto(e: airlock_proto::v1::WatchEvent) -> Option<Self> {
        let kind = match e.kind() {
            WatchEventKind::Create => WatchKind::Create,
            WatchEventKind::Modify => WatchKind::Modify,
            WatchEventKind::Delete => WatchKind::Delete,
            WatchEventKind::RenameFrom => WatchKind::RenameFrom,
            WatchEventKind::RenameTo => WatchKind::RenameTo,
            WatchEventKind::Unspecified => return None,
        };
        Some(WatchEvent {
            kind,
            path: PathBuf::from(e.path),
            is_dir: e.is_dir,
            cookie: e.cookie,
        })
    }
}

/// How [`Files::write_with`](super::Files::write_with) writes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteOptions {
    pub(crate) mode: Option<u32>,
    pub(crate) user: Option<String>,
    pub(crate) no_parents: bool,
    pub(crate) append: bool,
}

impl WriteOptions {
    /// Replace atomically, mode `0o644`, owned by root, parents created.
    pub fn new() -> Self {
        Self::default()
    }

    /// Permission bits of the file.
    pub fn mode(mut self, mode: u32) -> Self {
        self.mode = Some(mode);
        self
    }

    /// Write as this guest user (`name`, `uid`, `name:group`, `uid:gid`):
    /// the user must be allowed to write there, and owns the result.
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// Fail instead of creating missing parent directories.
    pub fn no_parents(mut self) -> Self {
        self.no_parents = true;
        self
    }

    /// Append in place instead of replacing atomically.
    pub fn append(mut self) -> Self {
        self.append = true;
        self
    }
}
