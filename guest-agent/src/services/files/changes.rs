//! `SnapshotTree` and `TreeChanges`: what a run created, modified and
//! deleted under the roots a caller names.
//!
//! A [`Snapshot`] is, per root, the entries of a depth-first walk (each
//! directory's entries sorted by name, so walk order is the order of
//! `Path`, component by component), each with its type, size, mtime, inode
//! and mode, in a sorted `Vec` searched by binary search: about 100 bytes an
//! entry. A walk stays on its root's filesystem (other mounts are skipped)
//! and stops at a budget of entries; a directory is read at most as far as
//! the budget reaches, so a directory of a million entries costs no more
//! than the budget. What a stopped walk did not see is recorded as its
//! [`Coverage`], and a comparison only speaks about paths both walks
//! covered.
//!
//! [`diff`] walks the roots again, reporting each entry the snapshot covers
//! but does not hold as created and each one whose metadata changed as
//! modified (never a directory: its mtime moves with its entries), then the
//! snapshot's covered entries it did not see as deleted. Changes are handed
//! to a callback as they are found, so memory is the snapshot plus one bit
//! an entry. [`SnapshotStore`] keeps snapshots by id within
//! `MAX_HELD_ENTRIES`, forgetting the oldest first.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use airlock_proto::contract::changes::MAX_HELD_ENTRIES;
use airlock_proto::v1::{ChangeKind, FileChange, FileType};

use super::error::FilesError;

/// What an entry was when a walk saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    kind: FileType,
    size: u64,
    mtime_ns: i64,
    ino: u64,
    mode: u32,
}

impl Meta {
    fn of(meta: &Metadata) -> Meta {
        let kind = if meta.is_dir() {
            FileType::Directory
        } else if meta.file_type().is_symlink() {
            FileType::Symlink
        } else if meta.is_file() {
            FileType::File
        } else {
            FileType::Other
        };
        Meta {
            kind,
            size: meta.size(),
            mtime_ns: meta.mtime().saturating_mul(1_000_000_000) + meta.mtime_nsec(),
            ino: meta.ino(),
            mode: meta.mode(),
        }
    }

    /// Whether `now` is a modification of `self` worth reporting.
    fn modified(&self, now: &Meta) -> bool {
        if self.kind == FileType::Directory && now.kind == FileType::Directory {
            return false;
        }
        self != now
    }
}

/// How far a walk got: everything, or the entries up to `last` (in walk
/// order) except those below a directory it could only read in part.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Coverage {
    complete: bool,
    last: Option<PathBuf>,
    partial: Vec<PathBuf>,
}

impl Coverage {
    /// Whether the walk would have seen `path`.
    pub fn covers(&self, path: &Path) -> bool {
        if self.complete {
            return true;
        }
        let Some(last) = &self.last else {
            return false;
        };
        path <= last.as_path()
            && !self
                .partial
                .iter()
                .any(|dir| path != dir && path.starts_with(dir))
    }
}

/// One root's walk.
#[derive(Debug)]
struct RootSnapshot {
    root: PathBuf,
    /// Sorted by path (walk order).
    entries: Vec<(Box<Path>, Meta)>,
    coverage: Coverage,
}

/// The recorded state of some roots.
#[derive(Debug)]
pub struct Snapshot {
    roots: Vec<RootSnapshot>,
}

impl Snapshot {
    /// Entries recorded.
    pub fn len(&self) -> usize {
        self.roots.iter().map(|r| r.entries.len()).sum()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a walk stopped at its budget.
    pub fn truncated(&self) -> bool {
        self.roots.iter().any(|r| !r.coverage.complete)
    }
}

/// Checks and orders roots: absolute, existing directories, sorted, and
/// without a root inside another on the same filesystem.
pub fn roots(paths: &[String]) -> Result<Vec<(PathBuf, u64)>, FilesError> {
    if paths.is_empty() {
        return Err(FilesError::NoRoots);
    }
    let mut roots = Vec::with_capacity(paths.len());
    for path in paths {
        let root = super::access::absolute(path)?;
        let meta = std::fs::metadata(&root).map_err(|e| FilesError::io("walk", &root, e))?;
        if !meta.is_dir() {
            return Err(FilesError::io(
                "walk",
                &root,
                std::io::Error::from_raw_os_error(nix::libc::ENOTDIR),
            ));
        }
        roots.push((root, meta.dev()));
    }
    roots.sort();
    roots.dedup();
    let mut kept: Vec<(PathBuf, u64)> = Vec::with_capacity(roots.len());
    for (root, dev) in roots {
        let nested = kept
            .iter()
            .any(|(outer, outer_dev)| *outer_dev == dev && root.starts_with(outer));
        if !nested {
            kept.push((root, dev));
        }
    }
    Ok(kept)
}

/// Walks `root` depth-first in sorted order within filesystem `dev`,
/// calling `visit` for each entry (the root first) while `budget` lasts.
/// Returns how far it got.
fn walk(root: &Path, dev: u64, budget: &mut u64, mut visit: impl FnMut(&Path, Meta)) -> Coverage {
    struct Frame {
        dir: PathBuf,
        names: VecDeque<OsString>,
    }
    let mut coverage = Coverage::default();
    let Ok(meta) = std::fs::symlink_metadata(root) else {
        coverage.complete = true;
        return coverage;
    };
    if *budget == 0 {
        return coverage;
    }
    *budget -= 1;
    visit(root, Meta::of(&meta));
    coverage.last = Some(root.to_owned());
    let mut stack = Vec::new();
    if meta.is_dir() {
        let (names, whole) = list(root, *budget);
        if !whole {
            coverage.partial.push(root.to_owned());
        }
        stack.push(Frame {
            dir: root.to_owned(),
            names,
        });
    }
    while let Some(frame) = stack.last_mut() {
        let Some(name) = frame.names.pop_front() else {
            stack.pop();
            continue;
        };
        if *budget == 0 {
            return coverage;
        }
        let path = frame.dir.join(name);
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue; // gone since the listing
        };
        *budget -= 1;
        visit(&path, Meta::of(&meta));
        coverage.last = Some(path.clone());
        if meta.is_dir() && meta.dev() == dev {
            let (names, whole) = list(&path, *budget);
            if !whole {
                coverage.partial.push(path.clone());
            }
            stack.push(Frame { dir: path, names });
        }
    }
    coverage.complete = coverage.partial.is_empty();
    coverage
}

/// A directory's entry names, sorted; at most `budget` (then `false`: the
/// listing is partial). An unreadable directory lists as empty.
fn list(dir: &Path, budget: u64) -> (VecDeque<OsString>, bool) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (VecDeque::new(), true);
    };
    let mut names = Vec::new();
    let mut whole = true;
    for entry in entries {
        let Ok(entry) = entry else { continue };
        if names.len() as u64 >= budget {
            whole = false;
            break;
        }
        names.push(entry.file_name());
    }
    names.sort_unstable();
    (names.into(), whole)
}

/// Records `roots` (from [`roots`]), at most `max_entries` entries.
pub fn snapshot(roots: &[(PathBuf, u64)], max_entries: u64) -> Snapshot {
    let mut budget = max_entries;
    let roots = roots
        .iter()
        .map(|(root, dev)| {
            let mut entries = Vec::new();
            let coverage = walk(root, *dev, &mut budget, |path, meta| {
                entries.push((Box::from(path), meta));
            });
            entries.shrink_to_fit();
            RootSnapshot {
                root: root.clone(),
                entries,
                coverage,
            }
        })
        .collect();
    Snapshot { roots }
}

/// What [`diff`] found besides the changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DiffSummary {
    /// Entries scanned.
    pub scanned: u64,
    /// Changes reported.
    pub reported: u64,
    /// Something was left out.
    pub truncated: bool,
}

fn change(kind: ChangeKind, path: &Path, now: &Meta, before: Option<&Meta>) -> FileChange {
    FileChange {
        kind: kind.into(),
        path: path.to_string_lossy().into_owned(),
        r#type: now.kind.into(),
        size: now.size,
        previous_size: before.map_or(0, |b| b.size),
        mtime_unix_nanos: now.mtime_ns,
    }
}

/// Compares the roots now with `snapshot`, handing each change to
/// `report` (which returns `false` to stop), at most `max_changes` and
/// scanning at most `max_entries`.
pub fn diff(
    snapshot: &Snapshot,
    max_entries: u64,
    max_changes: u64,
    mut report: impl FnMut(FileChange) -> bool,
) -> DiffSummary {
    let mut summary = DiffSummary {
        truncated: snapshot.truncated(),
        ..DiffSummary::default()
    };
    let mut budget = max_entries;
    let mut stopped = false;
    let mut emit = |summary: &mut DiffSummary, stopped: &mut bool, c: FileChange| {
        if *stopped {
            return;
        }
        if summary.reported >= max_changes {
            summary.truncated = true;
            *stopped = true;
            return;
        }
        if report(c) {
            summary.reported += 1;
        } else {
            *stopped = true;
        }
    };
    for root in &snapshot.roots {
        if stopped {
            break;
        }
        let dev = std::fs::metadata(&root.root).map_or(0, |m| m.dev());
        let mut seen = vec![false; root.entries.len()];
        let before = budget;
        let coverage = walk(&root.root, dev, &mut budget, |path, now| {
            let found = root.entries.binary_search_by(|(p, _)| p.as_ref().cmp(path));
            match found {
                Ok(i) => {
                    seen[i] = true;
                    let then = &root.entries[i].1;
                    if then.modified(&now) {
                        let c = change(ChangeKind::Modified, path, &now, Some(then));
                        emit(&mut summary, &mut stopped, c);
                    }
                }
                Err(_) if root.coverage.covers(path) => {
                    emit(
                        &mut summary,
                        &mut stopped,
                        change(ChangeKind::Created, path, &now, None),
                    );
                }
                Err(_) => {}
            }
        });
        summary.scanned += before - budget;
        if !coverage.complete {
            summary.truncated = true;
        }
        for (i, (path, then)) in root.entries.iter().enumerate() {
            if stopped {
                break;
            }
            if !seen[i] && coverage.covers(path) && root.coverage.covers(path) {
                let c = change(ChangeKind::Deleted, path, then, Some(then));
                emit(&mut summary, &mut stopped, c);
            }
        }
    }
    summary
}

/// Snapshots by id, oldest first, within `MAX_HELD_ENTRIES` together.
#[derive(Debug, Default)]
pub struct SnapshotStore {
    inner: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    snapshots: VecDeque<(String, Arc<Snapshot>)>,
    next: u64,
}

impl SnapshotStore {
    fn lock(&self) -> MutexGuard<'_, Held> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `snapshot`, forgetting the oldest ones it does not fit beside;
    /// returns its id.
    pub fn insert(&self, snapshot: Snapshot) -> String {
        let mut held = self.lock();
        let size = snapshot.len() as u64;
        let mut total: u64 = held.snapshots.iter().map(|(_, s)| s.len() as u64).sum();
        while total + size > MAX_HELD_ENTRIES {
            match held.snapshots.pop_front() {
                Some((id, old)) => {
                    tracing::debug!(id, "forgetting a snapshot to make room");
                    total -= old.len() as u64;
                }
                None => break,
            }
        }
        held.next += 1;
        let id = format!("snap-{}", held.next);
        held.snapshots.push_back((id.clone(), Arc::new(snapshot)));
        id
    }

    /// The snapshot `id` names.
    pub fn get(&self, id: &str) -> Result<Arc<Snapshot>, FilesError> {
        self.lock()
            .snapshots
            .iter()
            .find(|(held, _)| held == id)
            .map(|(_, s)| Arc::clone(s))
            .ok_or_else(|| FilesError::NoSnapshot(id.to_owned()))
    }

    /// Forgets `id` (nothing if it is gone already).
    pub fn release(&self, id: &str) {
        self.lock().snapshots.retain(|(held, _)| held != id);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::fs;

    fn changes(
        snapshot: &Snapshot,
        max_entries: u64,
        max_changes: u64,
    ) -> (Vec<String>, DiffSummary) {
        let mut out = Vec::new();
        let summary = diff(snapshot, max_entries, max_changes, |c| {
            let kind = match c.kind() {
                ChangeKind::Created => "+",
                ChangeKind::Modified => "~",
                ChangeKind::Deleted => "-",
                ChangeKind::Unspecified => "?",
            };
            out.push(format!("{kind} {}", c.path));
            true
        });
        (out, summary)
    }

    fn roots_of(dir: &Path) -> Vec<(PathBuf, u64)> {
        roots(&[dir.display().to_string()]).unwrap()
    }

    #[test]
    fn created_modified_and_deleted_are_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fs::write(d.join("kept"), "same").unwrap();
        fs::write(d.join("edited"), "old").unwrap();
        fs::write(d.join("gone"), "bye").unwrap();
        fs::create_dir(d.join("sub")).unwrap();
        fs::write(d.join("sub/old"), "x").unwrap();
        let snap = snapshot(&roots_of(d), 1000);
        assert_eq!(snap.len(), 6);

        fs::write(d.join("edited"), "new text").unwrap();
        fs::remove_file(d.join("gone")).unwrap();
        fs::create_dir(d.join("sub/new")).unwrap();
        fs::write(d.join("sub/new/file"), "n").unwrap();
        fs::remove_file(d.join("sub/old")).unwrap();
        let (list, summary) = changes(&snap, 1000, 1000);
        let p = |s: &str| format!("{}", d.join(s).display());
        assert_eq!(
            list,
            [
                format!("~ {}", p("edited")),
                format!("+ {}", p("sub/new")),
                format!("+ {}", p("sub/new/file")),
                format!("- {}", p("gone")),
                format!("- {}", p("sub/old")),
            ]
        );
        assert!(!summary.truncated);
        assert_eq!(summary.reported, 5);
    }

    #[test]
    fn budgets_truncate_without_false_reports() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fs::create_dir(d.join("many")).unwrap();
        for i in 0..50 {
            fs::write(d.join(format!("many/{i:03}")), "").unwrap();
        }
        fs::write(d.join("z"), "").unwrap();
        // The snapshot stops inside `many`: nothing it did not cover may be
        // reported, though the scan now sees it.
        let snap = snapshot(&roots_of(d), 10);
        assert!(snap.truncated());
        let (list, summary) = changes(&snap, 1000, 1000);
        assert!(list.is_empty(), "{list:?}");
        assert!(summary.truncated);

        // A complete snapshot, a scan that stops: only what was scanned.
        let snap = snapshot(&roots_of(d), 1000);
        for i in 50..80 {
            fs::write(d.join(format!("many/{i:03}")), "").unwrap();
        }
        fs::remove_file(d.join("z")).unwrap();
        let (list, summary) = changes(&snap, 40, 1000);
        assert!(summary.truncated);
        assert!(list.iter().all(|l| l.starts_with('+')), "{list:?}");
        // And the change cap.
        let (list, summary) = changes(&snap, 1000, 7);
        assert_eq!(list.len(), 7);
        assert!(summary.truncated);
        assert_eq!(summary.reported, 7);
    }

    #[test]
    fn directories_are_never_modified_and_roots_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fs::create_dir(d.join("sub")).unwrap();
        let snap = snapshot(&roots_of(d), 100);
        fs::write(d.join("sub/new"), "").unwrap();
        let (list, _) = changes(&snap, 100, 100);
        assert_eq!(list, [format!("+ {}", d.join("sub/new").display())]);

        assert!(matches!(roots(&[]), Err(FilesError::NoRoots)));
        assert!(matches!(
            roots(&["rel".into()]),
            Err(FilesError::RelativePath(_))
        ));
        let nested =
            roots(&[d.join("sub").display().to_string(), d.display().to_string()]).unwrap();
        assert_eq!(nested.len(), 1, "a root inside another is dropped");
    }

    #[test]
    fn the_store_forgets_the_oldest_past_its_budget() {
        let store = SnapshotStore::default();
        let a = store.insert(Snapshot { roots: Vec::new() });
        assert!(store.get(&a).is_ok());
        store.release(&a);
        assert!(matches!(store.get(&a), Err(FilesError::NoSnapshot(_))));
    }
}
