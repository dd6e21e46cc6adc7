//! What a run changed: [`Files::track_changes`] records the roots a caller
//! names (`Files.SnapshotTree`), and [`ChangeTracker::changes`] lists what
//! was created, modified and deleted under them since
//! (`Files.TreeChanges`), with sizes; [`Files::download_changes`] brings the
//! created and modified files to the host in one tar stream
//! (`Files.DownloadPaths`). Bounded on both sides: the agent scans and
//! reports at most the contract's `MAX_ENTRIES` and `MAX_CHANGES`, and says
//! when it left something out ([`Changes::truncated`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use airlock_proto::contract::changes::MAX_CHANGES;
use airlock_proto::v1::{
    ChangeKind as ProtoKind, DownloadPathsRequest, FileChange, FileType, SnapshotTreeRequest,
    TreeChangesChunk, TreeChangesRequest, TreeChangesSummary,
};
use airlock_proto::Feature;
use futures::StreamExt;

use super::{guest, transfer, FileKind, Files};
use crate::error::{Error, Result};

/// What happened to an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChangeKind {
    /// It did not exist when the snapshot was taken.
    Created,
    /// A file or symlink whose type, size, mtime, inode or mode changed
    /// (directories are never reported as modified).
    Modified,
    /// It existed then and is gone now.
    Deleted,
}

impl ChangeKind {
    /// `created`, `modified` or `deleted`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Created => "created",
            ChangeKind::Modified => "modified",
            ChangeKind::Deleted => "deleted",
        }
    }
}

/// One entry that changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Created, modified or deleted.
    pub kind: ChangeKind,
    /// The guest path.
    pub path: PathBuf,
    /// What it is now (for a deleted entry: what it was).
    pub file_kind: FileKind,
    /// Its size now (for a deleted entry: the size it had).
    pub size: u64,
    /// Its size when the snapshot was taken (0 for a created entry).
    pub previous_size: u64,
    /// Its mtime now (for a deleted entry: the one it had).
    pub modified: SystemTime,
}

impl Change {
    fn from_proto(change: FileChange) -> Result<Change> {
        let kind = match change.kind() {
            ProtoKind::Created => ChangeKind::Created,
            ProtoKind::Modified => ChangeKind::Modified,
            ProtoKind::Deleted => ChangeKind::Deleted,
            ProtoKind::Unspecified => {
                return Err(Error::Protocol(format!(
                    "a change of no kind for {}",
                    change.path
                )))
            }
        };
        let file_kind = match change.r#type() {
            FileType::File => FileKind::File,
            FileType::Directory => FileKind::Directory,
            FileType::Symlink => FileKind::Symlink,
            FileType::Other | FileType::Unspecified => FileKind::Other,
        };
        let nanos = change.mtime_unix_nanos;
        let modified = if nanos >= 0 {
            SystemTime::UNIX_EPOCH + Duration::from_nanos(nanos.unsigned_abs())
        } else {
            SystemTime::UNIX_EPOCH - Duration::from_nanos(nanos.unsigned_abs())
        };
        Ok(Change {
            kind,
            path: PathBuf::from(change.path),
            file_kind,
            size: change.size,
            previous_size: change.previous_size,
            modified,
        })
    }
}

/// What changed under the tracked roots.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// For each root: created and modified entries in walk order
    /// (depth-first, sorted by name), then its deleted ones.
    pub changes: Vec<Change>,
    /// Something was left out: too many changes, too many entries to scan,
    /// or a snapshot that was itself cut short.
    pub truncated: bool,
    /// Entries the agent scanned.
    pub scanned: u64,
}

impl Changes {
    /// The created and modified entries (what [`Files::download_changes`]
    /// fetches).
    pub fn present(&self) -> impl Iterator<Item = &Change> {
        self.changes
            .iter()
            .filter(|c| c.kind != ChangeKind::Deleted)
    }
}

/// A snapshot of some guest directories, to compare with later.
#[derive(Debug, Clone)]
pub struct ChangeTracker {
    files: Files,
    id: String,
    entries: u64,
    truncated: bool,
}

impl ChangeTracker {
    /// Entries the snapshot recorded.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// Whether the snapshot stopped at its limit (then changes past that
    /// point are not reported).
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// What changed since the snapshot, at most the contract's
    /// `MAX_CHANGES`. The tracker stays usable: call it again after the
    /// next run to see everything since the snapshot.
    pub async fn changes(&self) -> Result<Changes> {
        self.fetch(MAX_CHANGES, false).await
    }

    /// What changed, at most `max_changes`, then forgets the snapshot.
    pub async fn finish(self, max_changes: u64) -> Result<Changes> {
        self.fetch(max_changes, true).await
    }

    async fn fetch(&self, max_changes: u64, release: bool) -> Result<Changes> {
        let mut stream = self
            .files
            .changes_client()?
            .tree_changes(TreeChangesRequest {
                snapshot_id: self.id.clone(),
                max_changes,
                release,
            })
            .await
            .map_err(|s| Error::agent("Files.TreeChanges", s))?
            .into_inner();
        let mut reader = ChangesReader::new(max_changes);
        while let Some(chunk) = stream.next().await {
            reader.push(chunk.map_err(|s| Error::agent("Files.TreeChanges", s))?)?;
        }
        reader.finish()
    }
}

/// Puts the chunks of one `Files.TreeChanges` answer together, holding the
/// agent to what was asked: at most `max_changes` changes (so a hostile
/// guest cannot grow the host's memory without end), each of a known kind,
/// and a summary last.
#[derive(Debug)]
pub(crate) struct ChangesReader {
    max_changes: u64,
    changes: Changes,
    summary: Option<TreeChangesSummary>,
}

impl ChangesReader {
    /// A reader for an answer to a request for at most `max_changes`
    /// (0, or more than `MAX_CHANGES`, asks for that maximum: the
    /// protocol's rule).
    pub(crate) fn new(max_changes: u64) -> Self {
        ChangesReader {
            max_changes: match max_changes {
                0 => MAX_CHANGES,
                asked => asked.min(MAX_CHANGES),
            },
            changes: Changes::default(),
            summary: None,
        }
    }

    /// Takes the next chunk.
    pub(crate) fn push(&mut self, chunk: TreeChangesChunk) -> Result<()> {
        if self.summary.is_some() {
            return Err(Error::Protocol("changes after the summary".into()));
        }
        let total = self.changes.changes.len() as u64 + chunk.changes.len() as u64;
        if total > self.max_changes {
            return Err(Error::Protocol(format!(
                "the agent sent {total} changes; {} were asked for",
                self.max_changes
            )));
        }
        for change in chunk.changes {
            self.changes.changes.push(Change::from_proto(change)?);
        }
        self.summary = chunk.summary;
        Ok(())
    }

    /// The changes, once the answer has ended.
    pub(crate) fn finish(self) -> Result<Changes> {
        let summary = self
            .summary
            .ok_or_else(|| Error::Protocol("the changes ended without a summary".into()))?;
        let mut changes = self.changes;
        changes.truncated = summary.truncated;
        changes.scanned = summary.scanned;
        Ok(changes)
    }
}

impl Files {
    fn changes_client(
        &self,
    ) -> Result<airlock_proto::v1::files_client::FilesClient<crate::lifecycle::channel::AgentChannel>>
    {
        self.features.require(Feature::TreeChanges)?;
        Ok(self.client.clone())
    }

    /// Records the guest directories `roots` (absolute: `/root`, `/tmp`,
    /// the workspace...) so that [`ChangeTracker::changes`] can tell what a
    /// run created, modified and deleted under them. Each root is walked
    /// within its own filesystem (name other mounts as roots of their own).
    pub async fn track_changes<I, P>(&self, roots: I) -> Result<ChangeTracker>
    where
        I: IntoIterator<Item = P>,
        P: AsRef<Path>,
    {
        let roots = roots
            .into_iter()
            .map(|root| guest(root.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        let answer = self
            .changes_client()?
            .snapshot_tree(SnapshotTreeRequest {
                roots,
                max_entries: 0,
            })
            .await
            .map_err(|s| Error::agent("Files.SnapshotTree", s))?
            .into_inner();
        Ok(ChangeTracker {
            files: self.clone(),
            id: answer.id,
            entries: answer.entries,
            truncated: answer.truncated,
        })
    }

    /// Downloads the created and modified entries of `changes` into the
    /// host directory `host_dir`, each under its guest path (`/tmp/out.txt`
    /// lands in `host_dir/tmp/out.txt`), in one tar stream; returns the
    /// number of entries written. Entries gone since are skipped.
    pub async fn download_changes(
        &self,
        changes: &Changes,
        host_dir: impl AsRef<Path>,
    ) -> Result<u64> {
        let paths: Vec<&Path> = changes.present().map(|c| c.path.as_path()).collect();
        if paths.is_empty() {
            tokio::fs::create_dir_all(host_dir.as_ref())
                .await
                .map_err(|e| super::FsError::local("create", host_dir.as_ref(), e))?;
            return Ok(0);
        }
        self.download_paths(paths, host_dir).await
    }

    /// The listed guest files, symlinks and directories (a directory
    /// alone, not its contents) as one tar stream, each entry under its
    /// guest path without the leading `/`, for a caller that passes it on.
    pub async fn download_paths_tar<I, P>(&self, paths: I) -> Result<super::ReadStream>
    where
        I: IntoIterator<Item = P>,
        P: AsRef<Path>,
    {
        let paths = paths
            .into_iter()
            .map(|path| guest(path.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        let stream = self
            .changes_client()?
            .download_paths(DownloadPathsRequest { paths })
            .await
            .map_err(|s| Error::agent("Files.DownloadPaths", s))?
            .into_inner();
        Ok(super::ReadStream::new("Files.DownloadPaths", stream))
    }

    /// Downloads the listed guest files, symlinks and directories (a
    /// directory alone, not its contents) into `host_dir`, each under its
    /// guest path, in one tar stream; returns the number of entries.
    pub async fn download_paths<I, P>(&self, paths: I, host_dir: impl AsRef<Path>) -> Result<u64>
    where
        I: IntoIterator<Item = P>,
        P: AsRef<Path>,
    {
        let paths = paths
            .into_iter()
            .map(|path| guest(path.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        let stream = self
            .changes_client()?
            .download_paths(DownloadPathsRequest { paths })
            .await
            .map_err(|s| Error::agent("Files.DownloadPaths", s))?
            .into_inner();
        transfer::extract_stream("Files.DownloadPaths", stream, host_dir.as_ref()).await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn changes_come_from_the_protocol_with_their_kind() {
        let change = Change::from_proto(FileChange {
            kind: ProtoKind::Modified.into(),
            path: "/tmp/a".into(),
            r#type: FileType::File.into(),
            size: 8,
            previous_size: 3,
            mtime_unix_nanos: 1_000_000_000,
        })
        .unwrap();
        assert_eq!(change.kind, ChangeKind::Modified);
        assert_eq!(change.file_kind, FileKind::File);
        assert_eq!((change.size, change.previous_size), (8, 3));
        assert_eq!(
            change.modified,
            SystemTime::UNIX_EPOCH + Duration::from_secs(1)
        );
        assert!(Change::from_proto(FileChange::default()).is_err());
    }

    fn chunk(paths: &[&str], summary: bool) -> TreeChangesChunk {
        TreeChangesChunk {
            changes: paths
                .iter()
                .map(|path| FileChange {
                    kind: ProtoKind::Created.into(),
                    path: (*path).into(),
                    r#type: FileType::File.into(),
                    ..FileChange::default()
                })
                .collect(),
            summary: summary.then_some(TreeChangesSummary {
                truncated: true,
                scanned: 5,
                reported: paths.len() as u64,
            }),
        }
    }

    #[test]
    fn chunks_make_one_list_with_the_summary() {
        let mut reader = ChangesReader::new(0);
        reader.push(chunk(&["/tmp/a", "/tmp/b"], false)).unwrap();
        reader.push(chunk(&["/tmp/c"], true)).unwrap();
        let changes = reader.finish().unwrap();
        assert_eq!(changes.changes.len(), 3);
        assert_eq!(changes.changes[2].path, Path::new("/tmp/c"));
        assert!(changes.truncated);
        assert_eq!(changes.scanned, 5);

        let mut after = ChangesReader::new(0);
        after.push(chunk(&[], true)).unwrap();
        assert!(after.push(chunk(&["/tmp/late"], false)).is_err());
        assert!(ChangesReader::new(0).finish().is_err(), "no summary");
    }

    /// Found by the `agent_files` fuzz target: the host took whatever
    /// number of changes the agent sent, so a hostile guest could grow the
    /// host's memory without end; it now takes at most what it asked for.
    #[test]
    fn more_changes_than_asked_for_are_refused() {
        let mut reader = ChangesReader::new(3);
        reader.push(chunk(&["/tmp/a", "/tmp/b"], false)).unwrap();
        let error = reader.push(chunk(&["/tmp/c", "/tmp/d"], true)).unwrap_err();
        assert!(error.to_string().contains("3 were asked for"), "{error}");
        // Asking for none, or for more than the maximum, asks for the maximum.
        assert_eq!(ChangesReader::new(0).max_changes, MAX_CHANGES);
        assert_eq!(ChangesReader::new(u64::MAX).max_changes, MAX_CHANGES);
    }
}
