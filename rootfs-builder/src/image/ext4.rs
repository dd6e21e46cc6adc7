//! Turning a directory tree into an ext4 image file without root or loop
//! devices: `mkfs.ext4 -d DIR` populates the new filesystem from the tree.
//!
//! [`measure`] walks the tree for its content size and inode count;
//! [`make`] sizes the image from that plus headroom, creates a sparse file
//! and runs mkfs.ext4 (no journal: the image is only ever mounted
//! read-only; no reserved blocks). If the estimate was short, it retries once
//! half again as big. A disk without room for the content is a
//! [`ImageError::DiskFull`], before mkfs runs and after it fails.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::debian::find_program;
use super::ImageError;

const BLOCK: u64 = 4096;
const MIB: u64 = 1 << 20;
/// Fixed filesystem overhead beyond the content: superblocks, bitmaps,
/// group descriptors.
const FIXED_OVERHEAD: u64 = 16 * MIB;
/// Bytes of inode table per inode (`mkfs.ext4 -I 256`).
const INODE_SIZE: u64 = 256;

/// What a tree holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TreeSize {
    /// Bytes of regular file content.
    pub content_bytes: u64,
    /// Bytes the content takes in whole 4 KiB blocks (directories included).
    pub block_bytes: u64,
    /// Files, directories, links and nodes.
    pub inodes: u64,
}

/// What [`make`] built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ext4Image {
    /// The tree that went in.
    pub tree: TreeSize,
    /// Size of the image file.
    pub image_bytes: u64,
}

/// Walks `root` (not following symlinks).
pub fn measure(root: &Path) -> Result<TreeSize, ImageError> {
    let mut size = TreeSize::default();
    let mut stack = vec![root.to_owned()];
    while let Some(path) = stack.pop() {
        let meta = fs::symlink_metadata(&path).map_err(|e| io("read", &path, e))?;
        size.inodes += 1;
        if meta.is_file() {
            size.content_bytes += meta.len();
            size.block_bytes += meta.len().div_ceil(BLOCK) * BLOCK;
        } else if meta.is_dir() {
            size.block_bytes += BLOCK;
            for entry in fs::read_dir(&path).map_err(|e| io("list", &path, e))? {
                stack.push(entry.map_err(|e| io("list", &path, e))?.path());
            }
        } else if meta.file_type().is_symlink() && meta.size() > 60 {
            size.block_bytes += BLOCK;
        }
    }
    Ok(size)
}

/// The image size for a tree: content blocks plus 10 %, inode tables and
/// fixed overhead, plus `headroom`, in whole MiB.
pub fn image_size(tree: &TreeSize, headroom: u64) -> u64 {
    let inodes = inode_count(tree);
    let bytes =
        tree.block_bytes + tree.block_bytes / 10 + inodes * INODE_SIZE + FIXED_OVERHEAD + headroom;
    bytes.div_ceil(MIB) * MIB
}

/// Inodes to allocate: what the tree has plus a quarter, at least 1024 spare.
fn inode_count(tree: &TreeSize) -> u64 {
    tree.inodes + (tree.inodes / 4).max(1024)
}

/// Builds `out` from `root`.
pub fn make(root: &Path, out: &Path, headroom: u64) -> Result<Ext4Image, ImageError> {
    let tree = measure(root)?;
    let mut image_bytes = image_size(&tree, headroom);
    check_free_space(out, tree.block_bytes)?;
    let mut attempt = 0;
    loop {
        attempt += 1;
        match mkfs(root, out, image_bytes, inode_count(&tree)) {
            Ok(()) => {
                return Ok(Ext4Image { tree, image_bytes });
            }
            Err(error) if is_out_of_space(&error) => {
                // The host's disk, not the image, may be what filled up;
                // the half-written image counts against it.
                if let Err(error) = fs::remove_file(out) {
                    tracing::debug!(%error, "cannot remove the partial image");
                }
                check_free_space(out, tree.block_bytes)?;
                if attempt > 1 {
                    return Err(error);
                }
                tracing::warn!(%error, bytes = image_bytes, "image too small? retrying bigger");
                image_bytes = (image_bytes + image_bytes / 2).div_ceil(MIB) * MIB;
            }
            Err(error) if attempt == 1 => {
                tracing::warn!(%error, bytes = image_bytes, "image too small? retrying bigger");
                image_bytes = (image_bytes + image_bytes / 2).div_ceil(MIB) * MIB;
            }
            Err(error) => return Err(error),
        }
    }
}

/// Fails with [`ImageError::DiskFull`] unless the filesystem `out` goes to
/// has room for `content` bytes plus the fixed overhead.
fn check_free_space(out: &Path, content: u64) -> Result<(), ImageError> {
    let dir = out
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let stat = match nix::sys::statvfs::statvfs(dir) {
        Ok(stat) => stat,
        // Unknown free space is mkfs's to find out.
        Err(_) => return Ok(()),
    };
    let free = stat.blocks_available().saturating_mul(stat.fragment_size());
    let needed = content + FIXED_OVERHEAD;
    if free < needed {
        return Err(ImageError::DiskFull {
            dir: dir.to_owned(),
            needed_mib: needed.div_ceil(MIB),
            free_mib: free / MIB,
        });
    }
    Ok(())
}

/// Whether mkfs failed for want of space (in the image or on the disk).
fn is_out_of_space(error: &ImageError) -> bool {
    matches!(error, ImageError::Tool { detail, .. } if detail.contains("No space left on device"))
}

fn mkfs(root: &Path, out: &Path, bytes: u64, inodes: u64) -> Result<(), ImageError> {
    match fs::remove_file(out) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("replace", out, e)),
    }
    let file = fs::File::create(out).map_err(|e| io("create", out, e))?;
    file.set_len(bytes).map_err(|e| io("size", out, e))?;
    drop(file);
    let program = find_program("mkfs.ext4");
    let output = Command::new(&program)
        .args([
            "-q", "-F", "-t", "ext4", "-b", "4096", "-I", "256", "-m", "0",
        ])
        .args(["-O", "^has_journal", "-L", "airlock-root"])
        .args(["-E", "assume_storage_prezeroed=1"])
        .arg("-N")
        .arg(inodes.to_string())
        .arg("-d")
        .arg(root)
        .arg(out)
        .output()
        .map_err(|e| ImageError::Tool {
            program: program.clone(),
            detail: format!("{e}; install Debian's e2fsprogs"),
        })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(ImageError::Tool {
            program,
            detail: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }
}

fn io(action: &'static str, path: &Path, source: std::io::Error) -> ImageError {
    ImageError::Io {
        action,
        path: PathBuf::from(path),
        source,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn measures_content_and_inodes() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("d")).unwrap();
        fs::write(dir.path().join("d/a"), vec![0u8; 5000]).unwrap();
        fs::write(dir.path().join("b"), b"x").unwrap();
        std::os::unix::fs::symlink("d/a", dir.path().join("l")).unwrap();
        let size = measure(dir.path()).unwrap();
        assert_eq!(size.content_bytes, 5001);
        assert_eq!(size.inodes, 5);
        // two dirs, 2 blocks for a, 1 for b.
        assert_eq!(size.block_bytes, 5 * BLOCK);
    }

    #[test]
    fn a_disk_without_room_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("rootfs.ext4");
        check_free_space(&out, 1 << 20).unwrap();
        let error = check_free_space(&out, u64::MAX / 4).unwrap_err();
        assert!(matches!(error, ImageError::DiskFull { .. }), "{error:?}");
        let text = error.to_string();
        assert!(text.contains("not enough free disk space"), "{text}");
        assert!(text.contains(&dir.path().display().to_string()), "{text}");
    }

    #[test]
    fn size_is_content_plus_headroom_in_mib() {
        let tree = TreeSize {
            content_bytes: 100 * MIB,
            block_bytes: 100 * MIB,
            inodes: 1000,
        };
        let size = image_size(&tree, 64 * MIB);
        assert_eq!(size % MIB, 0);
        assert!(size >= 100 * MIB + 64 * MIB + FIXED_OVERHEAD, "{size}");
        assert!(size < 200 * MIB, "{size}");
    }

    #[test]
    fn builds_an_ext4_image_from_a_tree() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        fs::create_dir_all(root.join("etc")).unwrap();
        fs::write(root.join("etc/hello"), b"hello").unwrap();
        let out = dir.path().join("rootfs.ext4");
        let image = make(&root, &out, 0).unwrap();
        let bytes = fs::read(&out).unwrap();
        assert_eq!(bytes.len() as u64, image.image_bytes);
        // The ext4 superblock magic.
        assert_eq!(&bytes[1080..1082], &[0x53, 0xef]);
    }
}
