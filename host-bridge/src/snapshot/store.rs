//! The snapshot store on disk (the layout is in the module docs).

use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use airlock_atomic_file::Mode;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::SnapshotStoreError as Error;
use crate::saved::{self, SavedVm};
use crate::template::{FileId, TemplateStore};

/// Bumped when what `meta.json` holds changes incompatibly.
pub const SNAPSHOT_META_FORMAT: u32 = 1;

const META: &str = "meta.json";
const MACHINE: &str = "machine";
const ROOT: &str = "root.ext4";
const CLONES: &str = "clones";
const TAKING: &str = ".taking-";
/// The disk id of a sandbox's root image (`vmm::Disk`).
const ROOT_DISK: &str = "root";

/// Tells apart the snapshots one process takes at once.
static TAKINGS: AtomicU64 = AtomicU64::new(0);

/// What `meta.json` records of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotMeta {
    pub format: u32,
    /// The SHA-256 (hex) of the saved stream.
    pub id: String,
    /// The machine QEMU runs (its root disk the snapshot's pinned copy).
    pub vm: SavedVm,
    /// The QEMU version that wrote the stream: only that version loads it.
    pub qemu_version: String,
    /// The agent in the guest, as it answered.
    pub agent_version: String,
    pub protocol_revision: u32,
    /// The sandbox it was taken from.
    pub source: String,
    /// The snapshot that sandbox itself started from, if any.
    pub parent: Option<String>,
    /// What its sandboxes' programs get unless they say otherwise: the
    /// source's default user, directory and environment.
    pub user: Option<String>,
    pub cwd: Option<String>,
    pub env: Vec<(String, String)>,
    pub created_unix_ms: u64,
    /// How long the source was stopped while its memory was copied.
    pub paused_ms: u64,
    /// The saved stream's length in bytes.
    pub stream_bytes: u64,
}

/// A complete snapshot in a [`SnapshotStore`].
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    dir: PathBuf,
    meta: SnapshotMeta,
}

impl Snapshot {
    /// Its content id (the SHA-256 of the saved stream).
    pub fn id(&self) -> &str {
        &self.meta.id
    }

    pub fn meta(&self) -> &SnapshotMeta {
        &self.meta
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The saved VM.
    pub fn machine_path(&self) -> PathBuf {
        self.dir.join(MACHINE)
    }

    /// The template store holding its machine ready to clone, per QEMU.
    pub fn clones(&self) -> TemplateStore {
        TemplateStore::new(self.dir.join(CLONES))
    }

    /// The key its clones' template has under the QEMU binary `qemu`: the
    /// snapshot's id and that binary (a new QEMU makes a new one from the
    /// saved stream, or refuses it when that QEMU cannot load the stream).
    pub fn clone_key(&self, qemu: &FileId) -> String {
        let json = serde_json::to_vec(&(&self.meta.id, qemu)).unwrap_or_default();
        Sha256::digest(&json)[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// Bytes it takes on disk: the saved stream, the memory files of its
    /// clones' templates (sparse) and its root image where it holds the
    /// only link to it (a copy; a hard link to an image still in the
    /// store costs nothing more).
    pub fn disk_bytes(&self) -> u64 {
        let root = self.dir.join(ROOT);
        let own_root = std::fs::metadata(&root)
            .map(|meta| {
                if meta.nlink() == 1 {
                    meta.blocks() * 512
                } else {
                    0
                }
            })
            .unwrap_or(0);
        allocated(&self.dir).saturating_sub(allocated_file(&root)) + own_root
    }
}

/// The snapshots in one directory.
#[derive(Debug, Clone)]
pub struct SnapshotStore {
    dir: PathBuf,
}

impl SnapshotStore {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        SnapshotStore { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Makes the directory: searchable by the VMM user (which maps the
    /// memory files and opens the root images), not listable.
    fn ensure(&self) -> Result<(), Error> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o711)
            .create(&self.dir)
            .map_err(Error::io(&self.dir))?;
        std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o711))
            .map_err(Error::io(&self.dir))
    }

    /// Starts taking a snapshot: a fresh directory for it.
    pub fn begin(&self) -> Result<Taking, Error> {
        self.ensure()?;
        let dir = self.dir.join(format!(
            "{TAKING}{}-{}",
            std::process::id(),
            TAKINGS.fetch_add(1, Ordering::Relaxed)
        ));
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(Error::io(&dir))?;
        }
        std::fs::DirBuilder::new()
            .mode(0o711)
            .create(&dir)
            .map_err(Error::io(&dir))?;
        Ok(Taking {
            dir,
            store: self.dir.clone(),
            committed: false,
        })
    }

    /// The snapshot `id`, checked.
    pub fn get(&self, id: &str) -> Result<Snapshot, Error> {
        if !valid_id(id) {
            return Err(Error::NotFound(id.to_owned()));
        }
        let dir = self.dir.join(id);
        let path = dir.join(META);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::NotFound(id.to_owned()))
            }
            Err(e) => return Err(Error::io(&path)(e)),
        };
        let corrupt = |reason: String| Error::Corrupt {
            id: id.to_owned(),
            reason,
        };
        let meta: SnapshotMeta =
            serde_json::from_slice(&bytes).map_err(|e| corrupt(format!("{META}: {e}")))?;
        if meta.format != SNAPSHOT_META_FORMAT {
            return Err(corrupt(format!(
                "format {} (this build reads format {SNAPSHOT_META_FORMAT})",
                meta.format
            )));
        }
        if meta.id != id {
            return Err(corrupt(format!("{META} names {}", meta.id)));
        }
        Ok(Snapshot { dir, meta })
    }

    /// Every readable snapshot, by id; unreadable ones are logged and left
    /// out.
    pub fn list(&self) -> Result<Vec<Snapshot>, Error> {
        let read = match std::fs::read_dir(&self.dir) {
            Ok(read) => read,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io(&self.dir)(e)),
        };
        let mut snapshots = Vec::new();
        for entry in read.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !valid_id(&name) {
                continue;
            }
            match self.get(&name) {
                Ok(snapshot) => snapshots.push(snapshot),
                Err(error) => {
                    tracing::warn!(id = name, error = %crate::error_chain(&error), "snapshot left out");
                }
            }
        }
        snapshots.sort_by(|a, b| a.meta.id.cmp(&b.meta.id));
        Ok(snapshots)
    }

    /// Removes the snapshot `id`; `false` when there was none. Sandboxes
    /// started from it run on: they keep their mapping of its memory file.
    pub fn remove(&self, id: &str) -> Result<bool, Error> {
        if !valid_id(id) {
            return Ok(false);
        }
        let dir = self.dir.join(id);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::io(&dir)(e)),
        }
    }

    /// Removes what takes that never completed left (their process is
    /// gone); returns how many.
    pub fn collect_abandoned(&self) -> usize {
        let Ok(read) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        read.flatten()
            .filter(|entry| {
                let name = entry.file_name().to_string_lossy().into_owned();
                let Some(rest) = name.strip_prefix(TAKING) else {
                    return false;
                };
                let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
                pid.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists())
            })
            .filter(|entry| std::fs::remove_dir_all(entry.path()).is_ok())
            .count()
    }
}

/// A snapshot being taken. Dropped without [`Taking::commit`], it removes
/// its directory.
#[derive(Debug)]
pub struct Taking {
    dir: PathBuf,
    store: PathBuf,
    committed: bool,
}

impl Taking {
    /// Where the saved VM goes.
    pub fn machine_path(&self) -> PathBuf {
        self.dir.join(MACHINE)
    }

    /// Pins `vm`'s root image into the snapshot (a hard link, else a
    /// copy) and points `vm` at it. A machine without one (no image) is
    /// left as it is.
    pub fn pin_root(&self, vm: &mut SavedVm) -> Result<(), Error> {
        let Some(disk) = vm.disks.iter_mut().find(|disk| disk.id == ROOT_DISK) else {
            return Ok(());
        };
        let pinned = self.dir.join(ROOT);
        if std::fs::hard_link(&disk.path, &pinned).is_err() {
            std::fs::copy(&disk.path, &pinned).map_err(Error::io(&pinned))?;
            std::fs::set_permissions(&pinned, std::fs::Permissions::from_mode(0o644))
                .map_err(Error::io(&pinned))?;
        }
        disk.path = pinned;
        Ok(())
    }

    /// The content id: the SHA-256 of the saved stream (its header, which
    /// names the sandbox and the time, left out). Reads the whole stream:
    /// call it off the async threads.
    pub fn content_id(&self) -> Result<(String, u64), Error> {
        let path = self.machine_path();
        let (mut file, header) = saved::open_snapshot(&path).map_err(|error| Error::Corrupt {
            id: "(being taken)".into(),
            reason: crate::error_chain(&error),
        })?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = file.read(&mut buf).map_err(Error::io(&path))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
        }
        let id = hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        Ok((id, header.stream_bytes))
    }

    /// Records `meta` and moves the snapshot to its id. When a snapshot of
    /// the same content is there already, that one is kept and this one
    /// dropped.
    pub fn commit(mut self, mut meta: SnapshotMeta) -> Result<Snapshot, Error> {
        let target = self.store.join(&meta.id);
        for disk in &mut meta.vm.disks {
            if disk.path.starts_with(&self.dir) {
                if let Ok(rest) = disk.path.strip_prefix(&self.dir) {
                    disk.path = target.join(rest);
                }
            }
        }
        if target.exists() {
            return SnapshotStore::new(&self.store).get(&meta.id);
        }
        let meta_path = self.dir.join(META);
        let json = serde_json::to_vec_pretty(&meta).unwrap_or_default();
        airlock_atomic_file::write(&meta_path, &json, Mode::Default)
            .map_err(Error::io(&meta_path))?;
        airlock_atomic_file::rename(&self.dir, &target).map_err(Error::io(&target))?;
        self.committed = true;
        Ok(Snapshot { dir: target, meta })
    }
}

impl Drop for Taking {
    fn drop(&mut self) {
        if !self.committed {
            if let Err(error) = std::fs::remove_dir_all(&self.dir) {
                if error.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(dir = %self.dir.display(), %error, "cannot remove an unfinished snapshot");
                }
            }
        }
    }
}

/// A snapshot id: 64 lowercase hex digits.
fn valid_id(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Allocated bytes under `path`, recursively (files are counted by their
/// blocks: sparse files by what they hold).
fn allocated(path: &Path) -> u64 {
    let Ok(read) = std::fs::read_dir(path) else {
        return allocated_file(path);
    };
    read.flatten()
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => allocated(&entry.path()),
            _ => entry.metadata().map_or(0, |meta| meta.blocks() * 512),
        })
        .sum()
}

fn allocated_file(path: &Path) -> u64 {
    std::fs::symlink_metadata(path).map_or(0, |meta| meta.blocks() * 512)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::saved::SavedDisk;

    fn vm(root: &Path) -> SavedVm {
        SavedVm {
            accel: "tcg".into(),
            cpu: Some("max".into()),
            memory_mib: 256,
            vcpus: 1,
            kernel: "/k".into(),
            initramfs: "/i".into(),
            kernel_cmdline: "console=ttyS0".into(),
            disks: vec![SavedDisk {
                id: ROOT_DISK.into(),
                path: root.to_owned(),
                read_only: true,
            }],
            serial_ports: Vec::new(),
        }
    }

    fn meta(id: &str, vm: SavedVm) -> SnapshotMeta {
        SnapshotMeta {
            format: SNAPSHOT_META_FORMAT,
            id: id.into(),
            vm,
            qemu_version: "7.2.0".into(),
            agent_version: "0.1.0".into(),
            protocol_revision: 13,
            source: "sandbox-1".into(),
            parent: None,
            user: None,
            cwd: None,
            env: Vec::new(),
            created_unix_ms: 1,
            paused_ms: 2,
            stream_bytes: 3,
        }
    }

    #[test]
    fn a_taken_snapshot_pins_its_root_and_moves_to_its_id() {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("image.ext4");
        std::fs::write(&image, b"root").unwrap();
        let store = SnapshotStore::new(dir.path().join("snapshots"));
        let taking = store.begin().unwrap();
        let mut machine = vm(&image);
        taking.pin_root(&mut machine).unwrap();
        std::fs::write(taking.machine_path(), b"stream").unwrap();
        let id = "a".repeat(64);
        let snapshot = taking.commit(meta(&id, machine)).unwrap();
        let root = &snapshot.meta().vm.disks[0].path;
        assert_eq!(root, &store.dir().join(&id).join(ROOT));
        assert_eq!(std::fs::read(root).unwrap(), b"root");
        // Removing the image leaves the snapshot's link.
        std::fs::remove_file(&image).unwrap();
        assert_eq!(std::fs::read(root).unwrap(), b"root");
        assert_eq!(store.get(&id).unwrap(), snapshot);
        assert_eq!(store.list().unwrap(), vec![snapshot.clone()]);
        assert!(snapshot.disk_bytes() > 0);
        assert!(store.remove(&id).unwrap());
        assert!(!store.remove(&id).unwrap());
        assert!(matches!(store.get(&id), Err(Error::NotFound(_))));
    }

    #[test]
    fn an_unfinished_take_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = SnapshotStore::new(dir.path());
        let taking = store.begin().unwrap();
        std::fs::write(taking.machine_path(), b"stream").unwrap();
        drop(taking);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn the_same_content_is_kept_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = SnapshotStore::new(dir.path());
        let id = "b".repeat(64);
        let first = store.begin().unwrap();
        let kept = first.commit(meta(&id, vm(Path::new("/img")))).unwrap();
        let second = store.begin().unwrap();
        let again = second.commit(meta(&id, vm(Path::new("/img")))).unwrap();
        assert_eq!(kept, again);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn ids_are_checked_and_bad_metadata_named() {
        let dir = tempfile::tempdir().unwrap();
        let store = SnapshotStore::new(dir.path());
        assert!(matches!(store.get("../x"), Err(Error::NotFound(_))));
        let id = "c".repeat(64);
        std::fs::create_dir_all(dir.path().join(&id)).unwrap();
        std::fs::write(dir.path().join(&id).join(META), b"{").unwrap();
        assert!(matches!(store.get(&id), Err(Error::Corrupt { .. })));
        assert!(store.list().unwrap().is_empty());
    }
}
