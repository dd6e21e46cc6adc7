//! The image store: root filesystem images, cached by a hash of their inputs.
//!
//! `airlock-rootfs image build` writes images here; `airlock run --image`,
//! `airlock image ls` and `airlock image rm` read and prune it. The layout
//! under `<home>/images` (see [`crate::artifacts::home`]):
//!
//! ```text
//! <id>/rootfs.ext4     the image (ext4, attached read-only to every sandbox)
//! <id>/image.json      [`ImageMeta`]: where it came from, sizes, when built
//! names/<name>         one line: the id the name points at
//! tmp/                 builds in progress (renamed into <id>/ when done)
//! ```
//!
//! An id is the first 16 hex digits of the SHA-256 of the build's inputs, so
//! the same inputs find the same image and a rebuild is a rename away from
//! being visible: readers never see a half-written image.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use airlock_atomic_file::Mode;
use serde::{Deserialize, Serialize};
use tempfile::TempDir;

/// The name `airlock run` uses when no image is given.
pub const DEFAULT_IMAGE: &str = "default";
/// The image file inside an image's directory.
pub const IMAGE_FILE: &str = "rootfs.ext4";
/// The metadata file inside an image's directory.
pub const META_FILE: &str = "image.json";
/// Length of an image id in hex digits.
pub const ID_LEN: usize = 16;
const NAMES_DIR: &str = "names";
const TMP_DIR: &str = "tmp";

/// Errors reading or changing the image store.
#[derive(Debug, thiserror::Error)]
pub enum ImageStoreError {
    /// No image has this name or id.
    #[error("no image named {0:?}; see `airlock image ls`, or build one with `airlock-rootfs image build` (scripts/setup builds `default`)")]
    NotFound(String),
    /// A name that cannot be used.
    #[error("bad image name {0:?}: use 1-64 of [A-Za-z0-9._-], not starting with '.' and not 16 hex digits")]
    BadName(String),
    /// A file of the store could not be read or written.
    #[error("image store: cannot {action} {path}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// `image.json` is not valid.
    #[error("image store: {path} is not valid image metadata")]
    BadMeta {
        /// The metadata file.
        path: PathBuf,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
}

type Result<T, E = ImageStoreError> = std::result::Result<T, E>;

/// What an image's `image.json` records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageMeta {
    /// The image id (hash of the inputs).
    pub id: String,
    /// Where the image came from, for people (`debian bookworm +python3`, `oci /x`).
    pub source: String,
    /// Bytes of file content in the root filesystem.
    pub content_bytes: u64,
    /// Size of the ext4 image file.
    pub image_bytes: u64,
    /// When the build finished, seconds since the Unix epoch.
    pub created_unix: u64,
    /// How long the build took, seconds.
    pub build_seconds: f64,
}

/// One image in the store.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageInfo {
    /// Its metadata.
    pub meta: ImageMeta,
    /// The names that point at it, sorted.
    pub names: Vec<String>,
    /// The ext4 file to attach.
    pub path: PathBuf,
    /// Bytes the image takes on disk (it is a sparse file).
    pub disk_bytes: u64,
}

/// What [`ImageStore::remove`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removed {
    /// Names that were removed.
    pub names: Vec<String>,
    /// The image id whose files were deleted, if no name points at it any more.
    pub deleted: Option<String>,
}

/// The on-disk image cache.
#[derive(Debug, Clone)]
pub struct ImageStore {
    root: PathBuf,
}

impl ImageStore {
    /// The store under the Airlock home: `<home>/images`.
    pub fn open_default() -> Self {
        Self::at(crate::artifacts::home().join("images"))
    }

    /// A store rooted at `root` (created on first write).
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The store's directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The image with this id, if it is complete.
    pub fn get(&self, id: &str) -> Result<Option<ImageInfo>> {
        if !is_id(id) {
            return Ok(None);
        }
        let dir = self.root.join(id);
        let path = dir.join(IMAGE_FILE);
        let meta_path = dir.join(META_FILE);
        let text = match std::fs::read_to_string(&meta_path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(io("read", &meta_path, source)),
        };
        let meta: ImageMeta =
            serde_json::from_str(&text).map_err(|source| ImageStoreError::BadMeta {
                path: meta_path.clone(),
                source,
            })?;
        let disk_bytes = match std::fs::metadata(&path) {
            Ok(m) => {
                use std::os::unix::fs::MetadataExt;
                m.blocks() * 512
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(io("read", &path, source)),
        };
        let names = self
            .names()?
            .into_iter()
            .filter(|(_, target)| target == id)
            .map(|(name, _)| name)
            .collect();
        Ok(Some(ImageInfo {
            meta,
            names,
            path,
            disk_bytes,
        }))
    }

    /// The image a name or an id refers to (names first).
    pub fn resolve(&self, name_or_id: &str) -> Result<ImageInfo> {
        let id = match self.read_name(name_or_id)? {
            Some(id) => id,
            None => name_or_id.to_owned(),
        };
        self.get(&id)?
            .ok_or_else(|| ImageStoreError::NotFound(name_or_id.to_owned()))
    }

    /// The file to attach for `--image ARG`: an existing file when `ARG`
    /// looks like a path, else the image of that name or id.
    pub fn locate(&self, arg: &str) -> Result<PathBuf> {
        let as_path = Path::new(arg);
        if arg.contains('/') || (as_path.is_file() && !valid_name(arg)) {
            return match std::fs::metadata(as_path) {
                Ok(m) if m.is_file() => Ok(as_path.to_owned()),
                Ok(_) => Err(io(
                    "use",
                    as_path,
                    std::io::Error::other("not a regular file"),
                )),
                Err(source) => Err(io("open", as_path, source)),
            };
        }
        Ok(self.resolve(arg)?.path)
    }

    /// Every complete image, newest first.
    pub fn list(&self) -> Result<Vec<ImageInfo>> {
        let entries = match std::fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(io("list", &self.root, source)),
        };
        let mut images = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| io("list", &self.root, source))?;
            if let Some(id) = entry.file_name().to_str() {
                if let Some(info) = self.get(id)? {
                    images.push(info);
                }
            }
        }
        images.sort_by(|a, b| {
            b.meta
                .created_unix
                .cmp(&a.meta.created_unix)
                .then(a.meta.id.cmp(&b.meta.id))
        });
        Ok(images)
    }

    /// Points `name` at the image `id` (replacing what it pointed at).
    pub fn tag(&self, name: &str, id: &str) -> Result<()> {
        if !valid_name(name) {
            return Err(ImageStoreError::BadName(name.to_owned()));
        }
        let dir = self.root.join(NAMES_DIR);
        std::fs::create_dir_all(&dir).map_err(|source| io("create", &dir, source))?;
        let path = dir.join(name);
        airlock_atomic_file::write(&path, format!("{id}\n").as_bytes(), Mode::Default)
            .map_err(|source| io("write", &path, source))
    }

    /// Removes a name, or an id and every name pointing at it. The image's
    /// files go when no name points at it any more. Running sandboxes keep
    /// the file they opened.
    pub fn remove(&self, name_or_id: &str) -> Result<Removed> {
        let names = self.names()?;
        let (removed_names, id) = if let Some(id) = self.read_name(name_or_id)? {
            (vec![name_or_id.to_owned()], id)
        } else if self.get(name_or_id)?.is_some() {
            let pointing = names
                .iter()
                .filter(|(_, target)| target == name_or_id)
                .map(|(name, _)| name.clone())
                .collect();
            (pointing, name_or_id.to_owned())
        } else {
            return Err(ImageStoreError::NotFound(name_or_id.to_owned()));
        };
        for name in &removed_names {
            let path = self.root.join(NAMES_DIR).join(name);
            std::fs::remove_file(&path).map_err(|source| io("remove", &path, source))?;
        }
        let still_named = names
            .iter()
            .any(|(name, target)| *target == id && !removed_names.contains(name));
        let deleted = if still_named || !is_id(&id) {
            None
        } else {
            let dir = self.root.join(&id);
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => Some(id),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(source) => return Err(io("remove", &dir, source)),
            }
        };
        Ok(Removed {
            names: removed_names,
            deleted,
        })
    }

    /// A fresh directory for a build in progress, on the store's filesystem
    /// so [`ImageStore::commit`] can rename it into place. Removed on drop.
    pub fn staging(&self) -> Result<TempDir> {
        let dir = self.root.join(TMP_DIR);
        std::fs::create_dir_all(&dir).map_err(|source| io("create", &dir, source))?;
        tempfile::Builder::new()
            .prefix("build-")
            .tempdir_in(&dir)
            .map_err(|source| io("create a build directory in", &dir, source))
    }

    /// Moves a finished build into the store: `staged` holds the image file,
    /// `meta` is written beside it. An existing image of the same id is
    /// replaced.
    pub fn commit(&self, staged: TempDir, image: &Path, meta: &ImageMeta) -> Result<ImageInfo> {
        let dir = self.root.join(&meta.id);
        let build = staged.path().join("image");
        std::fs::create_dir_all(&build).map_err(|source| io("create", &build, source))?;
        let target = build.join(IMAGE_FILE);
        if image != target {
            std::fs::rename(image, &target).map_err(|source| io("move", image, source))?;
        }
        let meta_path = build.join(META_FILE);
        let text =
            serde_json::to_string_pretty(meta).map_err(|source| ImageStoreError::BadMeta {
                path: meta_path.clone(),
                source,
            })?;
        airlock_atomic_file::write(&meta_path, text.as_bytes(), Mode::Default)
            .map_err(|source| io("write", &meta_path, source))?;
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(io("replace", &dir, source)),
        }
        airlock_atomic_file::rename(&build, &dir)
            .map_err(|source| io("move into place", &dir, source))?;
        drop(staged);
        self.get(&meta.id)?
            .ok_or_else(|| ImageStoreError::NotFound(meta.id.clone()))
    }

    fn read_name(&self, name: &str) -> Result<Option<String>> {
        if !valid_name(name) {
            return Ok(None);
        }
        let path = self.root.join(NAMES_DIR).join(name);
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(Some(text.trim().to_owned())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(io("read", &path, source)),
        }
    }

    /// Every `(name, id)` pair.
    fn names(&self) -> Result<Vec<(String, String)>> {
        let dir = self.root.join(NAMES_DIR);
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(io("list", &dir, source)),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| io("list", &dir, source))?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if let Some(id) = self.read_name(&name)? {
                names.push((name, id));
            }
        }
        names.sort();
        Ok(names)
    }
}

/// Seconds since the Unix epoch, for [`ImageMeta::created_unix`].
pub fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Whether `text` has the shape of an image id.
pub fn is_id(text: &str) -> bool {
    text.len() == ID_LEN
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && !name.starts_with('.')
        && !is_id(name)
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn io(action: &'static str, path: &Path, source: std::io::Error) -> ImageStoreError {
    ImageStoreError::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn build(store: &ImageStore, id: &str, created: u64) -> ImageInfo {
        let staged = store.staging().unwrap();
        let image = staged.path().join("out.ext4");
        std::fs::write(&image, b"ext4").unwrap();
        let meta = ImageMeta {
            id: id.to_owned(),
            source: "test".into(),
            content_bytes: 4,
            image_bytes: 4,
            created_unix: created,
            build_seconds: 0.5,
        };
        store.commit(staged, &image, &meta).unwrap()
    }

    #[test]
    fn commit_tag_resolve_and_list() {
        let dir = tempfile::tempdir().unwrap();
        let store = ImageStore::at(dir.path().join("images"));
        assert!(store.list().unwrap().is_empty());
        let a = build(&store, "0123456789abcdef", 10);
        build(&store, "fedcba9876543210", 20);
        assert_eq!(std::fs::read(&a.path).unwrap(), b"ext4");
        store.tag("default", "0123456789abcdef").unwrap();

        let info = store.resolve("default").unwrap();
        assert_eq!(info.meta.id, "0123456789abcdef");
        assert_eq!(info.names, vec!["default".to_owned()]);
        assert_eq!(store.resolve("fedcba9876543210").unwrap().names.len(), 0);
        let ids: Vec<_> = store
            .list()
            .unwrap()
            .into_iter()
            .map(|i| i.meta.id)
            .collect();
        assert_eq!(ids, vec!["fedcba9876543210", "0123456789abcdef"]);
        // The staging area is empty again.
        assert_eq!(
            std::fs::read_dir(store.root().join(TMP_DIR))
                .unwrap()
                .count(),
            0
        );
    }

    #[test]
    fn missing_names_point_at_the_build_command() {
        let dir = tempfile::tempdir().unwrap();
        let store = ImageStore::at(dir.path());
        let err = store.resolve("default").unwrap_err().to_string();
        assert!(err.contains("airlock-rootfs image build"), "{err}");
        assert!(store.tag("../x", "0123456789abcdef").is_err());
        assert!(store.tag("0123456789abcdef", "0123456789abcdef").is_err());
    }

    #[test]
    fn removing_the_last_name_deletes_the_image() {
        let dir = tempfile::tempdir().unwrap();
        let store = ImageStore::at(dir.path());
        let info = build(&store, "0123456789abcdef", 1);
        store.tag("a", "0123456789abcdef").unwrap();
        store.tag("b", "0123456789abcdef").unwrap();

        let removed = store.remove("a").unwrap();
        assert_eq!(removed.deleted, None);
        assert!(info.path.is_file());
        let removed = store.remove("b").unwrap();
        assert_eq!(removed.deleted.as_deref(), Some("0123456789abcdef"));
        assert!(!info.path.exists());
        assert!(matches!(
            store.remove("b"),
            Err(ImageStoreError::NotFound(_))
        ));
    }

    #[test]
    fn removing_an_id_removes_its_names() {
        let dir = tempfile::tempdir().unwrap();
        let store = ImageStore::at(dir.path());
        build(&store, "0123456789abcdef", 1);
        store.tag("a", "0123456789abcdef").unwrap();
        let removed = store.remove("0123456789abcdef").unwrap();
        assert_eq!(removed.names, vec!["a".to_owned()]);
        assert!(removed.deleted.is_some());
        assert!(store.list().unwrap().is_empty());
    }

    #[test]
    fn locate_takes_paths_and_names() {
        let dir = tempfile::tempdir().unwrap();
        let store = ImageStore::at(dir.path().join("images"));
        let info = build(&store, "0123456789abcdef", 1);
        store.tag("py", "0123456789abcdef").unwrap();
        assert_eq!(store.locate("py").unwrap(), info.path);
        let file = dir.path().join("mine.ext4");
        std::fs::write(&file, b"x").unwrap();
        assert_eq!(store.locate(file.to_str().unwrap()).unwrap(), file);
        assert!(store.locate("/nonexistent/x.ext4").is_err());
        assert!(store.locate("nope").is_err());
    }
}
