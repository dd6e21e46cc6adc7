//! Seams for the fuzz targets in `fuzz/` (the `fuzzing` feature): the
//! crate-private functions the host runs on what a guest (or a file read
//! back from disk) hands it, exposed unchanged so that the fuzz crate drives
//! the real code rather than a copy. Not an API: only the fuzz crate turns
//! the feature on, and nothing here is covered by semver. The gateway's
//! parsers have their own seams, in `airlock_gateway::fuzzing`.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};

use airlock_proto::v1::{FileInfo, TreeChangesChunk, WatchEvent as ProtoWatchEvent};

use crate::fs::{Changes, FsError, Metadata, WatchEvent};
use crate::saved::{SavedError, SavedRecord, SavedStore, SnapshotHeader};
use crate::vmm::VmPaths;

/// `fs::archive::extract`: a tar stream from the guest into the host
/// directory `target`; the number of entries.
pub fn extract_tar(reader: impl Read, target: &Path) -> Result<u64, FsError> {
    crate::fs::extract_tar(reader, target)
}

/// The host's assembly of a `Files.TreeChanges` answer, asked for at most
/// `max_changes`, from its chunks as decoded off the wire.
pub fn read_changes(
    max_changes: u64,
    chunks: impl IntoIterator<Item = TreeChangesChunk>,
) -> crate::Result<Changes> {
    let mut reader = crate::fs::ChangesReader::new(max_changes);
    for chunk in chunks {
        reader.push(chunk)?;
    }
    reader.finish()
}

/// What `Files::stat` and `Files::list` make of the agent's `FileInfo`.
pub fn metadata(info: FileInfo) -> Metadata {
    Metadata::from_proto(info)
}

/// What `Watch::next` makes of the agent's event (`None`: skipped).
pub fn watch_event(event: ProtoWatchEvent) -> Option<WatchEvent> {
    WatchEvent::from_proto(event)
}

/// What a restore does with a saved sandbox's files: the newest snapshot
/// of `record` that passes its checks for QEMU `qemu_version` (its
/// generation, header and the stream's length from the file's position),
/// or why none does.
pub fn open_newest_snapshot(
    store: &SavedStore,
    record: &SavedRecord,
    qemu_version: &str,
) -> Result<(u64, SnapshotHeader, u64), SavedError> {
    let mut good = store.open_newest(record, qemu_version)?;
    let mut stream = Vec::new();
    let read = good
        .file
        .read_to_end(&mut stream)
        .map_err(|source| SavedError::Io {
            path: store.dir().to_owned(),
            source,
        })?;
    Ok((good.generation, good.header, read as u64))
}

/// `saved::file::open` on one snapshot file: its header, with the file
/// positioned at the stream.
pub fn open_snapshot(path: &Path) -> Result<SnapshotHeader, SavedError> {
    crate::saved::open_snapshot(path).map(|(_, header)| header)
}

/// QEMU's command line for restoring `record`'s machine with its state
/// files under `dir`.
pub fn restore_args(record: &SavedRecord, dir: &Path) -> Result<Vec<OsString>, SavedError> {
    let paths = VmPaths::in_dir(dir);
    Ok(record.vm.qemu_config(&paths)?.args())
}

/// Saves the next generation of `record` (a snapshot whose stream is
/// `stream`), as a save after a restore does; the updated record.
pub fn save_next(
    store: &SavedStore,
    record: &SavedRecord,
    stream: &[u8],
    header: SnapshotHeader,
) -> Result<SavedRecord, SavedError> {
    use std::io::Write;

    let mut record = record.clone();
    let (generation, writing) = store.begin(&record)?;
    let path: PathBuf = store.dir().join(&record.id);
    writing
        .file()
        .write_all(stream)
        .map_err(|source| SavedError::Io { path, source })?;
    store.commit(&mut record, generation, writing, header)?;
    Ok(record)
}
