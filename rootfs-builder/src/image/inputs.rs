//! An image's id: a hash of everything the build reads.
//!
//! [`Inputs`] feeds labelled fields, whole files and directory trees into
//! SHA-256; [`Inputs::id`] is the first 16 hex digits, the image store's id
//! (see `airlock_images`). Fields are length-prefixed, so no two different
//! input lists hash alike by running together. Trees are walked in sorted
//! order, each entry contributing its path, kind, mode, owner, size and
//! content (or link target), so a changed file, mode or owner is a new image
//! while a touched mtime is not.

use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use sha2::{Digest, Sha256};

/// Bumped when the builder changes what it makes from the same inputs.
pub const FORMAT_VERSION: u32 = 1;

/// A running hash of a build's inputs.
#[derive(Debug, Clone)]
pub struct Inputs {
    hasher: Sha256,
}

impl Default for Inputs {
    fn default() -> Self {
        Self::new()
    }
}

impl Inputs {
    /// Starts a hash, seeded with the builder's format version.
    pub fn new() -> Self {
        let mut inputs = Self {
            hasher: Sha256::new(),
        };
        inputs.field("airlock-image-format", &FORMAT_VERSION.to_string());
        inputs
    }

    /// Adds a labelled value.
    pub fn field(&mut self, key: &str, value: &str) -> &mut Self {
        self.bytes(key.as_bytes());
        self.bytes(value.as_bytes());
        self
    }

    /// Adds a file's content.
    pub fn file(&mut self, path: &Path) -> io::Result<&mut Self> {
        let mut file = fs::File::open(path)?;
        let len = file.metadata()?.len();
        self.hasher.update(len.to_le_bytes());
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = file.read(&mut buf)?;
            if n == 0 {
                break;
            }
            self.hasher.update(&buf[..n]);
        }
        Ok(self)
    }

    /// Adds a directory tree (not following symlinks).
    pub fn tree(&mut self, root: &Path) -> io::Result<&mut Self> {
        self.walk(root, Path::new(""))?;
        Ok(self)
    }

    fn walk(&mut self, root: &Path, relative: &Path) -> io::Result<()> {
        let path = root.join(relative);
        let meta = fs::symlink_metadata(&path)?;
        let kind = meta.file_type();
        self.bytes(relative.as_os_str().as_encoded_bytes());
        self.field(
            "entry",
            &format!(
                "mode={:o} uid={} gid={} rdev={} size={}",
                meta.mode(),
                meta.uid(),
                meta.gid(),
                meta.rdev(),
                if kind.is_file() { meta.len() } else { 0 }
            ),
        );
        if kind.is_file() {
            self.file(&path)?;
        } else if kind.is_symlink() {
            self.bytes(fs::read_link(&path)?.as_os_str().as_encoded_bytes());
        } else if kind.is_dir() {
            let mut names = fs::read_dir(&path)?
                .map(|entry| entry.map(|e| e.file_name()))
                .collect::<io::Result<Vec<_>>>()?;
            names.sort();
            for name in names {
                self.walk(root, &relative.join(name))?;
            }
        }
        Ok(())
    }

    fn bytes(&mut self, bytes: &[u8]) {
        self.hasher.update((bytes.len() as u64).to_le_bytes());
        self.hasher.update(bytes);
    }

    /// The image id: 16 hex digits of the hash.
    pub fn id(&self) -> String {
        let digest = self.hasher.clone().finalize();
        super::oci::hex(&digest)[..airlock_images::ID_LEN].to_owned()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn tree_id(root: &Path) -> String {
        Inputs::new().tree(root).unwrap().id()
    }

    #[test]
    fn ids_are_stable_and_shaped_like_store_ids() {
        let a = Inputs::new().field("suite", "bookworm").id();
        let b = Inputs::new().field("suite", "bookworm").id();
        assert_eq!(a, b);
        assert!(airlock_images::is_id(&a), "{a}");
        assert_ne!(a, Inputs::new().field("suite", "trixie").id());
    }

    #[test]
    fn fields_do_not_run_together() {
        let ab = Inputs::new().field("k", "ab").field("k", "c").id();
        let a_bc = Inputs::new().field("k", "a").field("k", "bc").id();
        assert_ne!(ab, a_bc);
    }

    #[test]
    fn trees_hash_content_and_mode_not_mtime() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("etc")).unwrap();
        fs::write(dir.path().join("etc/motd"), "hi").unwrap();
        std::os::unix::fs::symlink("motd", dir.path().join("etc/link")).unwrap();
        let first = tree_id(dir.path());

        // Same content rewritten (new mtime): same id.
        fs::write(dir.path().join("etc/motd"), "hi").unwrap();
        assert_eq!(tree_id(dir.path()), first);

        fs::write(dir.path().join("etc/motd"), "ho").unwrap();
        let changed = tree_id(dir.path());
        assert_ne!(changed, first);

        fs::set_permissions(
            dir.path().join("etc/motd"),
            fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        assert_ne!(tree_id(dir.path()), changed);
    }

    #[test]
    fn files_hash_their_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rootfs.tar");
        fs::write(&path, b"one").unwrap();
        let one = Inputs::new().file(&path).unwrap().id();
        fs::write(&path, b"two").unwrap();
        assert_ne!(Inputs::new().file(&path).unwrap().id(), one);
    }
}
