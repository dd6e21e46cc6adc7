//! What a template depends on, and the key it is cached by.
//!
//! A template is a snapshot of a booted guest: it is valid only for the very
//! kernel, initramfs (which holds the agent), root image, QEMU binary,
//! memory size, vCPU count, accelerator, kernel command line and device set
//! it was made with. Files are identified by path, size, modification time
//! and inode, so a rebuilt agent, kernel or image, or an upgraded QEMU,
//! gives a new key without hashing hundreds of megabytes on every start.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Bumped when what a template holds or how it is made changes.
pub const TEMPLATE_FORMAT: u32 = 1;

/// One input file as it was when the template was made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileId {
    pub path: PathBuf,
    pub size: u64,
    pub mtime_ns: i128,
    pub inode: u64,
}

impl FileId {
    /// `path` as it is now.
    pub fn of(path: &Path) -> std::io::Result<Self> {
        let path = std::fs::canonicalize(path)?;
        let meta = std::fs::metadata(&path)?;
        Ok(FileId {
            size: meta.len(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            inode: meta.ino(),
            path,
        })
    }

    /// Whether the file is still the one recorded.
    pub fn is_current(&self) -> bool {
        FileId::of(&self.path).is_ok_and(|now| now == *self)
    }
}

/// Everything a template depends on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateInputs {
    pub format: u32,
    /// The host library that made it.
    pub airlock_version: String,
    pub qemu: FileId,
    pub kernel: FileId,
    pub initramfs: FileId,
    pub image: Option<FileId>,
    pub memory_mib: u32,
    pub vcpus: u32,
    pub accel: String,
    /// QEMU's `-cpu` model.
    pub cpu: String,
    pub kernel_cmdline: String,
    /// The names of the embedder's virtio-serial ports, in order.
    pub serial_ports: Vec<String>,
}

impl TemplateInputs {
    /// The cache key: a hash of every input.
    pub fn key(&self) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        let digest = Sha256::digest(&json);
        digest[..16].iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The input files that no longer match, by path.
    pub fn changed_files(&self) -> Vec<&Path> {
        [
            Some(&self.qemu),
            Some(&self.kernel),
            Some(&self.initramfs),
            self.image.as_ref(),
        ]
        .into_iter()
        .flatten()
        .filter(|file| !file.is_current())
        .map(|file| file.path.as_path())
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(dir: &Path) -> TemplateInputs {
        let file = |name: &str| {
            let path = dir.join(name);
            if !path.exists() {
                std::fs::write(&path, name).unwrap();
            }
            FileId::of(&path).unwrap()
        };
        TemplateInputs {
            format: TEMPLATE_FORMAT,
            airlock_version: "0".into(),
            qemu: file("qemu"),
            kernel: file("vmlinuz"),
            initramfs: file("initramfs"),
            image: None,
            memory_mib: 512,
            vcpus: 1,
            accel: "tcg".into(),
            cpu: "max".into(),
            kernel_cmdline: "console=ttyS0".into(),
            serial_ports: Vec::new(),
        }
    }

    #[test]
    fn every_input_changes_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let base = inputs(dir.path());
        assert_eq!(base.key(), inputs(dir.path()).key());
        assert_eq!(base.key().len(), 32);
        let mut other = base.clone();
        other.memory_mib = 256;
        assert_ne!(other.key(), base.key());
        let mut other = base.clone();
        other.cpu = "host".into();
        assert_ne!(other.key(), base.key());
        let mut other = base.clone();
        other.serial_ports.push("p".into());
        assert_ne!(other.key(), base.key());
        // A rebuilt initramfs (a new agent) is another file.
        std::fs::remove_file(dir.path().join("initramfs")).unwrap();
        std::fs::write(dir.path().join("initramfs"), "another agent").unwrap();
        let rebuilt = inputs(dir.path());
        assert_ne!(rebuilt.key(), base.key());
        assert_eq!(
            base.changed_files(),
            vec![dir.path().join("initramfs").canonicalize().unwrap()]
        );
        assert!(rebuilt.changed_files().is_empty());
    }
}
