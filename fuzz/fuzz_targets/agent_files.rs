//! Change lists and file metadata from the agent: the messages of
//! `Files.TreeChanges` as the host puts them together (`ChangesReader`),
//! and what `Files::stat`/`list` and `Watch` make of `FileInfo` and
//! `WatchEvent`, each decoded off the wire by prost as tonic does.
//!
//! Input: `[mode: u8][messages, each length-delimited]`. Mode bits 0-1
//! pick what the messages are (`TreeChangesChunk`, `FileInfo`,
//! `WatchEvent`); for change lists, bits 2-4 pick the number of changes
//! asked for.
//!
//! Invariants: a change list holds no more changes than were asked for
//! (and the protocol's maximum), exactly the changes sent with their kinds
//! and the summary's figures, and is an error for a chunk after the summary,
//! a missing summary or a change of no kind; metadata carries the agent's
//! fields unchanged, its time the same instant.
#![no_main]

use std::time::{Duration, SystemTime};

use airlock::fs::{ChangeKind, FileKind, WatchKind};
use airlock::fuzzing::{metadata, read_changes, watch_event};
use airlock_proto::contract::changes::MAX_CHANGES;
use airlock_proto::v1::{self, FileInfo, TreeChangesChunk, WatchEvent, WatchEventKind};
use libfuzzer_sys::fuzz_target;
use prost::Message;

/// What a request may ask for: the agent's maximum (0), a few, the maximum
/// itself, more than it.
const ASKED: [u64; 8] = [0, 1, 2, 3, 10, 100, MAX_CHANGES, u64::MAX];

fuzz_target!(|data: &[u8]| {
    let Some((&mode, mut rest)) = data.split_first() else {
        return;
    };
    match mode & 3 {
        0 | 1 => {
            let mut chunks = Vec::new();
            while let Ok(chunk) = TreeChangesChunk::decode_length_delimited(&mut rest) {
                chunks.push(chunk);
            }
            changes(ASKED[usize::from(mode >> 2) % ASKED.len()], chunks);
        }
        2 => {
            while let Ok(info) = FileInfo::decode_length_delimited(&mut rest) {
                file_info(info);
            }
        }
        _ => {
            while let Ok(event) = WatchEvent::decode_length_delimited(&mut rest) {
                watch(event);
            }
        }
    }
});

fn changes(asked: u64, chunks: Vec<TreeChangesChunk>) {
    let limit = if asked == 0 {
        MAX_CHANGES
    } else {
        asked.min(MAX_CHANGES)
    };
    // What the host must make of it.
    let mut expected = Ok(Vec::new());
    let mut summary = None;
    for chunk in &chunks {
        let Ok(list) = &mut expected else { break };
        if summary.is_some() {
            expected = Err("after the summary");
            break;
        }
        if (list.len() + chunk.changes.len()) as u64 > limit {
            expected = Err("too many");
            break;
        }
        if chunk
            .changes
            .iter()
            .any(|c| c.kind() == v1::ChangeKind::Unspecified)
        {
            expected = Err("no kind");
            break;
        }
        list.extend(chunk.changes.iter().cloned());
        summary = chunk.summary;
    }
    if expected.is_ok() && summary.is_none() {
        expected = Err("no summary");
    }
    let got = read_changes(asked, chunks);
    match (expected, got) {
        (Ok(sent), Ok(got)) => {
            let summary = summary.expect("a summary");
            assert!(got.changes.len() as u64 <= limit);
            assert_eq!(got.changes.len(), sent.len());
            assert_eq!(got.truncated, summary.truncated);
            assert_eq!(got.scanned, summary.scanned);
            for (change, sent) in got.changes.iter().zip(&sent) {
                assert_eq!(change.path.as_os_str(), sent.path.as_str());
                assert_eq!(
                    (change.size, change.previous_size),
                    (sent.size, sent.previous_size)
                );
                let kind = match sent.kind() {
                    v1::ChangeKind::Created => ChangeKind::Created,
                    v1::ChangeKind::Modified => ChangeKind::Modified,
                    _ => ChangeKind::Deleted,
                };
                assert_eq!(change.kind, kind);
                assert_eq!(change.file_kind, file_kind(sent.r#type()));
                assert_eq!(change.modified, instant(sent.mtime_unix_nanos));
            }
        }
        (Err(_), Err(error)) => {
            let text = error.to_string();
            assert!(!text.is_empty());
        }
        (Ok(_), Err(error)) => panic!("a good answer refused: {error}"),
        (Err(why), Ok(got)) => panic!("an answer with {why} taken: {} changes", got.changes.len()),
    }
}

fn file_info(info: FileInfo) {
    let meta = metadata(info.clone());
    assert_eq!(meta.path.as_os_str(), info.path.as_str());
    assert_eq!(meta.kind, file_kind(info.r#type()));
    assert_eq!(
        (meta.size, meta.mode, meta.uid, meta.gid),
        (info.size, info.mode, info.uid, info.gid)
    );
    assert_eq!(meta.modified, instant(info.mtime_unix_nanos));
    match &meta.symlink_target {
        Some(target) => assert_eq!(target.as_os_str(), info.symlink_target.as_str()),
        None => assert!(info.symlink_target.is_empty()),
    }
}

fn watch(event: WatchEvent) {
    let got = watch_event(event.clone());
    let kind = match event.kind() {
        WatchEventKind::Create => Some(WatchKind::Create),
        WatchEventKind::Modify => Some(WatchKind::Modify),
        WatchEventKind::Delete => Some(WatchKind::Delete),
        WatchEventKind::RenameFrom => Some(WatchKind::RenameFrom),
        WatchEventKind::RenameTo => Some(WatchKind::RenameTo),
        WatchEventKind::Unspecified => None,
    };
    assert_eq!(got.as_ref().map(|e| e.kind), kind);
    if let Some(got) = got {
        assert_eq!(got.path.as_os_str(), event.path.as_str());
        assert_eq!((got.is_dir, got.cookie), (event.is_dir, event.cookie));
    }
}

fn file_kind(kind: v1::FileType) -> FileKind {
    match kind {
        v1::FileType::File => FileKind::File,
        v1::FileType::Directory => FileKind::Directory,
        v1::FileType::Symlink => FileKind::Symlink,
        _ => FileKind::Other,
    }
}

/// The instant `nanos` after (or before) the epoch, checked both ways.
fn instant(nanos: i64) -> SystemTime {
    let at = if nanos >= 0 {
        SystemTime::UNIX_EPOCH + Duration::from_nanos(nanos.unsigned_abs())
    } else {
        SystemTime::UNIX_EPOCH - Duration::from_nanos(nanos.unsigned_abs())
    };
    let back = match at.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(after) => i128::try_from(after.as_nanos()).unwrap_or(i128::MAX),
        Err(before) => -i128::try_from(before.duration().as_nanos()).unwrap_or(i128::MAX),
    };
    assert_eq!(back, i128::from(nanos));
    at
}
