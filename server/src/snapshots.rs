//! [`SnapshotNames`]: the server's snapshots, named per key over the
//! library's content-addressed store.
//!
//! ```text
//! <data dir>/snapshots/objects/            the library's SnapshotStore: each
//!                                          snapshot under its content id
//! <data dir>/snapshots/names/KEY/NAME.json a name of KEY's (the owner's under
//!                                          `_owner`), a `Named` pointing at an id
//! ```
//!
//! A name belongs to one key; another key's name does not exist for you
//! (NOT_FOUND, as a name nobody has). Two names may point at one id; the
//! object goes when the last name does. What a key's snapshots take on disk
//! counts against its storage quota, and their number against its snapshot
//! quota, checked in one step with the name's reservation (under the
//! store's lock), so concurrent snapshots of a key cannot both slip under
//! it. A snapshot's files are removed when its name is deleted; sandboxes
//! started from it run on (they keep their mapping of its memory file).
//!
//! The directories are searchable by others (`0711`, not listable) when
//! the server runs as root, so that an unprivileged VMM reaches the memory
//! files and root images inside.

use std::collections::{BTreeMap, HashSet};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde::{Deserialize, Serialize};
use tonic::Status;

use airlock::snapshot::{Snapshot, SnapshotStore, SnapshotStoreError};
use airlock::Sandbox;
use airlock_api::reason;
use airlock_api::v1::ErrorReason;

use crate::keys::{Quota, OWNER_NAME};
use crate::principal::Principal;
use crate::status::error_status;

/// A name's file ending.
const SUFFIX: &str = ".json";

/// What a name records: the snapshot it names and where it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Named {
    pub name: String,
    /// The content id in the object store.
    pub id: String,
    pub source_sandbox_id: String,
    /// The source's image's, template's and snapshot's names ("" for none).
    pub image: String,
    pub template: String,
    pub parent_snapshot: String,
    pub memory_mib: u32,
    pub vcpus: u32,
    pub created_at_ms: u64,
    pub paused_ms: u64,
    pub took_ms: u64,
}

/// Where a taken snapshot came from, as the server's record says.
#[derive(Debug, Clone, Default)]
pub struct Source {
    pub sandbox_id: String,
    pub image: String,
    pub template: String,
    pub snapshot: String,
}

/// The server's named snapshots.
#[derive(Debug)]
pub struct SnapshotNames {
    root: PathBuf,
    objects: SnapshotStore,
    /// Held while names are counted and added, or removed.
    changing: tokio::sync::Mutex<()>,
    /// Names a snapshot is being taken under: (whose, name).
    pending: Mutex<HashSet<(String, String)>>,
}

impl SnapshotNames {
    /// The snapshots under `data_dir`.
    pub fn new(data_dir: &Path) -> Self {
        let root = data_dir.join("snapshots");
        SnapshotNames {
            objects: SnapshotStore::new(root.join("objects")),
            root,
            changing: tokio::sync::Mutex::new(()),
            pending: Mutex::new(HashSet::new()),
        }
    }

    /// The library's store under the names.
    pub fn objects(&self) -> &SnapshotStore {
        &self.objects
    }

    fn pending(&self) -> MutexGuard<'_, HashSet<(String, String)>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn names_dir(&self, whose: &Principal) -> PathBuf {
        self.root
            .join("names")
            .join(whose.key().unwrap_or(OWNER_NAME))
    }

    fn path(&self, whose: &Principal, name: &str) -> PathBuf {
        self.names_dir(whose).join(format!("{name}{SUFFIX}"))
    }

    /// `whose` snapshot `name` (a checked name) and its files; `NOT_FOUND`
    /// naming it for a name `whose` does not have.
    pub fn get(&self, whose: &Principal, name: &str) -> Result<(Named, Snapshot), Status> {
        let named = read(&self.path(whose, name))?.ok_or_else(|| not_found(name))?;
        let snapshot = self.objects.get(&named.id).map_err(|error| match error {
            SnapshotStoreError::NotFound(_) => not_found(name),
            error => reason::status(ErrorReason::Internal, airlock::error_chain(&error)),
        })?;
        Ok((named, snapshot))
    }

    /// `whose` snapshots, by name, with the bytes each takes.
    pub fn list(&self, whose: &Principal) -> Result<Vec<(Named, u64)>, Status> {
        let dir = self.names_dir(whose);
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(internal("list", &dir, &e)),
        };
        let mut found = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().and_then(|e| e.to_str()) != Some(&SUFFIX[1..]) {
                continue;
            }
            if let Some(named) = read(&path)? {
                let bytes = self
                    .objects
                    .get(&named.id)
                    .map(|snapshot| snapshot.disk_bytes())
                    .unwrap_or(0);
                found.push((named, bytes));
            }
        }
        found.sort_by(|a, b| a.0.name.cmp(&b.0.name));
        Ok(found)
    }

    /// How many snapshots `whose` has and the bytes they take (an object
    /// two of its names share counted once).
    pub fn totals(&self, whose: &Principal) -> Result<(u32, u64), Status> {
        let listed = self.list(whose)?;
        let ids: BTreeMap<&str, u64> = listed
            .iter()
            .map(|(named, bytes)| (named.id.as_str(), *bytes))
            .collect();
        let count = u32::try_from(listed.len()).unwrap_or(u32::MAX);
        Ok((count, ids.values().sum()))
    }

    /// Takes a snapshot of `sandbox` as `whose` snapshot `name` (checked),
    /// within `quota`: `ALREADY_EXISTS` for a name `whose` has,
    /// `QUOTA_EXCEEDED` past its snapshots or its storage (`stored` adds
    /// what else counts against storage: its templates).
    pub async fn take(
        &self,
        whose: &Principal,
        name: &str,
        sandbox: &Sandbox,
        source: Source,
        quota: Option<&Quota>,
        stored: u64,
    ) -> Result<Named, Status> {
        let key = (whose.to_string(), name.to_owned());
        {
            let _changing = self.changing.lock().await;
            if self.path(whose, name).exists() || self.pending().contains(&key) {
                return Err(reason::status(
                    ErrorReason::AlreadyExists,
                    format!("name: you have a snapshot named {name}; delete it first or pick another name"),
                ));
            }
            if let Some(quota) = quota {
                let (count, bytes) = self.totals(whose)?;
                let pending = self.pending().iter().filter(|(w, _)| *w == key.0).count();
                let count = count.saturating_add(u32::try_from(pending).unwrap_or(u32::MAX));
                if count >= quota.snapshots() {
                    return Err(quota_exceeded(format!(
                        "the key keeps at most {} snapshots and has {count}; delete one first",
                        quota.snapshots()
                    )));
                }
                if bytes.saturating_add(stored) >= quota.storage_bytes() {
                    return Err(quota_exceeded(format!(
                        "the key's snapshots and templates take {} MiB of its {} MiB; delete some first",
                        (bytes + stored) >> 20,
                        quota.storage_bytes() >> 20
                    )));
                }
            }
            self.pending().insert(key.clone());
        }
        let taken = sandbox.snapshot(&self.objects).await;
        let _changing = self.changing.lock().await;
        self.pending().remove(&key);
        let taken = taken.map_err(|error| error_status(&error))?;
        let named = Named {
            name: name.to_owned(),
            id: taken.snapshot.id().to_owned(),
            source_sandbox_id: source.sandbox_id,
            image: source.image,
            template: source.template,
            parent_snapshot: source.snapshot,
            memory_mib: taken.snapshot.meta().vm.memory_mib,
            vcpus: taken.snapshot.meta().vm.vcpus,
            created_at_ms: taken.snapshot.meta().created_unix_ms,
            paused_ms: crate::convert::millis(taken.paused),
            took_ms: crate::convert::millis(taken.took),
        };
        if let Some(quota) = quota {
            let (_, bytes) = self.totals(whose)?;
            let after = bytes
                .saturating_add(stored)
                .saturating_add(taken.snapshot.disk_bytes());
            if after > quota.storage_bytes() {
                self.forget_unnamed(&named.id)?;
                return Err(quota_exceeded(format!(
                    "this snapshot takes {} MiB, which would bring the key's snapshots and \
                     templates to {} MiB of its {} MiB; delete some first",
                    taken.snapshot.disk_bytes() >> 20,
                    after >> 20,
                    quota.storage_bytes() >> 20
                )));
            }
        }
        self.make_dirs(whose)?;
        let path = self.path(whose, name);
        let json = serde_json::to_vec_pretty(&named)
            .map_err(|e| reason::status(ErrorReason::Internal, e.to_string()))?;
        airlock_atomic_file::write(&path, &json, airlock_atomic_file::Mode::Private)
            .map_err(|e| internal("write", &path, &e))?;
        tracing::info!(%whose, name, id = named.id, paused_ms = named.paused_ms, "snapshot taken");
        Ok(named)
    }

    /// Deletes `whose` snapshot `name`: the name at once, the files when no
    /// other name points at them. `NOT_FOUND` for a name it does not have.
    pub async fn delete(&self, whose: &Principal, name: &str) -> Result<(), Status> {
        let _changing = self.changing.lock().await;
        let path = self.path(whose, name);
        let named = read(&path)?.ok_or_else(|| not_found(name))?;
        std::fs::remove_file(&path).map_err(|e| internal("remove", &path, &e))?;
        self.forget_unnamed(&named.id)?;
        tracing::info!(%whose, name, id = named.id, "snapshot deleted");
        Ok(())
    }

    /// Removes the object `id` if no name points at it.
    fn forget_unnamed(&self, id: &str) -> Result<(), Status> {
        if self.named_ids()?.contains(id) {
            return Ok(());
        }
        self.objects
            .remove(id)
            .map(drop)
            .map_err(|error| reason::status(ErrorReason::Internal, airlock::error_chain(&error)))
    }

    /// Every id some name of some principal points at.
    fn named_ids(&self) -> Result<HashSet<String>, Status> {
        let mut ids = HashSet::new();
        let root = self.root.join("names");
        let Ok(whose) = std::fs::read_dir(&root) else {
            return Ok(ids);
        };
        for dir in whose.flatten() {
            let Ok(names) = std::fs::read_dir(dir.path()) else {
                continue;
            };
            for entry in names.flatten() {
                if let Some(named) = read(&entry.path())? {
                    ids.insert(named.id);
                }
            }
        }
        Ok(ids)
    }

    /// What no one owns goes: the names of keys that no longer exist, then
    /// the objects no name points at, and what unfinished takes left.
    /// Returns how many names and objects went.
    pub fn collect(&self, keys: &HashSet<String>) -> (usize, usize) {
        let mut names = 0;
        if let Ok(whose) = std::fs::read_dir(self.root.join("names")) {
            for dir in whose.flatten() {
                let who = dir.file_name().to_string_lossy().into_owned();
                if who != OWNER_NAME && !keys.contains(&who) {
                    let count = std::fs::read_dir(dir.path()).map_or(0, |read| read.count());
                    if std::fs::remove_dir_all(dir.path()).is_ok() {
                        names += count;
                    }
                }
            }
        }
        let named = self.named_ids().unwrap_or_default();
        let mut objects = self.objects.collect_abandoned();
        for snapshot in self.objects.list().unwrap_or_default() {
            if !named.contains(snapshot.id()) && self.objects.remove(snapshot.id()).unwrap_or(false)
            {
                objects += 1;
            }
        }
        if names + objects > 0 {
            tracing::info!(names, objects, "snapshots no one owns removed");
        }
        (names, objects)
    }

    /// Makes `whose` names directory and the object store's, each
    /// directory above reachable by a VMM running as another user
    /// (searchable, not listable) when the server runs as root.
    fn make_dirs(&self, whose: &Principal) -> Result<(), Status> {
        let names = self.names_dir(whose);
        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
            .create(&names)
            .map_err(|e| internal("make", &names, &e))?;
        Ok(())
    }

    /// Opens the way to the object store for a VMM running as another
    /// user: the data directory and `snapshots/` searchable (0711).
    pub fn open_up(&self, data_dir: &Path) -> Result<(), Status> {
        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o711)
            .create(self.objects.dir())
            .map_err(|e| internal("make", self.objects.dir(), &e))?;
        if !nix::unistd::geteuid().is_root() {
            return Ok(());
        }
        for dir in [data_dir, &self.root, self.objects.dir()] {
            let mode = std::fs::metadata(dir)
                .map_err(|e| internal("inspect", dir, &e))?
                .mode();
            if mode & 0o011 != 0o011 {
                let reachable = std::fs::Permissions::from_mode((mode | 0o011) & 0o7777);
                std::fs::set_permissions(dir, reachable)
                    .map_err(|e| internal("open up", dir, &e))?;
            }
        }
        Ok(())
    }
}

/// A name's record, `None` when there is no such file.
fn read(path: &Path) -> Result<Option<Named>, Status> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            reason::status(
                ErrorReason::Internal,
                format!("snapshot name {} is unreadable: {e}", path.display()),
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(internal("read", path, &e)),
    }
}

fn not_found(name: &str) -> Status {
    reason::status(
        ErrorReason::NotFound,
        format!("no snapshot named {name}; ListSnapshots lists yours"),
    )
}

fn quota_exceeded(message: String) -> Status {
    reason::status(ErrorReason::QuotaExceeded, message)
}

fn internal(action: &str, path: &Path, error: &std::io::Error) -> Status {
    reason::status(
        ErrorReason::Internal,
        format!("cannot {action} {}: {error}", path.display()),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn named(name: &str, id: &str) -> Named {
        Named {
            name: name.into(),
            id: id.into(),
            source_sandbox_id: "sandbox-1".into(),
            image: "default".into(),
            template: String::new(),
            parent_snapshot: String::new(),
            memory_mib: 256,
            vcpus: 1,
            created_at_ms: 1,
            paused_ms: 2,
            took_ms: 3,
        }
    }

    fn put(names: &SnapshotNames, whose: &Principal, named: &Named) {
        names.make_dirs(whose).unwrap();
        std::fs::write(
            names.path(whose, &named.name),
            serde_json::to_vec(named).unwrap(),
        )
        .unwrap();
    }

    #[tokio::test]
    async fn names_are_per_key_and_an_object_goes_with_its_last_name() {
        let dir = tempfile::tempdir().unwrap();
        let names = SnapshotNames::new(dir.path());
        let alice = Principal::Key(Arc::from("alice"));
        let bob = Principal::Key(Arc::from("bob"));
        let id = "d".repeat(64);
        std::fs::create_dir_all(names.objects().dir().join(&id)).unwrap();
        put(&names, &alice, &named("web", &id));
        put(&names, &bob, &named("same", &id));
        assert_eq!(names.list(&alice).unwrap().len(), 1);
        let refused = names.get(&bob, "web").unwrap_err();
        assert_eq!(refused.code(), tonic::Code::NotFound);
        assert!(refused.message().contains("no snapshot named web"));
        assert_eq!(names.totals(&alice).unwrap().0, 1);
        names.delete(&alice, "web").await.unwrap();
        assert!(
            names.objects().dir().join(&id).exists(),
            "bob's name keeps it"
        );
        assert_eq!(
            names.delete(&alice, "web").await.unwrap_err().code(),
            tonic::Code::NotFound
        );
        names.delete(&bob, "same").await.unwrap();
        assert!(!names.objects().dir().join(&id).exists());
    }

    #[test]
    fn collect_removes_a_gone_keys_names_and_unnamed_objects() {
        let dir = tempfile::tempdir().unwrap();
        let names = SnapshotNames::new(dir.path());
        let gone = Principal::Key(Arc::from("gone"));
        put(&names, &gone, &named("x", &"e".repeat(64)));
        put(&names, &Principal::Owner, &named("y", &"f".repeat(64)));
        let keys = HashSet::from(["alice".to_owned()]);
        let (removed, _) = names.collect(&keys);
        assert_eq!(removed, 1);
        assert!(names.list(&gone).unwrap().is_empty());
        assert_eq!(names.list(&Principal::Owner).unwrap().len(), 1);
    }
}
