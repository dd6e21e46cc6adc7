//! The step cache: one ext4 disk per step that changed files, keyed by a
//! hash of everything the step's result depends on.
//!
//! A build step runs in a VM whose root is the base image (read-only)
//! under an overlay whose writable layer is a disk (the same mechanism as
//! a workspace). That disk starts as a copy of the previous step's disk,
//! so after the step it holds every change since the base: it is the
//! step's whole state, and the next step's starting point. Copies are
//! sparse (`cp --sparse=always`): a disk costs what its changes take.
//!
//! ```text
//! <steps>/<key>.ext4          the overlay's writable layer after the step
//! <steps>/<key>.json          what made it (instruction, time), for gc
//! <steps>/.work-<key>-<pid>   a step being run; renamed when it succeeded
//! ```
//!
//! A step's key hashes its parent's key, its instruction, the `ENV`,
//! `WORKDIR`, `USER` and `ARG` values it runs with and, for `COPY`/`ADD`,
//! the copied files' paths, modes and contents. The first key hashes the
//! base image file's identity.

use std::collections::BTreeSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use airlock_atomic_file::Mode;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::BuildError;
use crate::template::{FileId, Step, StepContext};

const WORK: &str = ".work-";
/// Bumped when what a step's disk holds, or how a step runs, changes.
const CACHE_FORMAT: u32 = 1;

/// What `<key>.json` records.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CachedStep {
    pub key: String,
    pub instruction: String,
    pub created_unix_secs: u64,
}

/// The step cache in one directory.
#[derive(Debug, Clone)]
pub struct StepCache {
    dir: PathBuf,
}

impl StepCache {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        StepCache { dir: dir.into() }
    }

    /// The disk of step `key`, if it is cached.
    pub fn find(&self, key: &str) -> Option<PathBuf> {
        let path = self.dir.join(format!("{key}.ext4"));
        path.is_file().then_some(path)
    }

    /// A fresh working file for step `key`: a sparse copy of `parent`'s
    /// disk, or nothing yet (the first step's disk is formatted at boot).
    pub fn work(&self, key: &str, parent: Option<&Path>) -> Result<WorkDisk, BuildError> {
        std::fs::create_dir_all(&self.dir).map_err(BuildError::io(&self.dir))?;
        let path = self
            .dir
            .join(format!("{WORK}{key}-{}.ext4", std::process::id()));
        let _ = std::fs::remove_file(&path);
        if let Some(parent) = parent {
            sparse_copy(parent, &path)?;
        }
        Ok(WorkDisk { path, done: false })
    }

    /// Makes `work` the cached disk of step `key`.
    pub fn commit(
        &self,
        mut work: WorkDisk,
        key: &str,
        instruction: &str,
    ) -> Result<PathBuf, BuildError> {
        let target = self.dir.join(format!("{key}.ext4"));
        airlock_atomic_file::rename(&work.path, &target).map_err(BuildError::io(&target))?;
        work.done = true;
        self.write_record(key, instruction)?;
        Ok(target)
    }

    /// Records step `key`, which changes no file (`ENV`, `USER`, `WORKDIR`).
    pub fn record(&self, key: &str, instruction: &str) -> Result<(), BuildError> {
        std::fs::create_dir_all(&self.dir).map_err(BuildError::io(&self.dir))?;
        self.write_record(key, instruction)
    }

    /// Whether step `key` was run before (its record is there).
    pub fn known(&self, key: &str) -> bool {
        self.dir.join(format!("{key}.json")).is_file()
    }

    fn write_record(&self, key: &str, instruction: &str) -> Result<(), BuildError> {
        let record = CachedStep {
            key: key.to_owned(),
            instruction: instruction.to_owned(),
            created_unix_secs: airlock_images::now_unix(),
        };
        let meta = self.dir.join(format!("{key}.json"));
        let json = serde_json::to_vec_pretty(&record).unwrap_or_default();
        airlock_atomic_file::write(&meta, &json, Mode::Default).map_err(BuildError::io(&meta))
    }

    /// Removes every cached step whose key is not in `keep`, and working
    /// files of builds whose process is gone; returns the bytes freed.
    pub fn collect(&self, keep: &BTreeSet<String>) -> Result<u64, BuildError> {
        let mut freed = 0;
        let Ok(read_dir) = std::fs::read_dir(&self.dir) else {
            return Ok(0);
        };
        for entry in read_dir.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let remove = match name.strip_prefix(WORK) {
                Some(rest) => {
                    let pid = rest
                        .trim_end_matches(".ext4")
                        .rsplit_once('-')
                        .and_then(|(_, pid)| pid.parse::<u32>().ok());
                    !pid.is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists())
                }
                None => {
                    let key = name
                        .strip_suffix(".ext4")
                        .or_else(|| name.strip_suffix(".json"))
                        .unwrap_or(&name);
                    !keep.contains(key)
                }
            };
            if remove {
                freed += entry.metadata().map_or(0, |m| m.blocks() * 512);
                std::fs::remove_file(entry.path()).map_err(BuildError::io(&entry.path()))?;
            }
        }
        Ok(freed)
    }
}

/// A step's disk while the step runs; removed if dropped uncommitted.
#[derive(Debug)]
pub struct WorkDisk {
    path: PathBuf,
    done: bool,
}

impl WorkDisk {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for WorkDisk {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn sparse_copy(from: &Path, to: &Path) -> Result<(), BuildError> {
    let output = std::process::Command::new("cp")
        .arg("--sparse=always")
        .arg(from)
        .arg(to)
        .output()
        .map_err(BuildError::io(to))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(BuildError::Host(format!(
            "cp {} {}: {}",
            from.display(),
            to.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

/// A hash under construction; fields are length-prefixed so they cannot
/// run together.
pub struct KeyHasher(Sha256);

impl KeyHasher {
    pub fn new(kind: &str) -> Self {
        let mut hasher = KeyHasher(Sha256::new());
        hasher.field(kind.as_bytes());
        hasher
    }

    pub fn field(&mut self, bytes: &[u8]) -> &mut Self {
        self.0.update((bytes.len() as u64).to_le_bytes());
        self.0.update(bytes);
        self
    }

    pub fn finish(self) -> String {
        self.0.finalize()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// The first key: the base image file as it is.
pub fn base_key(image: &Path) -> Result<String, BuildError> {
    let id = FileId::of(image).map_err(BuildError::io(image))?;
    let json = serde_json::to_vec(&id).unwrap_or_default();
    let mut hasher = KeyHasher::new("base");
    hasher.field(&CACHE_FORMAT.to_le_bytes()).field(&json);
    Ok(hasher.finish())
}

/// The key of `step` after `parent`, run with `context`; `context_dir` is
/// where `COPY` reads from.
pub fn step_key(
    parent: &str,
    step: &Step,
    context: &StepContext,
    context_dir: &Path,
) -> Result<String, BuildError> {
    let mut hasher = KeyHasher::new("step");
    hasher.field(parent.as_bytes());
    hasher.field(step.kind.describe().as_bytes());
    if let crate::template::StepKind::Copy(copy) = &step.kind {
        hasher.field(format!("{:?} {:?}", copy.chown, copy.chmod).as_bytes());
        for source in &copy.sources {
            hash_tree(&mut hasher, &context_dir.join(source), Path::new(source))?;
        }
    }
    for (key, value) in &context.env {
        hasher.field(key.as_bytes()).field(value.as_bytes());
    }
    hasher.field(context.workdir.as_deref().unwrap_or("").as_bytes());
    hasher.field(context.user.as_deref().unwrap_or("").as_bytes());
    for (key, value) in &step.args {
        hasher.field(key.as_bytes()).field(value.as_bytes());
    }
    Ok(hasher.finish())
}

/// Hashes the file or tree at `path` (as `name`): paths, modes, link
/// targets and contents, in a fixed order.
fn hash_tree(hasher: &mut KeyHasher, path: &Path, name: &Path) -> Result<(), BuildError> {
    let meta = std::fs::symlink_metadata(path).map_err(|source| BuildError::Context {
        path: path.to_owned(),
        source,
    })?;
    hasher.field(name.as_os_str().as_encoded_bytes());
    hasher.field(&meta.permissions().mode().to_le_bytes());
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(path).map_err(BuildError::io(path))?;
        hasher.field(target.as_os_str().as_encoded_bytes());
    } else if meta.is_dir() {
        let mut entries: Vec<_> = std::fs::read_dir(path)
            .map_err(BuildError::io(path))?
            .flatten()
            .map(|entry| entry.file_name())
            .collect();
        entries.sort();
        for entry in entries {
            hash_tree(hasher, &path.join(&entry), &name.join(&entry))?;
        }
    } else {
        let mut file = std::fs::File::open(path).map_err(BuildError::io(path))?;
        let mut digest = Sha256::new();
        std::io::copy(&mut file, &mut digest).map_err(BuildError::io(path))?;
        hasher.field(&digest.finalize());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::TemplateSpec;

    fn keys(spec: &TemplateSpec, dir: &Path) -> Vec<String> {
        let mut parent = "base".to_owned();
        let mut context = StepContext::default();
        let mut out = Vec::new();
        for step in spec.steps() {
            parent = step_key(&parent, step, &context, dir).unwrap();
            context.apply(&step.kind);
            out.push(parent.clone());
        }
        out
    }

    #[test]
    fn a_change_changes_its_step_and_every_later_one() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("app")).unwrap();
        std::fs::write(tmp.path().join("app/main.py"), "print(1)").unwrap();
        let spec = |run: &str| {
            TemplateSpec::from_image("default")
                .run("true")
                .copy("app", "/srv/app")
                .env("A", "1")
                .run(run)
        };
        let first = keys(&spec("echo 1"), tmp.path());
        assert_eq!(first, keys(&spec("echo 1"), tmp.path()), "stable");
        let last = keys(&spec("echo 2"), tmp.path());
        assert_eq!(first[..3], last[..3]);
        assert_ne!(first[3], last[3]);
        // A copied file's content changes the COPY and what follows.
        std::fs::write(tmp.path().join("app/main.py"), "print(2)").unwrap();
        let copied = keys(&spec("echo 1"), tmp.path());
        assert_eq!(first[0], copied[0]);
        assert!(first[1..].iter().zip(&copied[1..]).all(|(a, b)| a != b));
    }

    #[test]
    fn collect_keeps_what_is_used() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = StepCache::new(tmp.path());
        let work = cache.work("k1", None).unwrap();
        std::fs::write(work.path(), b"disk").unwrap();
        cache.commit(work, "k1", "RUN true").unwrap();
        let work = cache.work("k2", Some(&tmp.path().join("k1.ext4"))).unwrap();
        assert_eq!(std::fs::read(work.path()).unwrap(), b"disk");
        cache.commit(work, "k2", "RUN true").unwrap();
        assert!(cache.find("k1").is_some());
        let keep = ["k2".to_owned()].into();
        assert!(cache.collect(&keep).unwrap() > 0);
        assert!(cache.find("k1").is_none());
        assert!(cache.find("k2").is_some());
        assert!(!tmp.path().join("k1.json").exists());
    }
}
