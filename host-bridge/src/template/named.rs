//! Named templates on disk: what `airlock template build` makes.
//!
//! ```text
//! <dir>/<name>/template.json   NamedMeta: steps, build time, START's pid
//! <dir>/<name>/snapshot/       a TemplateStore holding the running guest
//! <dir>/.steps/                the step cache (see `build::cache`)
//! <dir>/.roots/<key>.ext4      built root filesystems, by their last step's
//!                              key (read-only in guests; a template whose
//!                              steps change no file uses its base image)
//! <dir>/.building-<name>-<pid> a build in progress; renamed to <name> when
//!                              complete, so a failed build leaves nothing
//! ```

use std::path::{Path, PathBuf};

use airlock_atomic_file::Mode;
use serde::{Deserialize, Serialize};

const META: &str = "template.json";
const SNAPSHOT: &str = "snapshot";
/// The step cache's directory in the named templates' directory.
pub const STEPS_DIR: &str = ".steps";
const BUILDING: &str = ".building-";

/// Overrides where named templates are kept.
pub const NAMED_DIR_ENV: &str = "AIRLOCK_NAMED_TEMPLATE_DIR";

/// Where named templates are kept: `$AIRLOCK_NAMED_TEMPLATE_DIR`, else
/// `named-templates/` in the artifact home.
pub fn named_dir() -> PathBuf {
    match std::env::var_os(NAMED_DIR_ENV) {
        Some(dir) => PathBuf::from(dir),
        None => crate::artifacts::home().join("named-templates"),
    }
}

/// Errors of the named templates' directory.
#[derive(Debug, thiserror::Error)]
pub enum NamedError {
    #[error("no template named {0}; `airlock template ls` lists them, `airlock template build` makes one")]
    NotFound(String),
    #[error("template name {0:?}: use letters, digits, '-', '_' and '.', not starting with '.'")]
    BadName(String),
    #[error("template {name} is unreadable ({reason}); remove it with `airlock template rm {name}` and build it again")]
    Corrupt { name: String, reason: String },
    #[error("named templates: i/o on {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> NamedError + '_ {
    move |source| NamedError::Io {
        path: path.to_owned(),
        source,
    }
}

/// What `template.json` records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NamedMeta {
    pub name: String,
    /// The base as the file named it.
    pub base: String,
    /// The root filesystem its sandboxes mount.
    pub rootfs: PathBuf,
    /// Each step's instruction and cache key, in order.
    pub steps: Vec<StepRecord>,
    pub memory_mib: u32,
    pub vcpus: u32,
    /// `ENV` after every step: the sandboxes' default environment.
    pub env: Vec<(String, String)>,
    pub workdir: Option<String>,
    pub user: Option<String>,
    /// `START` and `READY` as written ("" for none).
    pub start: String,
    pub ready: String,
    /// `START`'s process in the snapshot: its pid and its start time in
    /// clock ticks since the guest booted (`/proc/PID/stat` field 22).
    pub start_pid: Option<u32>,
    pub start_ticks: Option<u64>,
    pub built_unix_secs: u64,
    pub build_secs: f64,
}

/// One step as the build recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRecord {
    pub instruction: String,
    pub key: String,
}

/// A complete named template.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedTemplate {
    dir: PathBuf,
    meta: NamedMeta,
}

impl NamedTemplate {
    pub fn meta(&self) -> &NamedMeta {
        &self.meta
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The root filesystem its sandboxes mount.
    pub fn rootfs_path(&self) -> PathBuf {
        self.meta.rootfs.clone()
    }

    /// The template store holding its snapshot.
    pub fn snapshot_dir(&self) -> PathBuf {
        self.dir.join(SNAPSHOT)
    }

    /// Bytes its snapshot and its own root image take on disk (the
    /// snapshot's memory file is sparse; a base image is not counted).
    pub fn disk_bytes(&self) -> u64 {
        let own_root = self
            .meta
            .rootfs
            .starts_with(self.dir.parent().unwrap_or(&self.dir));
        disk_usage(&self.dir)
            + if own_root {
                disk_usage_of(&self.meta.rootfs)
            } else {
                0
            }
    }
}

/// The named templates in one directory.
#[derive(Debug, Clone)]
pub struct NamedStore {
    dir: PathBuf,
}

impl NamedStore {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        NamedStore { dir: dir.into() }
    }

    /// The store in [`named_dir`].
    pub fn open_default() -> Self {
        Self::new(named_dir())
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The step cache's directory.
    pub fn steps_dir(&self) -> PathBuf {
        self.dir.join(STEPS_DIR)
    }

    /// Bytes the whole store takes on disk: its templates, the step cache,
    /// the root images and builds in progress (sparse files count what
    /// they hold).
    pub fn disk_bytes(&self) -> u64 {
        disk_usage(&self.dir)
    }

    /// The template `name`.
    pub fn get(&self, name: &str) -> Result<NamedTemplate, NamedError> {
        check_name(name)?;
        let dir = self.dir.join(name);
        if !dir.is_dir() {
            return Err(NamedError::NotFound(name.to_owned()));
        }
        read(&dir, name)
    }

    /// Every named template, by name; unreadable ones as errors.
    pub fn list(&self) -> Result<Vec<Result<NamedTemplate, NamedError>>, NamedError> {
        let read_dir = match std::fs::read_dir(&self.dir) {
            Ok(read_dir) => read_dir,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(&self.dir)(e)),
        };
        let mut names: Vec<String> = read_dir
            .flatten()
            .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .filter(|name| !name.starts_with('.'))
            .collect();
        names.sort();
        Ok(names
            .iter()
            .map(|name| read(&self.dir.join(name), name))
            .collect())
    }

    /// Removes the template `name` (running sandboxes keep their mappings).
    pub fn remove(&self, name: &str) -> Result<(), NamedError> {
        check_name(name)?;
        let dir = self.dir.join(name);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(NamedError::NotFound(name.to_owned()))
            }
            Err(e) => Err(io(&dir)(e)),
        }
    }

    /// A directory for a new build of `name`, removed when dropped unless
    /// [`Staged::commit`] made it the template.
    pub fn stage(&self, name: &str) -> Result<Staged, NamedError> {
        check_name(name)?;
        std::fs::create_dir_all(&self.dir).map_err(io(&self.dir))?;
        let dir = self
            .dir
            .join(format!("{BUILDING}{name}-{}", std::process::id()));
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(io(&dir))?;
        }
        std::fs::create_dir(&dir).map_err(io(&dir))?;
        Ok(Staged {
            dir,
            target: self.dir.join(name),
            committed: false,
        })
    }

    /// Removes what builds that died left (`.building-*` whose process is gone).
    pub fn collect_leftovers(&self) -> Result<Vec<PathBuf>, NamedError> {
        let mut removed = Vec::new();
        let Ok(read_dir) = std::fs::read_dir(&self.dir) else {
            return Ok(removed);
        };
        for entry in read_dir.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(rest) = name.strip_prefix(BUILDING) else {
                continue;
            };
            let alive = rest
                .rsplit_once('-')
                .and_then(|(_, pid)| pid.parse::<u32>().ok())
                .is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists());
            if !alive {
                std::fs::remove_dir_all(entry.path()).map_err(io(&entry.path()))?;
                removed.push(entry.path());
            }
        }
        Ok(removed)
    }
}

/// A build's directory, on its way to being a named template.
#[derive(Debug)]
pub struct Staged {
    dir: PathBuf,
    target: PathBuf,
    committed: bool,
}

impl Staged {
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn snapshot_dir(&self) -> PathBuf {
        self.dir.join(SNAPSHOT)
    }

    /// A view of the staged template, for making its snapshot.
    pub fn as_template(&self, meta: NamedMeta) -> NamedTemplate {
        NamedTemplate {
            dir: self.dir.clone(),
            meta,
        }
    }

    /// Writes `meta` and makes the build the template, replacing an older
    /// one of the same name.
    pub fn commit(mut self, meta: NamedMeta) -> Result<NamedTemplate, NamedError> {
        let path = self.dir.join(META);
        let json = serde_json::to_vec_pretty(&meta).map_err(|e| io(&path)(e.into()))?;
        airlock_atomic_file::write(&path, &json, Mode::Default).map_err(io(&path))?;
        if self.target.exists() {
            std::fs::remove_dir_all(&self.target).map_err(io(&self.target))?;
        }
        airlock_atomic_file::rename(&self.dir, &self.target).map_err(io(&self.target))?;
        self.committed = true;
        Ok(NamedTemplate {
            dir: self.target.clone(),
            meta,
        })
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.committed {
            if let Err(error) = std::fs::remove_dir_all(&self.dir) {
                tracing::warn!(%error, dir = %self.dir.display(), "a failed build's directory was not removed");
            }
        }
    }
}

/// The longest name of a template, in bytes (the API's names' bound).
pub const MAX_NAME_BYTES: usize = 128;

/// Whether `name` can name a template.
pub fn check_name(name: &str) -> Result<(), NamedError> {
    let valid = !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid {
        Ok(())
    } else {
        Err(NamedError::BadName(name.to_owned()))
    }
}

fn read(dir: &Path, name: &str) -> Result<NamedTemplate, NamedError> {
    let corrupt = |reason: String| NamedError::Corrupt {
        name: name.to_owned(),
        reason,
    };
    let json = std::fs::read(dir.join(META)).map_err(|e| corrupt(format!("{META}: {e}")))?;
    let meta: NamedMeta =
        serde_json::from_slice(&json).map_err(|e| corrupt(format!("{META}: {e}")))?;
    if meta.name != name {
        return Err(corrupt(format!("{META} names {}", meta.name)));
    }
    if !meta.rootfs.is_file() {
        return Err(corrupt(format!("no root image {}", meta.rootfs.display())));
    }
    Ok(NamedTemplate {
        dir: dir.to_owned(),
        meta,
    })
}

/// Allocated bytes of the file or tree at `path`.
pub(crate) fn disk_usage_of(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => disk_usage(path),
        Ok(meta) => meta.blocks() * 512,
        Err(_) => 0,
    }
}

/// Allocated bytes under `dir`, recursively.
pub(crate) fn disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(read_dir) = std::fs::read_dir(dir) else {
        return 0;
    };
    read_dir
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => disk_usage(&entry.path()),
            _ => entry.metadata().map_or(0, |meta| meta.blocks() * 512),
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(name: &str, rootfs: &Path) -> NamedMeta {
        NamedMeta {
            name: name.into(),
            base: "default".into(),
            rootfs: rootfs.to_owned(),
            steps: vec![StepRecord {
                instruction: "RUN true".into(),
                key: "k".into(),
            }],
            memory_mib: 512,
            vcpus: 1,
            env: vec![],
            workdir: None,
            user: None,
            start: String::new(),
            ready: String::new(),
            start_pid: None,
            start_ticks: None,
            built_unix_secs: 0,
            build_secs: 1.0,
        }
    }

    #[test]
    fn a_staged_build_is_nothing_until_committed() {
        let tmp = tempfile::tempdir().unwrap();
        let store = NamedStore::new(tmp.path());
        let rootfs = tmp.path().join("rootfs.ext4");
        std::fs::write(&rootfs, b"fs").unwrap();
        {
            let staged = store.stage("web").unwrap();
            std::fs::write(staged.dir().join("x"), b"x").unwrap();
        }
        assert!(matches!(store.get("web"), Err(NamedError::NotFound(_))));
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);
        let staged = store.stage("web").unwrap();
        let made = staged.commit(meta("web", &rootfs)).unwrap();
        assert_eq!(store.get("web").unwrap().meta(), made.meta());
        assert_eq!(store.list().unwrap().len(), 1);
        store.remove("web").unwrap();
        assert!(matches!(store.remove("web"), Err(NamedError::NotFound(_))));
    }

    #[test]
    fn names_are_checked() {
        let long = "a".repeat(MAX_NAME_BYTES + 1);
        for bad in ["", ".steps", "a/b", "..", "x y", &long] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        check_name("web-1.2_x").unwrap();
        check_name(&long[1..]).unwrap();
    }
}
