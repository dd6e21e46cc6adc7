//! The template cache on disk.
//!
//! ```text
//! <dir>/<key>/memory          the guest's RAM (a sparse file; clones map it
//!                             copy on write, so it never changes)
//! <dir>/<key>/state           QEMU's device and vCPU state (migration stream)
//! <dir>/<key>/meta.json       inputs, sizes and the state's sha256
//! <dir>/<key>.lock            flock(2) held while the template is built
//! <dir>/<key>.building-<pid>  a template being made; renamed to <key> when
//!                             complete, so a crash leaves no half template
//! ```
//!
//! A template is checked on every use (meta readable, sizes and the state's
//! checksum as recorded): a corrupt one is an error the caller turns into a
//! cold boot and a warning. Removing a template while clones run is safe:
//! they keep their mapping of the unlinked file.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use airlock_atomic_file::Mode;
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::key::TemplateInputs;

const MEMORY: &str = "memory";
const STATE: &str = "state";
const META: &str = "meta.json";
const LOCK_SUFFIX: &str = ".lock";
const BUILDING: &str = ".building-";
/// How often a start waiting for another's template build tries the lock.
const LOCK_POLL: Duration = Duration::from_millis(20);

/// Errors of the template cache.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("template cache i/o on {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("template {key} is corrupt: {reason}")]
    Corrupt { key: String, reason: String },
    #[error("another start has been making template {key} for longer than {waited:?}")]
    LockTimeout { key: String, waited: Duration },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TemplateError + '_ {
    move |source| TemplateError::Io {
        path: path.to_owned(),
        source,
    }
}

/// What `meta.json` records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateMeta {
    pub key: String,
    pub inputs: TemplateInputs,
    /// The agent's version as it answered in the template.
    pub agent_version: String,
    pub created_unix_secs: u64,
    pub memory_bytes: u64,
    pub state_bytes: u64,
    pub state_sha256: String,
}

/// A complete, checked template.
#[derive(Debug, Clone)]
pub struct Template {
    dir: PathBuf,
    meta: TemplateMeta,
}

impl Template {
    pub fn key(&self) -> &str {
        &self.meta.key
    }

    pub fn meta(&self) -> &TemplateMeta {
        &self.meta
    }

    /// The RAM file clones map.
    pub fn memory_path(&self) -> PathBuf {
        self.dir.join(MEMORY)
    }

    /// The saved device state, for one restore.
    pub fn open_state(&self) -> Result<File, TemplateError> {
        let path = self.dir.join(STATE);
        File::open(&path).map_err(io(&path))
    }
}

/// A template in the cache, as `list` reports it.
#[derive(Debug, Clone)]
pub struct TemplateEntry {
    pub key: String,
    pub dir: PathBuf,
    /// `None` when the template is corrupt.
    pub meta: Option<TemplateMeta>,
    /// Bytes the template takes on disk.
    pub disk_bytes: u64,
    /// Whether it can still be used: readable, and every input file as it
    /// was when it was made.
    pub current: bool,
}

/// What [`TemplateStore::collect`] removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TemplateGc {
    /// Templates whose inputs changed or that were corrupt.
    pub templates: Vec<String>,
    /// Leftovers of builds that never finished.
    pub leftovers: Vec<PathBuf>,
}

/// The lock on one key's build: held while the template is made.
#[derive(Debug)]
pub struct KeyLock {
    _lock: Flock<File>,
}

/// The template cache in one directory.
#[derive(Debug, Clone)]
pub struct TemplateStore {
    dir: PathBuf,
}

impl TemplateStore {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        TemplateStore { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn ensure_dir(&self) -> Result<(), TemplateError> {
        std::fs::create_dir_all(&self.dir).map_err(io(&self.dir))?;
        // Reachable by the VMM user, which maps the memory files; the
        // files themselves are shared with its group only.
        std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o711))
            .map_err(io(&self.dir))
    }

    /// The complete template for `key`, checked; `Ok(None)` if there is none.
    pub fn find(&self, key: &str) -> Result<Option<Template>, TemplateError> {
        let dir = self.dir.join(key);
        if !dir.exists() {
            return Ok(None);
        }
        check(&dir, key).map(Some)
    }

    /// Takes `key`'s build lock, waiting at most `timeout` for another
    /// start that holds it.
    pub async fn lock(&self, key: &str, timeout: Duration) -> Result<KeyLock, TemplateError> {
        self.ensure_dir()?;
        let path = self.dir.join(format!("{key}{LOCK_SUFFIX}"));
        let begin = Instant::now();
        loop {
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .mode(0o600)
                .open(&path)
                .map_err(io(&path))?;
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(lock) => return Ok(KeyLock { _lock: lock }),
                Err((_, nix::errno::Errno::EWOULDBLOCK)) => {}
                Err((_, errno)) => return Err(io(&path)(errno.into())),
            }
            if begin.elapsed() >= timeout {
                return Err(TemplateError::LockTimeout {
                    key: key.to_owned(),
                    waited: timeout,
                });
            }
            tokio::time::sleep(LOCK_POLL).await;
        }
    }

    /// Starts making the template for `key` (its lock held): a fresh
    /// directory with an empty memory file of `memory_bytes`.
    pub fn begin(
        &self,
        key: &str,
        memory_bytes: u64,
        _lock: &KeyLock,
    ) -> Result<Building, TemplateError> {
        self.ensure_dir()?;
        let dir = self
            .dir
            .join(format!("{key}{BUILDING}{}", std::process::id()));
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(io(&dir))?;
        }
        std::fs::create_dir(&dir).map_err(io(&dir))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711)).map_err(io(&dir))?;
        let memory = dir.join(MEMORY);
        let file = OpenOptions::new()
            .create_new(true)
            .write(true)
            .mode(0o600)
            .open(&memory)
            .map_err(io(&memory))?;
        file.set_len(memory_bytes).map_err(io(&memory))?;
        Ok(Building {
            dir,
            target: self.dir.join(key),
            key: key.to_owned(),
            committed: false,
        })
    }

    /// Every template, current or not.
    pub fn list(&self) -> Result<Vec<TemplateEntry>, TemplateError> {
        let mut entries = Vec::new();
        let read = match std::fs::read_dir(&self.dir) {
            Ok(read) => read,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(entries),
            Err(e) => return Err(io(&self.dir)(e)),
        };
        for entry in read.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let dir = entry.path();
            if name.contains(BUILDING) || name.ends_with(LOCK_SUFFIX) || !dir.is_dir() {
                continue;
            }
            let meta = check(&dir, &name).ok().map(|template| template.meta);
            let current = meta
                .as_ref()
                .is_some_and(|meta| meta.inputs.changed_files().is_empty());
            entries.push(TemplateEntry {
                disk_bytes: disk_usage(&dir),
                key: name,
                dir,
                meta,
                current,
            });
        }
        entries.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(entries)
    }

    /// Removes the template `key`; `false` if there was none.
    pub fn remove(&self, key: &str) -> Result<bool, TemplateError> {
        if key.is_empty() || key.contains('/') || key.starts_with('.') {
            return Ok(false);
        }
        let dir = self.dir.join(key);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io(&dir)(e)),
        }
    }

    /// Removes templates that can no longer be used (an input changed, or
    /// corrupt) and what builds that never finished left behind.
    pub fn collect(&self) -> Result<TemplateGc, TemplateError> {
        let mut gc = TemplateGc::default();
        for entry in self.list()? {
            if !entry.current && self.remove(&entry.key)? {
                gc.templates.push(entry.key);
            }
        }
        let Ok(read) = std::fs::read_dir(&self.dir) else {
            return Ok(gc);
        };
        for entry in read.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some((key, _)) = name.split_once(BUILDING) else {
                continue;
            };
            // A build in progress holds its key's lock.
            let lock = self.dir.join(format!("{key}{LOCK_SUFFIX}"));
            let free = File::options()
                .write(true)
                .open(&lock)
                .ok()
                .map(|file| Flock::lock(file, FlockArg::LockExclusiveNonblock).is_ok())
                .unwrap_or(true);
            if free {
                std::fs::remove_dir_all(entry.path()).map_err(io(&entry.path()))?;
                gc.leftovers.push(entry.path());
            }
        }
        Ok(gc)
    }
}

/// A template being made. Dropped without [`Building::commit`], it removes
/// its directory.
#[derive(Debug)]
pub struct Building {
    dir: PathBuf,
    target: PathBuf,
    key: String,
    committed: bool,
}

impl Building {
    /// The RAM file the template VM writes through.
    pub fn memory_path(&self) -> PathBuf {
        self.dir.join(MEMORY)
    }

    /// The file QEMU writes the device state to.
    pub fn create_state(&self) -> Result<File, TemplateError> {
        let path = self.dir.join(STATE);
        OpenOptions::new()
            .create_new(true)
            .write(true)
            .mode(0o600)
            .open(&path)
            .map_err(io(&path))
    }

    /// Records the template and makes it visible under its key.
    pub fn commit(
        mut self,
        inputs: TemplateInputs,
        agent_version: String,
    ) -> Result<Template, TemplateError> {
        let memory = self.dir.join(MEMORY);
        let state = self.dir.join(STATE);
        let (state_bytes, state_sha256) = hash_file(&state)?;
        for path in [&memory, &state] {
            File::open(path)
                .and_then(|file| file.sync_all())
                .map_err(io(path))?;
        }
        let meta = TemplateMeta {
            key: self.key.clone(),
            inputs,
            agent_version,
            created_unix_secs: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            memory_bytes: std::fs::metadata(&memory).map_err(io(&memory))?.len(),
            state_bytes,
            state_sha256,
        };
        let meta_path = self.dir.join(META);
        let json = serde_json::to_vec_pretty(&meta).unwrap_or_default();
        airlock_atomic_file::write(&meta_path, &json, Mode::Default).map_err(io(&meta_path))?;
        if self.target.exists() {
            std::fs::remove_dir_all(&self.target).map_err(io(&self.target))?;
        }
        airlock_atomic_file::rename(&self.dir, &self.target).map_err(io(&self.target))?;
        self.committed = true;
        Ok(Template {
            dir: self.target.clone(),
            meta,
        })
    }
}

impl Drop for Building {
    fn drop(&mut self) {
        if !self.committed {
            if let Err(error) = std::fs::remove_dir_all(&self.dir) {
                tracing::debug!(%error, dir = %self.dir.display(), "template leftovers not removed");
            }
        }
    }
}

/// Reads and checks the template in `dir`.
fn check(dir: &Path, key: &str) -> Result<Template, TemplateError> {
    let corrupt = |reason: String| TemplateError::Corrupt {
        key: key.to_owned(),
        reason,
    };
    let meta_path = dir.join(META);
    let json = std::fs::read(&meta_path).map_err(|e| corrupt(format!("{META}: {e}")))?;
    let meta: TemplateMeta =
        serde_json::from_slice(&json).map_err(|e| corrupt(format!("{META}: {e}")))?;
    if meta.key != key {
        return Err(corrupt(format!("{META} names key {}", meta.key)));
    }
    let memory = std::fs::metadata(dir.join(MEMORY))
        .map_err(|e| corrupt(format!("{MEMORY}: {e}")))?
        .len();
    if memory != meta.memory_bytes {
        return Err(corrupt(format!(
            "{MEMORY} has {memory} bytes, not {}",
            meta.memory_bytes
        )));
    }
    let (state_bytes, state_sha256) =
        hash_file(&dir.join(STATE)).map_err(|e| corrupt(e.to_string()))?;
    if state_bytes != meta.state_bytes || state_sha256 != meta.state_sha256 {
        return Err(corrupt(format!(
            "{STATE} ({state_bytes} bytes) does not match its checksum"
        )));
    }
    Ok(Template {
        dir: dir.to_owned(),
        meta,
    })
}

fn hash_file(path: &Path) -> Result<(u64, String), TemplateError> {
    let mut file = File::open(path).map_err(io(path))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 << 10];
    let mut total = 0u64;
    loop {
        let n = file.read(&mut buf).map_err(io(path))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        total += n as u64;
    }
    let hex = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok((total, hex))
}

/// Allocated bytes under `dir` (the memory file is sparse).
fn disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(dir)
        .map(|read| {
            read.flatten()
                .filter_map(|entry| entry.metadata().ok())
                .map(|meta| meta.blocks() * 512)
                .sum()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::super::key::{FileId, TEMPLATE_FORMAT};
    use super::*;
    use std::io::Write;

    fn inputs(dir: &Path) -> TemplateInputs {
        let file = dir.join("kernel");
        std::fs::write(&file, b"k").unwrap();
        let id = FileId::of(&file).unwrap();
        TemplateInputs {
            format: TEMPLATE_FORMAT,
            airlock_version: "0".into(),
            qemu: id.clone(),
            kernel: id.clone(),
            initramfs: id,
            image: None,
            memory_mib: 64,
            vcpus: 1,
            accel: "tcg".into(),
            cpu: "max".into(),
            kernel_cmdline: String::new(),
            serial_ports: Vec::new(),
        }
    }

    async fn make(store: &TemplateStore, inputs: &TemplateInputs) -> Template {
        let key = inputs.key();
        let lock = store.lock(&key, Duration::from_secs(1)).await.unwrap();
        let building = store.begin(&key, 1 << 20, &lock).unwrap();
        building
            .create_state()
            .unwrap()
            .write_all(b"state")
            .unwrap();
        building.commit(inputs.clone(), "0.1.0".into()).unwrap()
    }

    #[tokio::test]
    async fn a_committed_template_is_found_and_checked() {
        let tmp = tempfile::tempdir().unwrap();
        let store = TemplateStore::new(tmp.path().join("templates"));
        let inputs = inputs(tmp.path());
        assert!(store.find(&inputs.key()).unwrap().is_none());
        let made = make(&store, &inputs).await;
        let found = store.find(&inputs.key()).unwrap().unwrap();
        assert_eq!(found.meta(), made.meta());
        assert_eq!(found.meta().memory_bytes, 1 << 20);
        let list = store.list().unwrap();
        assert_eq!(list.len(), 1);
        assert!(list[0].current);

        // A changed state file or a truncated memory file is corrupt.
        std::fs::write(found.dir.join(STATE), b"stat3").unwrap();
        assert!(matches!(
            store.find(&inputs.key()),
            Err(TemplateError::Corrupt { .. })
        ));
        std::fs::write(found.dir.join(STATE), b"state").unwrap();
        File::options()
            .write(true)
            .open(found.memory_path())
            .unwrap()
            .set_len(4096)
            .unwrap();
        let error = store.find(&inputs.key()).unwrap_err();
        assert!(
            error.to_string().contains("memory has 4096 bytes"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn an_unfinished_build_leaves_nothing_once_collected() {
        let tmp = tempfile::tempdir().unwrap();
        let store = TemplateStore::new(tmp.path().join("templates"));
        let inputs = inputs(tmp.path());
        let key = inputs.key();
        let lock = store.lock(&key, Duration::from_secs(1)).await.unwrap();
        let building = store.begin(&key, 4096, &lock).unwrap();
        // A crash: neither commit nor drop runs.
        std::mem::forget(building);
        // While the builder holds the lock, its directory stays.
        assert!(store.collect().unwrap().leftovers.is_empty());
        drop(lock);
        let gc = store.collect().unwrap();
        assert_eq!(gc.leftovers.len(), 1);
        assert!(store.find(&key).unwrap().is_none());
    }

    #[tokio::test]
    async fn a_second_builder_waits_for_the_lock() {
        let tmp = tempfile::tempdir().unwrap();
        let store = TemplateStore::new(tmp.path().join("templates"));
        let lock = store.lock("k", Duration::from_secs(1)).await.unwrap();
        let error = store
            .lock("k", Duration::from_millis(100))
            .await
            .unwrap_err();
        assert!(
            matches!(error, TemplateError::LockTimeout { .. }),
            "{error}"
        );
        drop(lock);
        store.lock("k", Duration::from_millis(100)).await.unwrap();
    }

    #[tokio::test]
    async fn templates_whose_inputs_changed_are_collected() {
        let tmp = tempfile::tempdir().unwrap();
        let store = TemplateStore::new(tmp.path().join("templates"));
        let inputs = inputs(tmp.path());
        make(&store, &inputs).await;
        assert!(store.collect().unwrap().templates.is_empty());
        std::fs::remove_file(tmp.path().join("kernel")).unwrap();
        std::fs::write(tmp.path().join("kernel"), b"new kernel").unwrap();
        assert_eq!(store.collect().unwrap().templates, vec![inputs.key()]);
        assert!(store.list().unwrap().is_empty());
    }
}
