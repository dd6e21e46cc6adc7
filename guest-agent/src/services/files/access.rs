//! Running a file operation "as a user": the agent stays root, resolves
//! `user` like `Process.Start` does, checks that the user could write where
//! the operation writes (mode bits of the file or its directory, as the
//! kernel would for a non-root caller), and chowns what it creates to the
//! user's uid and gid.

use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use super::error::FilesError;
use crate::services::process::user::{self, Credentials};

/// An absolute path from a request, with `.` components removed.
pub fn absolute(path: &str) -> Result<PathBuf, FilesError> {
    let p = Path::new(path);
    if !p.is_absolute() {
        return Err(FilesError::RelativePath(path.to_owned()));
    }
    Ok(p.components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect())
}

/// Who a call runs as: `None` for the agent itself (root).
#[derive(Debug, Clone, Default)]
pub struct Actor {
    spec: String,
    creds: Option<Credentials>,
}

impl Actor {
    /// Resolves a request's `user` field; empty means the agent.
    pub fn resolve(spec: &str) -> Result<Self, FilesError> {
        Ok(Actor {
            spec: spec.to_owned(),
            creds: user::resolve(spec)?,
        })
    }

    /// Fails unless the user may create, replace or remove entries in `dir`.
    pub fn check_dir_writable(&self, dir: &Path) -> Result<(), FilesError> {
        let Some(creds) = self.creds.as_ref().filter(|c| c.uid != 0) else {
            return Ok(());
        };
        let meta = std::fs::metadata(dir).map_err(|e| FilesError::io("stat", dir, e))?;
        // Write and search on the directory, as the kernel requires.
        if allowed(creds, &meta, 0o3) {
            Ok(())
        } else {
            Err(FilesError::UserDenied {
                user: self.spec.clone(),
                path: dir.display().to_string(),
            })
        }
    }

    /// Fails unless the user may write the existing file `path`.
    pub fn check_file_writable(&self, path: &Path) -> Result<(), FilesError> {
        let Some(creds) = self.creds.as_ref().filter(|c| c.uid != 0) else {
            return Ok(());
        };
        let meta = std::fs::metadata(path).map_err(|e| FilesError::io("stat", path, e))?;
        if allowed(creds, &meta, 0o2) {
            Ok(())
        } else {
            Err(FilesError::UserDenied {
                user: self.spec.clone(),
                path: path.display().to_string(),
            })
        }
    }

    /// Gives `path` (not following a symlink) to the user, if there is one.
    pub fn own(&self, path: &Path) -> Result<(), FilesError> {
        let Some(creds) = &self.creds else {
            return Ok(());
        };
        std::os::unix::fs::lchown(path, Some(creds.uid), Some(creds.gid))
            .map_err(|e| FilesError::io("chown", path, e))
    }

    /// The uid and gid, if a user was named.
    pub fn ids(&self) -> Option<(u32, u32)> {
        self.creds.as_ref().map(|c| (c.uid, c.gid))
    }
}

/// Whether `creds` has all of the `want` bits (rwx as 4/2/1) on `meta`.
fn allowed(creds: &Credentials, meta: &std::fs::Metadata, want: u32) -> bool {
    let mode = meta.mode();
    let bits = if meta.uid() == creds.uid {
        mode >> 6
    } else if creds.groups.contains(&meta.gid()) {
        mode >> 3
    } else {
        mode
    };
    bits & want == want
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_are_refused_and_dots_dropped() {
        assert!(matches!(absolute("a/b"), Err(FilesError::RelativePath(_))));
        assert_eq!(absolute("/a/./b").unwrap(), PathBuf::from("/a/b"));
    }

    #[test]
    fn mode_bits_decide_for_non_root() {
        let dir = tempfile::tempdir().unwrap();
        let meta = std::fs::metadata(dir.path()).unwrap();
        let stranger = Credentials {
            uid: meta.uid() + 4242,
            gid: 4242,
            groups: vec![4242],
            name: None,
            home: None,
        };
        // tempdir is 0700: a stranger may not write it.
        assert!(!allowed(&stranger, &meta, 0o3));
        let owner = Credentials {
            uid: meta.uid(),
            ..stranger
        };
        assert!(allowed(&owner, &meta, 0o3));
    }
}
