//! `copy_in` and `copy_out`: a file or a whole directory, whichever the
//! source is, between host and guest (what `airlock run --upload`,
//! `--download` and `airlock sandbox cp` do).

use std::path::Path;

use super::{FileKind, Files, FsError};
use crate::error::Result;

impl Files {
    /// Copies the host file or directory `host` to the guest path `guest`:
    /// a directory as a tar stream (modes and symlinks kept, see
    /// [`Files::upload_dir`]), a file atomically with its host mode (see
    /// [`Files::write_file`]). Returns the bytes (file) or entries
    /// (directory) copied.
    pub async fn copy_in(&self, host: impl AsRef<Path>, guest: impl AsRef<Path>) -> Result<u64> {
        let host = host.as_ref();
        let meta = tokio::fs::metadata(host)
            .await
            .map_err(|e| FsError::local("read", host, e))?;
        if meta.is_dir() {
            self.upload_dir(host, guest).await
        } else {
            self.write_file(guest, host).await
        }
    }

    /// Copies the guest file or directory `guest` to the host path `host`
    /// (a file is replaced, with its mode; a directory created or merged
    /// into). A symlink at `guest` is followed, as `cp` does: its target's
    /// contents and mode land (links inside a directory stay links).
    /// Returns the bytes (file) or entries (directory) copied.
    pub async fn copy_out(&self, guest: impl AsRef<Path>, host: impl AsRef<Path>) -> Result<u64> {
        let guest = guest.as_ref();
        if self.stat_following(guest).await?.kind == FileKind::Directory {
            self.download_dir(guest, host).await
        } else {
            self.read_to_file(guest, host).await
        }
    }
}
