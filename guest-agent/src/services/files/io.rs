//! `ReadFile` and `WriteFile`: file contents as bounded streams of chunks.
//!
//! A read runs on the blocking pool and hands chunks to a channel of
//! [`QUEUE`] slots, so memory is bounded by `QUEUE * CHUNK` whatever the
//! file size. A write goes to a temporary file in the target's directory
//! (so the final rename is atomic), is fsynced, then renamed over the
//! target; `TempFile` removes the temporary on every other way out,
//! including the handler being dropped when the client goes away.

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use airlock_proto::v1::{write_file_request, FileChunk, WriteFileHeader, WriteFileRequest};
use futures::StreamExt;
use tokio::sync::mpsc;
use tonic::{Status, Streaming};

use super::access::{absolute, Actor};
use super::error::FilesError;

/// Bytes per chunk the agent sends.
pub const CHUNK: usize = 128 * 1024;
/// Chunks in flight per stream.
pub const QUEUE: usize = 4;

/// Starts streaming `length` bytes (0 = all) of `path` from `offset`.
pub async fn read(
    path: &str,
    offset: u64,
    length: u64,
) -> Result<mpsc::Receiver<Result<FileChunk, Status>>, FilesError> {
    let path = absolute(path)?;
    let mut file = open_for_read(&path)?;
    if offset > 0 {
        file.seek(SeekFrom::Start(offset))
            .map_err(|e| FilesError::io("seek", &path, e))?;
    }
    let (tx, rx) = mpsc::channel(QUEUE);
    tokio::task::spawn_blocking(move || {
        let mut left = if length == 0 { u64::MAX } else { length };
        let mut buf = vec![0u8; CHUNK];
        while left > 0 {
            let want = usize::try_from(left).unwrap_or(CHUNK).min(CHUNK);
            let item = match file.read(&mut buf[..want]) {
                Ok(0) => break,
                Ok(n) => {
                    left -= n as u64;
                    Ok(FileChunk {
                        data: bytes::Bytes::copy_from_slice(&buf[..n]),
                    })
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => Err(Status::from(FilesError::io("read", &path, e))),
            };
            let failed = item.is_err();
            if tx.blocking_send(item).is_err() || failed {
                break;
            }
        }
    });
    Ok(rx)
}

/// Opens a regular file for reading; a directory is "is a directory".
fn open_for_read(path: &Path) -> Result<std::fs::File, FilesError> {
    let file = std::fs::File::open(path).map_err(|e| FilesError::io("open", path, e))?;
    let meta = file
        .metadata()
        .map_err(|e| FilesError::io("stat", path, e))?;
    if meta.is_dir() {
        return Err(FilesError::io(
            "read",
            path,
            std::io::Error::from_raw_os_error(nix::libc::EISDIR),
        ));
    }
    Ok(file)
}

/// Receives a `WriteFile` stream and writes it; returns the bytes written.
pub async fn write(mut stream: Streaming<WriteFileRequest>) -> Result<u64, FilesError> {
    let header = match stream.next().await {
        Some(Ok(WriteFileRequest {
            kind: Some(write_file_request::Kind::Header(h)),
        })) => h,
        Some(Err(status)) => return Err(FilesError::Stream(status.message().to_owned())),
        _ => return Err(FilesError::MissingHeader),
    };
    let path = absolute(&header.path)?;
    let actor = Actor::resolve(&header.user)?;
    let mut sink = Sink::open(&path, &header, &actor)?;
    let mut written = 0u64;
    loop {
        let Some(message) = stream.next().await else {
            // Closed without `end`: a cut upload; `sink` drops its temporary.
            return Err(FilesError::Truncated(path.display().to_string()));
        };
        let data = match message {
            Ok(WriteFileRequest {
                kind: Some(write_file_request::Kind::End(_)),
            }) => break,
            Ok(WriteFileRequest {
                kind: Some(write_file_request::Kind::Data(data)),
            }) => data,
            Ok(WriteFileRequest {
                kind: Some(write_file_request::Kind::Header(_)),
            }) => return Err(FilesError::DuplicateHeader),
            Ok(WriteFileRequest { kind: None }) => continue,
            Err(status) => return Err(FilesError::Stream(status.message().to_owned())),
        };
        written += data.len() as u64;
        sink = sink.write(data).await?;
    }
    sink.finish().await?;
    tracing::debug!(path = %path.display(), written, "file written");
    Ok(written)
}

/// Where a write's bytes go.
#[derive(Debug)]
struct Sink {
    file: std::fs::File,
    /// The temporary to rename over `path`, or `None` when appending.
    temp: Option<TempFile>,
    path: PathBuf,
}

impl Sink {
    fn open(path: &Path, header: &WriteFileHeader, actor: &Actor) -> Result<Self, FilesError> {
        let parent = path
            .parent()
            .ok_or_else(|| FilesError::RelativePath(header.path.clone()))?;
        if header.create_parents {
            super::tree::make_dirs(parent, 0o755, actor)?;
        }
        if let Ok(meta) = std::fs::metadata(path) {
            if meta.is_dir() {
                return Err(FilesError::io(
                    "write",
                    path,
                    std::io::Error::from_raw_os_error(nix::libc::EISDIR),
                ));
            }
        }
        if header.append {
            let existed = path.exists();
            if existed {
                actor.check_file_writable(path)?;
            } else {
                actor.check_dir_writable(parent)?;
            }
            let mode = if header.mode == 0 { 0o644 } else { header.mode };
            let file = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .mode(mode)
                .open(path)
                .map_err(|e| FilesError::io("open", path, e))?;
            if !existed {
                actor.own(path)?;
            }
            return Ok(Sink {
                file,
                temp: None,
                path: path.to_owned(),
            });
        }
        actor.check_dir_writable(parent)?;
        let (file, temp) = TempFile::create(path)?;
        let mode = if header.mode == 0 { 0o644 } else { header.mode };
        file.set_permissions(std::fs::Permissions::from_mode(mode & 0o7777))
            .map_err(|e| FilesError::io("chmod", &temp.path, e))?;
        actor.own(&temp.path)?;
        Ok(Sink {
            file,
            temp: Some(temp),
            path: path.to_owned(),
        })
    }

    /// Writes one chunk on the blocking pool.
    async fn write(self, data: bytes::Bytes) -> Result<Self, FilesError> {
        tokio::task::spawn_blocking(move || {
            let mut sink = self;
            match sink.file.write_all(&data) {
                Ok(()) => Ok(sink),
                Err(e) => Err(FilesError::io("write", &sink.path, e)),
            }
        })
        .await
        .map_err(|e| FilesError::Worker(e.to_string()))?
    }

    /// Fsyncs and, for a replacing write, renames into place.
    async fn finish(self) -> Result<(), FilesError> {
        tokio::task::spawn_blocking(move || {
            let Sink { file, temp, path } = self;
            file.sync_all()
                .map_err(|e| FilesError::io("fsync", &path, e))?;
            drop(file);
            if let Some(temp) = temp {
                temp.commit(&path)?;
            }
            Ok(())
        })
        .await
        .map_err(|e| FilesError::Worker(e.to_string()))?
    }
}

/// A temporary file beside the target, removed on drop unless committed.
#[derive(Debug)]
struct TempFile {
    path: PathBuf,
    committed: bool,
}

impl TempFile {
    fn create(target: &Path) -> Result<(std::fs::File, Self), FilesError> {
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let dir = target.parent().unwrap_or(Path::new("/"));
        for attempt in 0..16u32 {
            let path = dir.join(format!(
                ".{name}.airlock-{}-{attempt}.tmp",
                std::process::id() ^ nonce()
            ));
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
            {
                Ok(file) => {
                    return Ok((
                        file,
                        TempFile {
                            path,
                            committed: false,
                        },
                    ))
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(FilesError::io("create", target, e)),
            }
        }
        Err(FilesError::io(
            "create",
            target,
            std::io::Error::from_raw_os_error(nix::libc::EEXIST),
        ))
    }

    fn commit(mut self, target: &Path) -> Result<(), FilesError> {
        std::fs::rename(&self.path, target).map_err(|e| FilesError::io("rename", target, e))?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.committed {
            if let Err(e) = std::fs::remove_file(&self.path) {
                tracing::warn!(path = %self.path.display(), error = %e, "temporary file left");
            }
        }
    }
}

/// Some bits that differ between calls (time-based; uniqueness is checked).
fn nonce() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn temp_file_is_removed_unless_committed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("f");
        let (_file, temp) = TempFile::create(&target).unwrap();
        let temp_path = temp.path.clone();
        assert!(temp_path.exists());
        drop(temp);
        assert!(!temp_path.exists());
        assert!(!target.exists());

        let (_file, temp) = TempFile::create(&target).unwrap();
        temp.commit(&target).unwrap();
        assert!(target.exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
