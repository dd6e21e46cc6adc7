//! Metadata and tree operations: `Stat`, `ListDir`, `MakeDir`, `Remove`,
//! `Rename`, `Chmod`, `Chown`, `Symlink`, `Copy`. All blocking; the service
//! runs them on the blocking pool.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use airlock_proto::v1::{FileInfo, FileType};
use tokio::sync::mpsc;
use tonic::Status;

use super::access::Actor;
use super::error::FilesError;

/// A `FileInfo` for `path`, not following a final symlink.
pub fn stat(path: &Path) -> Result<FileInfo, FilesError> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| FilesError::io("stat", path, e))?;
    Ok(info(path, &meta))
}

fn info(path: &Path, meta: &std::fs::Metadata) -> FileInfo {
    let kind = meta.file_type();
    let file_type = if kind.is_symlink() {
        FileType::Symlink
    } else if kind.is_dir() {
        FileType::Directory
    } else if kind.is_file() {
        FileType::File
    } else {
        FileType::Other
    };
    let symlink_target = if kind.is_symlink() {
        std::fs::read_link(path)
            .map(|t| t.display().to_string())
            .unwrap_or_default()
    } else {
        String::new()
    };
    FileInfo {
        path: path.display().to_string(),
        r#type: file_type.into(),
        size: meta.size(),
        mode: meta.mode() & 0o7777,
        uid: meta.uid(),
        gid: meta.gid(),
        mtime_unix_nanos: meta
            .mtime()
            .saturating_mul(1_000_000_000)
            .saturating_add(meta.mtime_nsec()),
        symlink_target,
    }
}

/// Sends the entries below `dir`, `depth` levels deep (at least one),
/// sorted by name per directory. Stops when the receiver goes away.
pub fn list(
    dir: &Path,
    depth: u32,
    tx: &mpsc::Sender<Result<FileInfo, Status>>,
) -> Result<(), FilesError> {
    let meta = std::fs::metadata(dir).map_err(|e| FilesError::io("list", dir, e))?;
    if !meta.is_dir() {
        return Err(FilesError::io(
            "list",
            dir,
            std::io::Error::from_raw_os_error(nix::libc::ENOTDIR),
        ));
    }
    walk(dir, depth.max(1), tx).map(|_| ())
}

/// Returns `false` once the receiver is gone.
fn walk(
    dir: &Path,
    depth: u32,
    tx: &mpsc::Sender<Result<FileInfo, Status>>,
) -> Result<bool, FilesError> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| FilesError::io("list", dir, e))?
        .filter_map(Result::ok)
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue; // removed meanwhile
        };
        if tx.blocking_send(Ok(info(&path, &meta))).is_err() {
            return Ok(false);
        }
        if depth > 1 && meta.is_dir() && !walk(&path, depth - 1, tx)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Creates `path` and missing parents; new directories get `mode` and the
/// actor's ownership.
pub fn make_dirs(path: &Path, mode: u32, actor: &Actor) -> Result<(), FilesError> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => return Ok(()),
        Ok(_) => {
            return Err(FilesError::io(
                "mkdir",
                path,
                std::io::Error::from_raw_os_error(nix::libc::ENOTDIR),
            ))
        }
        Err(_) => {}
    }
    if let Some(parent) = path.parent() {
        make_dirs(parent, mode, actor)?;
    }
    make_dir(path, mode, actor)
}

/// Creates one directory in an existing parent.
pub fn make_dir(path: &Path, mode: u32, actor: &Actor) -> Result<(), FilesError> {
    if let Some(parent) = path.parent() {
        actor.check_dir_writable(parent)?;
    }
    std::fs::create_dir(path).map_err(|e| FilesError::io("mkdir", path, e))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o7777))
        .map_err(|e| FilesError::io("chmod", path, e))?;
    actor.own(path)
}

/// Removes a file, a symlink, an empty directory, or (with `recursive`)
/// a whole tree.
pub fn remove(path: &Path, recursive: bool) -> Result<(), FilesError> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| FilesError::io("remove", path, e))?;
    let result = if !meta.is_dir() {
        std::fs::remove_file(path)
    } else if recursive {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_dir(path)
    };
    result.map_err(|e| FilesError::io("remove", path, e))
}

/// Renames `from` to `to` (same filesystem).
pub fn rename(from: &Path, to: &Path) -> Result<(), FilesError> {
    std::fs::rename(from, to).map_err(|e| FilesError::io("rename", from, e))
}

/// Sets permission bits.
pub fn chmod(path: &Path, mode: u32) -> Result<(), FilesError> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o7777))
        .map_err(|e| FilesError::io("chmod", path, e))
}

/// Creates the symlink `link` pointing at `target`.
pub fn symlink(target: &str, link: &Path) -> Result<(), FilesError> {
    std::os::unix::fs::symlink(target, link).map_err(|e| FilesError::io("symlink", link, e))
}

/// Copies a file, symlink or directory tree; `to` must not exist.
pub fn copy(from: &Path, to: &Path) -> Result<(), FilesError> {
    let meta = std::fs::symlink_metadata(from).map_err(|e| FilesError::io("copy", from, e))?;
    if std::fs::symlink_metadata(to).is_ok() {
        return Err(FilesError::io(
            "copy to",
            to,
            std::io::Error::from_raw_os_error(nix::libc::EEXIST),
        ));
    }
    copy_entry(from, to, &meta)
}

fn copy_entry(from: &Path, to: &Path, meta: &std::fs::Metadata) -> Result<(), FilesError> {
    let kind = meta.file_type();
    if kind.is_symlink() {
        let target = std::fs::read_link(from).map_err(|e| FilesError::io("readlink", from, e))?;
        std::os::unix::fs::symlink(target, to).map_err(|e| FilesError::io("symlink", to, e))
    } else if kind.is_dir() {
        std::fs::create_dir(to).map_err(|e| FilesError::io("mkdir", to, e))?;
        for entry in std::fs::read_dir(from).map_err(|e| FilesError::io("list", from, e))? {
            let entry = entry.map_err(|e| FilesError::io("list", from, e))?;
            let child_meta = entry
                .metadata()
                .map_err(|e| FilesError::io("stat", entry.path(), e))?;
            copy_entry(&entry.path(), &to.join(entry.file_name()), &child_meta)?;
        }
        chmod(to, meta.mode())
    } else {
        std::fs::copy(from, to).map_err(|e| FilesError::io("copy", from, e))?;
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn copy_keeps_modes_and_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir(&src).unwrap();
        std::fs::write(src.join("run.sh"), "x").unwrap();
        chmod(&src.join("run.sh"), 0o750).unwrap();
        symlink("run.sh", &src.join("link")).unwrap();
        let dst = dir.path().join("dst");
        copy(&src, &dst).unwrap();
        assert_eq!(stat(&dst.join("run.sh")).unwrap().mode, 0o750);
        assert_eq!(stat(&dst.join("link")).unwrap().symlink_target, "run.sh");
        assert!(copy(&src, &dst).is_err());
    }

    #[test]
    fn remove_without_recursive_refuses_a_full_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), "x").unwrap();
        let err = remove(dir.path(), false).unwrap_err();
        assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    }
}
