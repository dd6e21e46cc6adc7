//! The audit log on disk: [`AuditFile`], the records of an adoptable
//! sandbox appended as they are made to `audit.jsonl` in its state
//! directory (beside the adoption record), one JSON object a line, so that
//! the process that adopts the sandbox reads them back and goes on
//! numbering from the last.
//!
//! Bounded: when the next line would take the file past its cap
//! ([`DEFAULT_AUDIT_FILE_CAP`]) it is renamed to `audit.jsonl.1` (the one
//! before goes) and a new file begun, so the two never hold more than
//! twice the cap, newest kept. The files are the owner's alone (0600,
//! never followed through a link). A line that does not parse (a tail cut
//! by a `kill -9` mid-write) is skipped on reading, and a cut tail is
//! trimmed before the next line goes on. The records hold what the log
//! holds: names, addresses, ports and reasons, a secret's name at most,
//! never a value.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Seek, SeekFrom, Write};
use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::{AuditRecord, Protocol, Verdict};

/// The audit log's file in a sandbox's state directory.
pub const AUDIT_FILE: &str = "audit.jsonl";
/// The file it is rotated to (the one before).
pub const AUDIT_FILE_OLD: &str = "audit.jsonl.1";
/// The most bytes of one audit file; with the one before, the log on
/// disk takes at most twice this.
pub const DEFAULT_AUDIT_FILE_CAP: u64 = 1 << 20;

/// One record as a line of the file.
#[derive(Serialize, Deserialize)]
struct Line {
    seq: u64,
    /// Milliseconds since the Unix epoch.
    at_ms: u64,
    protocol: Protocol,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    addr: Option<IpAddr>,
    port: u16,
    verdict: Verdict,
}

impl From<&AuditRecord> for Line {
    fn from(record: &AuditRecord) -> Self {
        let at_ms = record
            .at
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or_default();
        Line {
            seq: record.seq,
            at_ms,
            protocol: record.protocol,
            name: record.name.clone(),
            addr: record.addr,
            port: record.port,
            verdict: record.verdict.clone(),
        }
    }
}

impl From<Line> for AuditRecord {
    fn from(line: Line) -> Self {
        AuditRecord {
            seq: line.seq,
            at: UNIX_EPOCH + Duration::from_millis(line.at_ms),
            protocol: line.protocol,
            name: line.name,
            addr: line.addr,
            port: line.port,
            verdict: line.verdict,
        }
    }
}

/// An audit log's file, open for appending.
#[derive(Debug)]
pub(crate) struct AuditFile {
    path: PathBuf,
    old: PathBuf,
    file: File,
    size: u64,
    cap: u64,
}

impl AuditFile {
    /// Opens (or makes) the audit file in `dir`, with the records both
    /// files hold, oldest first (lines that do not parse skipped).
    pub fn open(dir: &Path, cap: u64) -> io::Result<(Self, Vec<AuditRecord>)> {
        let path = dir.join(AUDIT_FILE);
        let old = dir.join(AUDIT_FILE_OLD);
        let mut records = read(&old)?;
        records.extend(read(&path)?);
        // Rotation keeps the order; a record out of it (a file edited
        // by hand) is dropped rather than numbered twice.
        let mut last = 0;
        records.retain(|record| {
            let keep = record.seq > last;
            last = last.max(record.seq);
            keep
        });
        let mut file = open_private(&path)?;
        let size = trim_cut_tail(&mut file)?;
        Ok((
            AuditFile {
                path,
                old,
                file,
                size,
                cap,
            },
            records,
        ))
    }

    /// Appends `record`, rotating first when it would take the file past
    /// its cap. A line longer than the cap on its own is left out.
    pub fn append(&mut self, record: &AuditRecord) -> io::Result<()> {
        let mut line = serde_json::to_vec(&Line::from(record)).map_err(io::Error::other)?;
        line.push(b'\n');
        let len = line.len() as u64;
        if len > self.cap {
            tracing::warn!(
                seq = record.seq,
                len,
                "an audit record longer than the file's cap is kept in memory only"
            );
            return Ok(());
        }
        if self.size + len > self.cap {
            std::fs::rename(&self.path, &self.old)?;
            self.file = open_private(&self.path)?;
            self.size = 0;
        }
        self.file.write_all(&line)?;
        self.size += len;
        Ok(())
    }
}

/// Opens `path` for appending, made 0600 if new, never through a link.
fn open_private(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
}

/// Cuts a last line without its newline (a write cut short) so the next
/// line starts on a line of its own; returns the size left.
fn trim_cut_tail(file: &mut File) -> io::Result<u64> {
    let size = file.metadata()?.len();
    if size == 0 {
        return Ok(0);
    }
    let mut last = [0u8; 1];
    file.seek(SeekFrom::Start(size - 1))?;
    std::io::Read::read_exact(file, &mut last)?;
    if last[0] == b'\n' {
        return Ok(size);
    }
    // Find the last newline, reading back from the end in chunks.
    let mut end = size;
    let mut chunk = vec![0u8; 4096];
    while end > 0 {
        let start = end.saturating_sub(chunk.len() as u64);
        let len = usize::try_from(end - start).unwrap_or(chunk.len());
        file.seek(SeekFrom::Start(start))?;
        std::io::Read::read_exact(file, &mut chunk[..len])?;
        if let Some(at) = chunk[..len].iter().rposition(|b| *b == b'\n') {
            let keep = start + at as u64 + 1;
            file.set_len(keep)?;
            return Ok(keep);
        }
        end = start;
    }
    file.set_len(0)?;
    Ok(0)
}

/// The records of the file at `path`, skipping lines that do not parse;
/// none when there is no file.
fn read(path: &Path) -> io::Result<Vec<AuditRecord>> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(error),
    };
    let mut records = Vec::new();
    let mut skipped = 0usize;
    for line in BufReader::new(file).split(b'\n') {
        let line = line?;
        if line.is_empty() {
            continue;
        }
        match serde_json::from_slice::<Line>(&line) {
            Ok(line) => records.push(line.into()),
            Err(_) => skipped += 1,
        }
    }
    if skipped > 0 {
        tracing::warn!(path = %path.display(), skipped, "audit lines that do not parse were skipped");
    }
    Ok(records)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::net::Ipv4Addr;
    use std::os::unix::fs::PermissionsExt;

    use super::super::{AuditLog, Refusal};
    use super::*;

    fn refused(log: &AuditLog, port: u16) -> u64 {
        log.record(
            Protocol::Tcp,
            Some("evil.example".into()),
            Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            port,
            Verdict::Refused(Refusal::HostAddress {
                addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
                kind: crate::host::HostKind::Loopback,
            }),
        )
    }

    fn size(dir: &Path, name: &str) -> u64 {
        std::fs::metadata(dir.join(name)).map_or(0, |m| m.len())
    }

    #[test]
    fn records_come_back_in_order_and_numbering_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let log = AuditLog::kept_in(dir.path());
        log.record(
            Protocol::Dns,
            Some("a.test".into()),
            None,
            53,
            Verdict::Allowed,
        );
        for port in 1..=3 {
            refused(&log, port);
        }
        let before = log.records();
        drop(log);
        let again = AuditLog::kept_in(dir.path());
        let back = again.records();
        assert_eq!(back.len(), 4);
        for (was, is) in before.iter().zip(&back) {
            assert_eq!(was.seq, is.seq);
            assert_eq!(was.to_string(), is.to_string(), "the same line");
        }
        assert_eq!(refused(&again, 9), 5, "numbering goes on");
        assert_eq!(again.since(4).len(), 1);
        let mode = std::fs::metadata(dir.path().join(AUDIT_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn the_files_never_pass_their_cap_and_keep_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let cap = 2048;
        let log = AuditLog::kept_in_with(dir.path(), 10_000, cap);
        for port in 1..=200 {
            refused(&log, port);
            assert!(size(dir.path(), AUDIT_FILE) <= cap);
            assert!(size(dir.path(), AUDIT_FILE_OLD) <= cap);
        }
        drop(log);
        let back = AuditLog::kept_in_with(dir.path(), 10_000, cap).records();
        assert!(!back.is_empty() && back.len() < 200, "{}", back.len());
        let seqs: Vec<u64> = back.iter().map(|r| r.seq).collect();
        let first = seqs[0];
        assert_eq!(
            seqs,
            (first..=200).collect::<Vec<u64>>(),
            "the newest, in order"
        );
        // A log keeping fewer records than the files hold keeps the newest.
        let few = AuditLog::kept_in_with(dir.path(), 3, cap);
        let seqs: Vec<u64> = few.records().iter().map(|r| r.seq).collect();
        assert_eq!(seqs, [198, 199, 200]);
        assert_eq!(few.dropped(), 197);
    }

    #[test]
    fn a_cut_or_corrupt_line_is_skipped_and_the_next_starts_clean() {
        let dir = tempfile::tempdir().unwrap();
        let log = AuditLog::kept_in(dir.path());
        for port in 1..=3 {
            refused(&log, port);
        }
        drop(log);
        let path = dir.path().join(AUDIT_FILE);
        let mut text = std::fs::read(&path).unwrap();
        // A garbage line in the middle, and a record cut mid-write.
        text.extend_from_slice(b"not json at all\n{\"seq\":4,\"at_ms\":1,\"proto");
        std::fs::write(&path, &text).unwrap();
        let again = AuditLog::kept_in(dir.path());
        let seqs: Vec<u64> = again.records().iter().map(|r| r.seq).collect();
        assert_eq!(seqs, [1, 2, 3]);
        assert_eq!(refused(&again, 4), 4);
        drop(again);
        let seqs: Vec<u64> = AuditLog::kept_in(dir.path())
            .records()
            .iter()
            .map(|r| r.seq)
            .collect();
        assert_eq!(seqs, [1, 2, 3, 4], "the record after the cut one is whole");
    }

    #[test]
    fn a_link_in_place_of_the_file_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, b"").unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join(AUDIT_FILE)).unwrap();
        let log = AuditLog::kept_in(dir.path());
        refused(&log, 1);
        assert_eq!(log.len(), 1, "kept in memory");
        assert_eq!(std::fs::read(&target).unwrap(), b"");
    }
}
