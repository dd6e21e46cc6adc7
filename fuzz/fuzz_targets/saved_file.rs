//! A saved sandbox read back from disk (`saved::SavedStore` and
//! `saved::file`): its `record.json` and snapshot files from the input,
//! then what a restore does (the record, the newest snapshot that passes
//! its checks, QEMU's command line) and the next save after it.
//!
//! Input: see `airlock_fuzz::saved_input`.
//!
//! Invariants: a record loads only for its own id, or is a `Corrupt` error
//! naming its file; the snapshot chosen is the newest listed generation
//! that passes its own checks for this QEMU, its stream as long as its
//! header says, or the error gives every generation's reason; the next
//! save after a restore makes the next generation and keeps two.
#![no_main]

use std::path::Path;

use airlock::fuzzing::{open_newest_snapshot, open_snapshot, restore_args, save_next};
use airlock::saved::{SavedError, SavedStore, SnapshotHeader, SNAPSHOT_FORMAT};
use airlock_fuzz::saved_input::{ID, QEMU};
use airlock_fuzz::{replace, Input};
use libfuzzer_sys::fuzz_target;
use sha2::{Digest, Sha256};

const MAGIC: &[u8] = b"airlock-snapshot";
const STREAM_OFFSET: usize = 4096;

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let record_json = replace(input.field(), b"@ID@", ID.as_bytes());
    let base = if Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    };
    let root = tempfile::tempdir_in(base).expect("a scratch directory");
    let store_dir = root.path().join("saved");
    let sandbox = store_dir.join(ID);
    std::fs::create_dir_all(&sandbox).expect("sandbox dir");
    std::fs::write(sandbox.join("record.json"), &record_json).expect("record");
    for _ in 0..4 {
        if input.is_empty() {
            break;
        }
        let generation = input.u8();
        let how = input.u8();
        let json = replace(input.field(), b"@ID@", ID.as_bytes());
        let stream_len = usize::from(input.u16());
        let mut file = match how % 4 {
            2 => json.clone(),
            _ => snapshot_file(&json, stream_len),
        };
        match how % 4 {
            1 if !file.is_empty() => {
                let at = usize::from(input.u16()) % file.len();
                file[at] ^= 0x20;
            }
            3 => file.truncate(usize::from(input.u16())),
            _ => {}
        }
        std::fs::write(sandbox.join(format!("snapshot-{generation}")), &file).expect("snapshot");
    }

    let store = SavedStore::new(&store_dir);
    let record = match store.record(ID) {
        Ok(record) => record,
        Err(SavedError::Corrupt { path, reason }) => {
            assert_eq!(path, sandbox.join("record.json"));
            assert!(!reason.is_empty());
            assert!(
                store.list().expect("list").is_empty(),
                "an unreadable record listed"
            );
            return;
        }
        Err(other) => panic!("not a clear refusal: {other}"),
    };
    assert_eq!(record.id, ID, "a record loaded for another id");
    let listed = store.list().expect("list");
    assert_eq!(listed, [record.clone()]);

    match open_newest_snapshot(&store, &record, QEMU) {
        Ok((generation, header, stream)) => {
            assert!(record.generations.contains(&generation));
            assert_eq!(header.format, SNAPSHOT_FORMAT);
            assert_eq!(header.qemu_version, QEMU);
            assert_eq!(
                stream, header.stream_bytes,
                "the stream is not as long as its header says"
            );
            for newer in record.generations.iter().filter(|g| **g > generation) {
                let path = sandbox.join(format!("snapshot-{newer}"));
                if let Ok(header) = open_snapshot(&path) {
                    assert_ne!(
                        header.qemu_version, QEMU,
                        "a good newer generation {newer} was skipped"
                    );
                }
            }
        }
        Err(SavedError::NoGoodSnapshot { id, reasons }) => {
            assert_eq!(id, ID);
            for generation in &record.generations {
                assert!(
                    reasons.contains(&format!("generation {generation}:")),
                    "generation {generation} not named in {reasons}"
                );
            }
        }
        Err(other) => panic!("not a clear refusal: {other}"),
    }

    let _ = restore_args(&record, &root.path().join("state"));

    let header = SnapshotHeader {
        format: SNAPSHOT_FORMAT,
        qemu_version: QEMU.to_owned(),
        stream_bytes: 0,
        memory_mib: 256,
        sandbox_id: ID.to_owned(),
        created_unix_secs: 1,
    };
    match save_next(&store, &record, b"stream", header) {
        Ok(saved) => {
            let newest = *saved.generations.last().expect("a generation");
            assert_eq!(
                Some(newest),
                record
                    .generations
                    .last()
                    .map_or(Some(1), |g| g.checked_add(1))
            );
            assert!(saved.generations.len() <= 2);
            assert_eq!(store.record(ID).expect("the record after a save"), saved);
            let (generation, _, stream) =
                open_newest_snapshot(&store, &saved, QEMU).expect("the snapshot just saved");
            assert_eq!((generation, stream), (newest, 6));
        }
        Err(error) => {
            let text = error.to_string();
            assert!(!text.is_empty());
        }
    }
});

/// A snapshot file as a save writes it: magic, header length, the JSON,
/// its checksum, zeros to the stream, `stream_len` bytes of stream.
fn snapshot_file(json: &[u8], stream_len: usize) -> Vec<u8> {
    let mut file = MAGIC.to_vec();
    file.extend_from_slice(&(json.len() as u32).to_le_bytes());
    file.extend_from_slice(json);
    let checksum = Sha256::digest(&file);
    file.extend_from_slice(&checksum);
    if file.len() < STREAM_OFFSET {
        file.resize(STREAM_OFFSET, 0);
    }
    file.extend((0..stream_len).map(|i| i as u8));
    file
}
