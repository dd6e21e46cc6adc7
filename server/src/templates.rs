//! [`Templates`]: the named templates a server keeps, per principal.
//!
//! ```text
//! <templates_dir>/                 the server's own (the owner's: `airlock
//!                                  template build` on its host, and the
//!                                  owner's builds through the API)
//! <data>/templates/keys/KEY/       each key's, a NamedStore of its own
//! <data>/templates/contexts/       build contexts being received
//! ```
//!
//! Each key's store has its own step cache and root images: a step's key
//! hashes its instruction and inputs, not what its `RUN` fetched through
//! the network, so a cache shared between keys would let one key's build
//! decide what another key's identical step holds (and tell it which steps
//! others ran). A key's storage is its whole store on disk (templates,
//! steps, roots), counted with its snapshots against its quota.
//!
//! A create's `template` is the caller's own first, then the server's; a
//! key never sees another key's. A deleted template's files go at once;
//! the root images its sandboxes run on stay while a sandbox of that key
//! may still need one (see [`Templates::tidy`]).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tonic::Status;

use airlock::template::build::StepCache;
use airlock::template::{NamedError, NamedStore, NamedTemplate};
use airlock_api::reason;
use airlock_api::v1::ErrorReason;

use crate::principal::Principal;

/// The directory of the server's data directory that holds key templates.
const DIR: &str = "templates";
const KEYS: &str = "keys";
const CONTEXTS: &str = "contexts";

/// A template as a principal finds it.
#[derive(Debug, Clone)]
pub struct Found {
    pub template: NamedTemplate,
    /// The key that built it (`None`: the server's own).
    pub owner: Option<Arc<str>>,
}

/// The server's named templates and its keys'.
#[derive(Debug)]
pub struct Templates {
    server: NamedStore,
    root: PathBuf,
    max_builds: usize,
    building: Arc<Mutex<HashSet<Principal>>>,
}

/// A principal's one build at a time, held while it runs (and while its
/// store is tidied); released when dropped.
#[derive(Debug)]
pub struct BuildSlot {
    building: Arc<Mutex<HashSet<Principal>>>,
    principal: Principal,
}

impl Drop for BuildSlot {
    fn drop(&mut self) {
        lock(&self.building).remove(&self.principal);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Templates {
    /// The server's own templates in `server_dir`, its keys' under
    /// `data_dir`, and at most `max_builds` builds at once.
    pub fn new(server_dir: PathBuf, data_dir: &Path, max_builds: usize) -> Self {
        Templates {
            server: NamedStore::new(server_dir),
            root: data_dir.join(DIR),
            max_builds,
            building: Arc::new(Mutex::new(HashSet::new())),
        }
    }

    /// The server's own templates.
    pub fn server(&self) -> &NamedStore {
        &self.server
    }

    /// Where `principal`'s builds go: the server's store for the owner, the
    /// key's own store for a key.
    pub fn store(&self, principal: &Principal) -> NamedStore {
        match principal.key() {
            None => self.server.clone(),
            Some(key) => NamedStore::new(self.root.join(KEYS).join(key)),
        }
    }

    /// Where build contexts are unpacked.
    pub fn contexts_dir(&self) -> PathBuf {
        self.root.join(CONTEXTS)
    }

    /// Makes the directories a key's builds use, each reachable (searchable,
    /// not listable) by a VMM that runs as another user when the server
    /// runs as root, as the snapshots' are.
    pub fn make_dirs(&self, principal: &Principal) -> Result<(), Status> {
        let mut dirs = vec![self.root.clone(), self.contexts_dir()];
        if let Some(key) = principal.key() {
            dirs.push(self.root.join(KEYS));
            dirs.push(self.root.join(KEYS).join(key));
        }
        for dir in dirs {
            std::os::unix::fs::DirBuilderExt::mode(
                std::fs::DirBuilder::new().recursive(true),
                0o711,
            )
            .create(&dir)
            .map_err(|e| internal("make", &dir, &e))?;
        }
        Ok(())
    }

    /// The template `name` (checked) as `principal` sees it: its own first,
    /// then the server's. `NOT_FOUND` for a name it cannot see.
    pub fn resolve(&self, principal: &Principal, name: &str) -> Result<Found, Status> {
        if let Some(key) = principal.key() {
            match self.store(principal).get(name) {
                Ok(template) => {
                    return Ok(Found {
                        template,
                        owner: Some(Arc::from(key)),
                    })
                }
                Err(NamedError::NotFound(_)) => {}
                Err(error) => return Err(named_status(&error)),
            }
        }
        self.server
            .get(name)
            .map(|template| Found {
                template,
                owner: None,
            })
            .map_err(|error| named_status(&error))
    }

    /// The templates `principal` may start from: the server's, and a key's
    /// own. An unreadable one is left out and logged.
    pub fn list(&self, principal: &Principal) -> Result<Vec<Found>, Status> {
        let mut found = Vec::new();
        let mut stores = vec![(self.server.clone(), None)];
        if let Some(key) = principal.key() {
            stores.push((self.store(principal), Some(Arc::<str>::from(key))));
        }
        for (store, owner) in stores {
            for template in store.list().map_err(|error| named_status(&error))? {
                match template {
                    Ok(template) => found.push(Found {
                        template,
                        owner: owner.clone(),
                    }),
                    Err(error) => tracing::warn!(
                        error = %airlock::error_chain(&error),
                        "an unreadable named template is not listed"
                    ),
                }
            }
        }
        Ok(found)
    }

    /// How many templates a key has built and the bytes its store takes
    /// (templates, step cache, root images); the owner's are the server's
    /// and counted nowhere: (0, 0).
    pub fn owned(&self, principal: &Principal) -> (u32, u64) {
        if principal.key().is_none() {
            return (0, 0);
        }
        let store = self.store(principal);
        let count = store
            .list()
            .map(|listed| listed.into_iter().filter(Result::is_ok).count())
            .unwrap_or(0);
        (u32::try_from(count).unwrap_or(u32::MAX), store.disk_bytes())
    }

    /// Deletes `principal`'s template `name` (checked): a key's own, or for
    /// the owner the server's. A key naming one of the server's is
    /// `OWNER_ONLY`; a name it does not have is `NOT_FOUND`.
    pub fn delete(&self, principal: &Principal, name: &str) -> Result<(), Status> {
        let store = self.store(principal);
        match store.remove(name) {
            Ok(()) => {
                tracing::info!(%principal, name, "template deleted");
                Ok(())
            }
            Err(NamedError::NotFound(_))
                if principal.key().is_some() && self.server.get(name).is_ok() =>
            {
                Err(reason::status(
                    ErrorReason::OwnerOnly,
                    format!(
                        "template {name} is the server's own: every key may start from it, \
                         only the machine's owner deletes it"
                    ),
                ))
            }
            Err(error) => Err(named_status(&error)),
        }
    }

    /// Claims `principal`'s one build: `RESOURCE_EXHAUSTED` while it has
    /// one running (`QUOTA_EXCEEDED`) or the server runs as many as it may
    /// (`SANDBOX_LIMIT`).
    pub fn claim(&self, principal: &Principal) -> Result<BuildSlot, Status> {
        let mut building = lock(&self.building);
        if building.contains(principal) {
            return Err(reason::status(
                ErrorReason::QuotaExceeded,
                format!(
                    "{principal} has a template build running; one at a time, retry when it ends"
                ),
            ));
        }
        if building.len() >= self.max_builds {
            return Err(reason::status(
                ErrorReason::SandboxLimit,
                format!(
                    "the server runs {} template builds, the most it may; retry when one ends",
                    building.len()
                ),
            ));
        }
        building.insert(principal.clone());
        Ok(BuildSlot {
            building: Arc::clone(&self.building),
            principal: principal.clone(),
        })
    }

    /// Frees what a key's store holds that no template of it uses: steps
    /// always, and root images unless `roots_in_use` (a sandbox of the key
    /// may run on a deleted template's root image, and one saved to disk
    /// opens it again when restored). Needs the key's build slot: a build
    /// in progress uses steps no template names yet. Returns the bytes
    /// freed.
    pub fn tidy(&self, slot: &BuildSlot, roots_in_use: bool) -> u64 {
        let principal = &slot.principal;
        if principal.key().is_none() {
            return 0;
        }
        let store = self.store(principal);
        let freed = if roots_in_use {
            let keep = match store.list() {
                Ok(listed) => listed
                    .into_iter()
                    .flatten()
                    .flat_map(|template| {
                        template
                            .meta()
                            .steps
                            .iter()
                            .map(|step| step.key.clone())
                            .collect::<Vec<_>>()
                    })
                    .collect(),
                Err(_) => return 0,
            };
            StepCache::new(store.steps_dir()).collect(&keep)
        } else {
            airlock::template::build::collect(&store)
        };
        match freed {
            Ok(bytes) => {
                if bytes > 0 {
                    tracing::info!(%principal, freed_mib = bytes >> 20, "unused template steps removed");
                }
                bytes
            }
            Err(error) => {
                tracing::warn!(%principal, error = %airlock::error_chain(&error), "cannot tidy a key's templates");
                0
            }
        }
    }

    /// What no one owns goes, at start: the stores of keys that no longer
    /// exist and have no sandbox left (`owners`), and contexts of builds a
    /// previous server did not finish. Returns how many stores went.
    pub fn collect(&self, keys: &HashSet<String>, owners: &HashSet<String>) -> usize {
        let _ = std::fs::remove_dir_all(self.contexts_dir());
        let mut removed = 0;
        let Ok(dirs) = std::fs::read_dir(self.root.join(KEYS)) else {
            return 0;
        };
        for dir in dirs.flatten() {
            let who = dir.file_name().to_string_lossy().into_owned();
            if keys.contains(&who) || owners.contains(&who) {
                continue;
            }
            match std::fs::remove_dir_all(dir.path()) {
                Ok(()) => removed += 1,
                Err(error) => {
                    tracing::warn!(%error, key = who, "cannot remove a removed key's templates")
                }
            }
        }
        if removed > 0 {
            tracing::info!(removed, "templates of removed keys removed");
        }
        removed
    }
}

/// The status of a named-template error: `NOT_FOUND` for a name nobody
/// has, `INVALID_ARGUMENT` for a bad name, else `INTERNAL`.
pub fn named_status(error: &NamedError) -> Status {
    match error {
        NamedError::NotFound(name) => reason::status(
            ErrorReason::NotFound,
            format!("no template named {name}; ListTemplates lists yours and the server's"),
        ),
        NamedError::BadName(_) => reason::invalid("name", airlock::error_chain(error)),
        _ => reason::status(ErrorReason::Internal, airlock::error_chain(error)),
    }
}

fn internal(action: &str, path: &Path, error: &std::io::Error) -> Status {
    reason::status(
        ErrorReason::Internal,
        format!("cannot {action} {}: {error}", path.display()),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;
    use airlock::template::NamedMeta;
    use airlock_api::reason::reason_of;

    /// Puts a template `name` with `bytes` of snapshot into `store`.
    pub fn put(store: &NamedStore, name: &str, bytes: usize) {
        let dir = store.dir().join(name);
        std::fs::create_dir_all(dir.join("snapshot")).unwrap();
        std::fs::write(dir.join("snapshot/memory"), vec![1u8; bytes]).unwrap();
        std::fs::write(dir.join("root.ext4"), b"").unwrap();
        let meta = NamedMeta {
            name: name.to_owned(),
            base: "default".to_owned(),
            rootfs: dir.join("root.ext4"),
            steps: Vec::new(),
            memory_mib: 256,
            vcpus: 1,
            env: Vec::new(),
            workdir: None,
            user: None,
            start: String::new(),
            ready: String::new(),
            start_pid: None,
            start_ticks: None,
            built_unix_secs: 0,
            build_secs: 0.0,
        };
        std::fs::write(
            dir.join("template.json"),
            serde_json::to_vec(&meta).unwrap(),
        )
        .unwrap();
    }

    fn key(name: &str) -> Principal {
        Principal::Key(Arc::from(name))
    }

    #[test]
    fn a_key_finds_its_own_first_then_the_servers_and_never_anothers() {
        let dir = tempfile::tempdir().unwrap();
        let templates = Templates::new(dir.path().join("server"), dir.path(), 2);
        put(templates.server(), "web", 10);
        put(templates.server(), "db", 10);
        put(&templates.store(&key("alice")), "web", 10);
        put(&templates.store(&key("bob")), "mine", 10);
        let found = templates.resolve(&key("alice"), "web").unwrap();
        assert_eq!(found.owner.as_deref(), Some("alice"));
        let found = templates.resolve(&key("alice"), "db").unwrap();
        assert_eq!(found.owner, None);
        let refused = templates.resolve(&key("alice"), "mine").unwrap_err();
        assert_eq!(reason_of(&refused), Some(ErrorReason::NotFound));
        assert_eq!(
            templates.resolve(&Principal::Owner, "web").unwrap().owner,
            None
        );
        let listed: Vec<_> = templates
            .list(&key("alice"))
            .unwrap()
            .into_iter()
            .map(|f| (f.template.meta().name.clone(), f.owner))
            .collect();
        assert_eq!(listed.len(), 3, "{listed:?}");
        assert_eq!(templates.list(&Principal::Owner).unwrap().len(), 2);
        let (count, bytes) = templates.owned(&key("alice"));
        assert_eq!(count, 1);
        assert!(bytes > 0);
        assert_eq!(templates.owned(&Principal::Owner), (0, 0));
    }

    #[test]
    fn a_key_deletes_its_own_only() {
        let dir = tempfile::tempdir().unwrap();
        let templates = Templates::new(dir.path().join("server"), dir.path(), 2);
        put(templates.server(), "web", 10);
        put(&templates.store(&key("bob")), "mine", 10);
        let refused = templates.delete(&key("alice"), "mine").unwrap_err();
        assert_eq!(reason_of(&refused), Some(ErrorReason::NotFound));
        let refused = templates.delete(&key("alice"), "web").unwrap_err();
        assert_eq!(reason_of(&refused), Some(ErrorReason::OwnerOnly));
        templates.delete(&key("bob"), "mine").unwrap();
        templates.delete(&Principal::Owner, "web").unwrap();
        assert!(templates.list(&key("bob")).unwrap().is_empty());
    }

    #[test]
    fn one_build_per_principal_and_a_bound_on_all() {
        let dir = tempfile::tempdir().unwrap();
        let templates = Templates::new(dir.path().join("server"), dir.path(), 2);
        let alice = templates.claim(&key("alice")).unwrap();
        let again = templates.claim(&key("alice")).unwrap_err();
        assert_eq!(reason_of(&again), Some(ErrorReason::QuotaExceeded));
        let _owner = templates.claim(&Principal::Owner).unwrap();
        let full = templates.claim(&key("bob")).unwrap_err();
        assert_eq!(reason_of(&full), Some(ErrorReason::SandboxLimit));
        drop(alice);
        templates.claim(&key("bob")).unwrap();
    }

    #[test]
    fn collect_removes_a_gone_keys_store_unless_its_sandboxes_run() {
        let dir = tempfile::tempdir().unwrap();
        let templates = Templates::new(dir.path().join("server"), dir.path(), 2);
        for who in ["alice", "gone", "running"] {
            put(&templates.store(&key(who)), "t", 10);
        }
        let keys = HashSet::from(["alice".to_owned()]);
        let owners = HashSet::from(["running".to_owned()]);
        assert_eq!(templates.collect(&keys, &owners), 1);
        assert_eq!(templates.owned(&key("gone")).0, 0);
        assert_eq!(templates.owned(&key("running")).0, 1);
    }
}
