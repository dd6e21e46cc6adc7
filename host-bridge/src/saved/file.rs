//! One snapshot file: a checked header, then QEMU's migration stream.
//!
//! ```text
//! 0      "airlock-snapshot"            16 bytes, the magic
//! 16     header length N               u32, little endian
//! 20     header                        N bytes of JSON (SnapshotHeader)
//! 20+N   sha256 of bytes 0..20+N       32 bytes
//!        zeros up to STREAM_OFFSET
//! 4096   QEMU's migration stream       header.stream_bytes bytes
//! ```
//!
//! A file is written under a temporary name in its final directory, synced,
//! and renamed into place only when complete ([`Writing::commit`], through
//! `airlock_atomic_file`): a crash while writing leaves the previous file
//! as it was. It is opened with
//! [`open`], which checks the magic, the header's checksum, the format
//! version and the stream's size before QEMU reads a byte of it.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use airlock_atomic_file::{AtomicFile, Mode};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::SavedError;

/// The first bytes of every snapshot file.
const MAGIC: &[u8; 16] = b"airlock-snapshot";
/// Where the migration stream starts; the header must fit before it.
pub(crate) const STREAM_OFFSET: u64 = 4096;
/// The format this build writes and reads.
pub const SNAPSHOT_FORMAT: u32 = 1;
const CHECKSUM_BYTES: usize = 32;
/// Room for the JSON header.
const MAX_HEADER: usize = STREAM_OFFSET as usize - MAGIC.len() - 4 - CHECKSUM_BYTES;

/// What a snapshot file says about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotHeader {
    /// [`SNAPSHOT_FORMAT`] of the build that wrote it.
    pub format: u32,
    /// The QEMU version that wrote the stream (only the same one loads it).
    pub qemu_version: String,
    /// Length of the migration stream after the header.
    pub stream_bytes: u64,
    /// The guest's memory size.
    pub memory_mib: u32,
    /// The sandbox it holds.
    pub sandbox_id: String,
    pub created_unix_secs: u64,
}

/// A snapshot file being written: QEMU writes the stream through
/// [`file`](Writing::file), then [`commit`](Writing::commit) adds the header
/// and moves it into place. Dropped uncommitted, the partial file goes and
/// the previous one stays.
#[derive(Debug)]
pub(crate) struct Writing {
    file: AtomicFile,
    target: PathBuf,
}

impl Writing {
    /// Starts `target` under a temporary name beside it (mode 0600), with
    /// the write position at the stream's start.
    pub fn create(target: &Path) -> Result<Self, SavedError> {
        let file = AtomicFile::create(target, Mode::Private).map_err(SavedError::io(target))?;
        file.file()
            .seek(SeekFrom::Start(STREAM_OFFSET))
            .map_err(SavedError::io(target))?;
        Ok(Writing {
            file,
            target: target.to_owned(),
        })
    }

    /// The file QEMU writes the stream to, from the current position.
    pub fn file(&self) -> &File {
        self.file.file()
    }

    /// Writes the header (with the stream's length as the file now has
    /// it), then syncs the file, renames it into place and syncs the
    /// directory.
    pub fn commit(self, mut header: SnapshotHeader) -> Result<SnapshotHeader, SavedError> {
        let fail = SavedError::io(&self.target);
        let length = self.file().metadata().map_err(fail)?.len();
        header.stream_bytes = length.saturating_sub(STREAM_OFFSET);
        let bytes = encode(&header)?;
        self.file()
            .write_all_at(&bytes, 0)
            .map_err(SavedError::io(&self.target))?;
        self.file.commit().map_err(SavedError::io(&self.target))?;
        Ok(header)
    }
}

/// Opens a snapshot file and checks it; the returned file's position is
/// the stream's start.
pub(crate) fn open(path: &Path) -> Result<(File, SnapshotHeader), SavedError> {
    let mut file = File::open(path).map_err(SavedError::io(path))?;
    let mut head = vec![0u8; STREAM_OFFSET as usize];
    let read = read_up_to(&mut file, &mut head).map_err(SavedError::io(path))?;
    let header = decode(&head[..read]).map_err(|reason| SavedError::Corrupt {
        path: path.to_owned(),
        reason,
    })?;
    if header.format != SNAPSHOT_FORMAT {
        return Err(SavedError::Corrupt {
            path: path.to_owned(),
            reason: format!(
                "snapshot format {} (this build reads format {SNAPSHOT_FORMAT})",
                header.format
            ),
        });
    }
    let length = file.metadata().map_err(SavedError::io(path))?.len();
    let expected = STREAM_OFFSET.saturating_add(header.stream_bytes);
    if length != expected {
        return Err(SavedError::Corrupt {
            path: path.to_owned(),
            reason: format!("the file has {length} bytes; its header says {expected}"),
        });
    }
    file.seek(SeekFrom::Start(STREAM_OFFSET))
        .map_err(SavedError::io(path))?;
    Ok((file, header))
}

/// The header as it is written: magic, length, JSON, checksum.
fn encode(header: &SnapshotHeader) -> Result<Vec<u8>, SavedError> {
    let json = serde_json::to_vec(header).map_err(|e| SavedError::Encode(e.to_string()))?;
    if json.len() > MAX_HEADER {
        return Err(SavedError::Encode(format!(
            "the header takes {} bytes; at most {MAX_HEADER} fit",
            json.len()
        )));
    }
    let length = u32::try_from(json.len()).map_err(|e| SavedError::Encode(e.to_string()))?;
    let mut bytes = Vec::with_capacity(MAGIC.len() + 4 + json.len() + CHECKSUM_BYTES);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&length.to_le_bytes());
    bytes.extend_from_slice(&json);
    let checksum = Sha256::digest(&bytes);
    bytes.extend_from_slice(&checksum);
    Ok(bytes)
}

/// Reads the header back, or says what is wrong with it.
fn decode(head: &[u8]) -> Result<SnapshotHeader, String> {
    let rest = head
        .strip_prefix(MAGIC.as_slice())
        .ok_or("not an Airlock snapshot (no magic at its start)")?;
    let (length, rest) = rest
        .split_first_chunk::<4>()
        .ok_or("the header is cut short")?;
    let length = u32::from_le_bytes(*length) as usize;
    if length > MAX_HEADER {
        return Err(format!("a header length of {length} bytes is impossible"));
    }
    let json = rest.get(..length).ok_or("the header is cut short")?;
    let checksum = rest
        .get(length..length + CHECKSUM_BYTES)
        .ok_or("the header's checksum is cut short")?;
    let covered = &head[..MAGIC.len() + 4 + length];
    if Sha256::digest(covered).as_slice() != checksum {
        return Err("the header's checksum does not match".into());
    }
    serde_json::from_slice(json).map_err(|e| format!("the header is unreadable: {e}"))
}

/// Fills `buf` as far as the file goes.
fn read_up_to(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

/// Copies the snapshot file `source` to `target` atomically and durably
/// (mode 0600): a reader finds the whole copy or none.
pub(crate) fn copy_new(source: &Path, target: &Path) -> Result<(), SavedError> {
    let mut from = File::open(source).map_err(SavedError::io(source))?;
    let copy = AtomicFile::create(target, Mode::Private).map_err(SavedError::io(target))?;
    let mut to = copy.file();
    std::io::copy(&mut from, &mut to).map_err(SavedError::io(target))?;
    copy.commit().map_err(SavedError::io(target))
}

/// Writes `bytes` to `path` atomically and durably, mode 0600.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), SavedError> {
    airlock_atomic_file::write(path, bytes, Mode::Private).map_err(SavedError::io(path))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use std::fs::OpenOptions;
    use std::io::Write;

    fn header() -> SnapshotHeader {
        SnapshotHeader {
            format: SNAPSHOT_FORMAT,
            qemu_version: "7.2.22".into(),
            stream_bytes: 0,
            memory_mib: 256,
            sandbox_id: "sandbox-x".into(),
            created_unix_secs: 1,
        }
    }

    fn written(dir: &Path, stream: &[u8]) -> PathBuf {
        let target = dir.join("snapshot");
        let mut writing = Writing::create(&target).unwrap();
        writing.file.write_all(stream).unwrap();
        writing.commit(header()).unwrap();
        target
    }

    #[test]
    fn a_written_file_opens_at_its_stream_with_its_header() {
        let dir = tempfile::tempdir().unwrap();
        let path = written(dir.path(), b"QEVM stream");
        let (mut file, header) = open(&path).unwrap();
        assert_eq!(header.stream_bytes, 11);
        assert_eq!(header.qemu_version, "7.2.22");
        let mut stream = String::new();
        file.read_to_string(&mut stream).unwrap();
        assert_eq!(stream, "QEVM stream");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // No temporary file is left beside it.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_truncated_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = written(dir.path(), &[7u8; 10_000]);
        let file = OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(STREAM_OFFSET + 5_000).unwrap();
        let error = open(&path).unwrap_err().to_string();
        assert!(error.contains("its header says"), "{error}");
        file.set_len(100).unwrap();
        let error = open(&path).unwrap_err().to_string();
        assert!(error.contains("cut short"), "{error}");
    }

    #[test]
    fn a_changed_header_or_a_foreign_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = written(dir.path(), b"stream");
        let mut bytes = std::fs::read(&path).unwrap();
        let at = bytes.windows(6).position(|w| w == b"7.2.22").unwrap();
        bytes[at] = b'8';
        std::fs::write(&path, &bytes).unwrap();
        let error = open(&path).unwrap_err().to_string();
        assert!(error.contains("checksum"), "{error}");

        std::fs::write(&path, b"QEVM\0\0\0\x03 a raw QEMU stream").unwrap();
        let error = open(&path).unwrap_err().to_string();
        assert!(error.contains("not an Airlock snapshot"), "{error}");
    }

    #[test]
    fn another_format_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("snapshot");
        let writing = Writing::create(&target).unwrap();
        writing
            .commit(SnapshotHeader {
                format: SNAPSHOT_FORMAT + 1,
                ..header()
            })
            .unwrap();
        let error = open(&target).unwrap_err().to_string();
        assert!(error.contains("snapshot format 2"), "{error}");
    }

    #[test]
    fn an_abandoned_write_leaves_the_previous_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = written(dir.path(), b"good");
        let writing = Writing::create(&path).unwrap();
        writing.file().write_all_at(b"half", STREAM_OFFSET).unwrap();
        drop(writing);
        let (mut file, _) = open(&path).unwrap();
        let mut stream = String::new();
        file.read_to_string(&mut stream).unwrap();
        assert_eq!(stream, "good");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
