//! Metadata and tree operations on the guest, and [`Watch`].

use std::path::{Path, PathBuf};

use airlock_proto::v1::{
    ChmodRequest, ChownRequest, CopyRequest, ListDirRequest, MakeDirRequest, PathRequest,
    RemoveRequest, RenameRequest, SymlinkRequest, WatchRequest,
};
use futures::StreamExt;
use tonic::Streaming;

use super::{guest, FileKind, Files, FsError, Metadata, WatchEvent};
use crate::error::{Error, Result};

/// Symlinks [`Files::stat_following`] follows, the kernel's own bound.
pub(crate) const MAX_SYMLINKS: usize = 40;

impl Files {
    /// Metadata of what a guest path names through its symlinks (`stat`,
    /// where [`Files::stat`] is `lstat`): a download's type and mode, so a
    /// 0600 file behind a link is 0600, not the link's 0777. A relative
    /// link target is taken from the link's directory.
    pub async fn stat_following(&self, path: impl AsRef<Path>) -> Result<Metadata> {
        let mut at = path.as_ref().to_owned();
        for _ in 0..=MAX_SYMLINKS {
            let meta = self.stat(&at).await?;
            let (FileKind::Symlink, Some(target)) = (meta.kind, &meta.symlink_target) else {
                return Ok(meta);
            };
            at = match at.parent() {
                Some(dir) => dir.join(target),
                None => PathBuf::from(target),
            };
        }
        Err(FsError::SymlinkLoop {
            path: path.as_ref().to_owned(),
            limit: MAX_SYMLINKS,
        }
        .into())
    }

    /// Metadata of a guest path (a final symlink is not followed).
    pub async fn stat(&self, path: impl AsRef<Path>) -> Result<Metadata> {
        let path = guest(path.as_ref())?;
        let info = self
            .client()?
            .stat(PathRequest { path })
            .await
            .map_err(|s| Error::agent("Files.Stat", s))?
            .into_inner();
        Ok(Metadata::from_proto(info))
    }

    /// The entries below a guest directory, `depth` levels deep (1: its
    /// children), sorted by name within each directory.
    pub async fn list(&self, path: impl AsRef<Path>, depth: u32) -> Result<Vec<Metadata>> {
        let path = guest(path.as_ref())?;
        let mut stream = self
            .client()?
            .list_dir(ListDirRequest { path, depth })
            .await
            .map_err(|s| Error::agent("Files.ListDir", s))?
            .into_inner();
        let mut out = Vec::new();
        while let Some(info) = stream.next().await {
            out.push(Metadata::from_proto(
                info.map_err(|s| Error::agent("Files.ListDir", s))?,
            ));
        }
        Ok(out)
    }

    /// Creates a guest directory (with `parents`, missing parents too, and
    /// no error if it exists).
    pub async fn mkdir(&self, path: impl AsRef<Path>, parents: bool) -> Result<()> {
        let request = MakeDirRequest {
            path: guest(path.as_ref())?,
            parents,
            mode: 0,
            user: String::new(),
        };
        self.client()?
            .make_dir(request)
            .await
            .map_err(|s| Error::agent("Files.MakeDir", s))?;
        Ok(())
    }

    /// Removes a file, symlink or empty directory; with `recursive`, a tree.
    pub async fn remove(&self, path: impl AsRef<Path>, recursive: bool) -> Result<()> {
        let path = guest(path.as_ref())?;
        self.client()?
            .remove(RemoveRequest { path, recursive })
            .await
            .map_err(|s| Error::agent("Files.Remove", s))?;
        Ok(())
    }

    /// Renames (moves) within the guest.
    pub async fn rename(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> Result<()> {
        let request = RenameRequest {
            from: guest(from.as_ref())?,
            to: guest(to.as_ref())?,
        };
        self.client()?
            .rename(request)
            .await
            .map_err(|s| Error::agent("Files.Rename", s))?;
        Ok(())
    }

    /// Sets permission bits.
    pub async fn chmod(&self, path: impl AsRef<Path>, mode: u32) -> Result<()> {
        let path = guest(path.as_ref())?;
        self.client()?
            .chmod(ChmodRequest { path, mode })
            .await
            .map_err(|s| Error::agent("Files.Chmod", s))?;
        Ok(())
    }

    /// Gives a path to a guest user (`name`, `uid`, `name:group`, `uid:gid`).
    pub async fn chown(&self, path: impl AsRef<Path>, user: impl Into<String>) -> Result<()> {
        let path = guest(path.as_ref())?;
        let user = user.into();
        self.client()?
            .chown(ChownRequest { path, user })
            .await
            .map_err(|s| Error::agent("Files.Chown", s))?;
        Ok(())
    }

    /// Creates the symlink `link` pointing at `target` (stored as given).
    pub async fn symlink(&self, target: impl AsRef<Path>, link: impl AsRef<Path>) -> Result<()> {
        let request = SymlinkRequest {
            target: guest(target.as_ref())?,
            link: guest(link.as_ref())?,
        };
        self.client()?
            .symlink(request)
            .await
            .map_err(|s| Error::agent("Files.Symlink", s))?;
        Ok(())
    }

    /// Copies a file or a directory tree within the guest.
    pub async fn copy(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> Result<()> {
        let request = CopyRequest {
            from: guest(from.as_ref())?,
            to: guest(to.as_ref())?,
        };
        self.client()?
            .copy(request)
            .await
            .map_err(|s| Error::agent("Files.Copy", s))?;
        Ok(())
    }

    /// Watches a guest directory. Changes made after this returns are
    /// reported; dropping the [`Watch`] ends it.
    pub async fn watch(&self, path: impl AsRef<Path>, recursive: bool) -> Result<Watch> {
        let path = guest(path.as_ref())?;
        let inner = self
            .client()?
            .watch(WatchRequest { path, recursive })
            .await
            .map_err(|s| Error::agent("Files.Watch", s))?
            .into_inner();
        Ok(Watch { inner })
    }
}

/// Changes below a guest directory, from [`Files::watch`].
#[derive(Debug)]
pub struct Watch {
    inner: Streaming<airlock_proto::v1::WatchEvent>,
}

impl Watch {
    /// The next change; `None` when the agent ends the watch.
    pub async fn next(&mut self) -> Option<Result<WatchEvent>> {
        loop {
            match self.inner.next().await? {
                Ok(e) => {
                    if let Some(event) = WatchEvent::from_proto(e) {
                        return Some(Ok(event));
                    }
                }
                Err(s) => return Some(Err(Error::agent("Files.Watch", s))),
            }
        }
    }
}
