//! [`EventLog`]: the events on disk, one JSON line each, so that numbers go
//! on across restarts and a client (or a webhook) that was away can be
//! given what it missed.
//!
//! `<data dir>/events/events.log` takes new lines; when it holds
//! [`SEGMENT_EVENTS`] it becomes `events.log.1` (replacing the one before),
//! so the log keeps between one and two segments' worth: the newest
//! [`SEGMENT_EVENTS`] at least. A line that does not parse (a write cut by
//! a crash) is skipped with a warning.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::event::Event;

/// Events per segment of the log.
pub const SEGMENT_EVENTS: usize = 50_000;

/// Errors opening or writing the log.
#[derive(Debug, thiserror::Error)]
pub enum EventLogError {
    #[error("cannot {action} {}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot encode an event")]
    Encode(#[source] serde_json::Error),
}

/// The log on disk, or none (a server without a data directory's log, in
/// tests of the bus).
#[derive(Debug)]
pub struct EventLog {
    dir: PathBuf,
    file: File,
    /// Lines in the current segment.
    lines: usize,
    /// The newest event's number (0: none yet).
    last_seq: u64,
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> EventLogError {
    let path = path.to_owned();
    move |source| EventLogError::Io {
        action,
        path,
        source,
    }
}

impl EventLog {
    /// Opens (making it if need be) the log in `dir`.
    pub fn open(dir: &Path) -> Result<EventLog, EventLogError> {
        std::fs::create_dir_all(dir).map_err(io("make", dir))?;
        let current = dir.join("events.log");
        let events = read(&current)?;
        let last_seq = match events.last() {
            Some(event) => event.seq,
            None => read(&dir.join("events.log.1"))?
                .last()
                .map_or(0, |event| event.seq),
        };
        let mut file = append(&current)?;
        end_line(&mut file, &current)?;
        Ok(EventLog {
            dir: dir.to_owned(),
            file,
            lines: events.len(),
            last_seq,
        })
    }

    /// The newest event's number (0: none).
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Adds `event` at the end.
    pub fn append(&mut self, event: &Event) -> Result<(), EventLogError> {
        if self.lines >= SEGMENT_EVENTS {
            self.rotate()?;
        }
        let mut line = serde_json::to_vec(event).map_err(EventLogError::Encode)?;
        line.push(b'\n');
        let path = self.dir.join("events.log");
        self.file.write_all(&line).map_err(io("write", &path))?;
        self.lines += 1;
        self.last_seq = event.seq;
        Ok(())
    }

    fn rotate(&mut self) -> Result<(), EventLogError> {
        let current = self.dir.join("events.log");
        let previous = self.dir.join("events.log.1");
        std::fs::rename(&current, &previous).map_err(io("rotate", &current))?;
        self.file = append(&current)?;
        self.lines = 0;
        Ok(())
    }

    /// The events after `after_seq` that the log still holds, oldest first,
    /// at most `limit` of them (the oldest such).
    pub fn after(&self, after_seq: u64, limit: usize) -> Result<Vec<Event>, EventLogError> {
        let mut found = Vec::new();
        for name in ["events.log.1", "events.log"] {
            for event in read(&self.dir.join(name))? {
                if event.seq > after_seq && found.len() < limit {
                    found.push(event);
                }
            }
        }
        Ok(found)
    }
}

/// Ends a line a crash cut, so the next event starts a line of its own.
fn end_line(file: &mut File, path: &Path) -> Result<(), EventLogError> {
    use std::io::{Read, Seek, SeekFrom};
    let length = file.metadata().map_err(io("read", path))?.len();
    if length == 0 {
        return Ok(());
    }
    let mut reader = File::open(path).map_err(io("open", path))?;
    reader
        .seek(SeekFrom::Start(length - 1))
        .map_err(io("read", path))?;
    let mut last = [0u8; 1];
    reader.read_exact(&mut last).map_err(io("read", path))?;
    if last[0] != b'\n' {
        file.write_all(b"\n").map_err(io("write", path))?;
    }
    Ok(())
}

fn append(path: &Path) -> Result<File, EventLogError> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(io("open", path))
}

/// The events of one segment (none if it does not exist).
fn read(path: &Path) -> Result<Vec<Event>, EventLogError> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(io("open", path)(error)),
    };
    let mut events = Vec::new();
    for line in BufReader::new(file).lines() {
        let line = line.map_err(io("read", path))?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Event>(&line) {
            Ok(event) => events.push(event),
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "skipping an event line that does not parse")
            }
        }
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::event::{Draft, EventKind};

    fn event(seq: u64) -> Event {
        Draft::new(EventKind::Created, "sb", None).numbered(seq, seq * 10)
    }

    #[test]
    fn numbers_go_on_after_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = EventLog::open(dir.path()).unwrap();
        assert_eq!(log.last_seq(), 0);
        for seq in 1..=3 {
            log.append(&event(seq)).unwrap();
        }
        drop(log);
        let log = EventLog::open(dir.path()).unwrap();
        assert_eq!(log.last_seq(), 3);
        let seqs: Vec<u64> = log.after(1, 10).unwrap().iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [2, 3]);
    }

    #[test]
    fn a_cut_line_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = EventLog::open(dir.path()).unwrap();
        log.append(&event(1)).unwrap();
        drop(log);
        let mut file = append(&dir.path().join("events.log")).unwrap();
        file.write_all(b"{\"seq\":2,\"ti").unwrap();
        let mut log = EventLog::open(dir.path()).unwrap();
        assert_eq!(log.last_seq(), 1);
        log.append(&event(2)).unwrap();
        let seqs: Vec<u64> = log.after(0, 10).unwrap().iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [1, 2]);
    }

    #[test]
    fn a_full_segment_rotates_and_both_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = EventLog::open(dir.path()).unwrap();
        log.lines = SEGMENT_EVENTS - 1;
        log.append(&event(1)).unwrap();
        log.append(&event(2)).unwrap();
        assert!(dir.path().join("events.log.1").exists());
        let seqs: Vec<u64> = log.after(0, 10).unwrap().iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [1, 2]);
        assert_eq!(log.after(0, 1).unwrap().len(), 1);
        drop(log);
        assert_eq!(EventLog::open(dir.path()).unwrap().last_seq(), 2);
    }
}
