//! The VM's log files on the host: reading their tail, and keeping the
//! guest console's from filling the host's disk.
//!
//! QEMU writes the guest's serial console to `console.log` without any
//! limit, and a guest program running as root can write to the console as
//! fast as the emulated UART goes (about 0.7 MB/s under TCG; far more with
//! KVM), for as long as the sandbox lives. [`bound`] frees the disk blocks
//! of everything but the newest part of the file by punching a hole at its
//! start: QEMU keeps writing at its own offset, the file's apparent size
//! keeps growing, but only the newest bytes take space, and the tail that
//! error messages quote stays intact.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use nix::fcntl::{fallocate, FallocateFlags};

/// How much of a bounded log is kept at most: the newest MiB.
const KEEP_AT_MOST: u64 = 1 << 20;
/// Holes are punched in whole pages.
const PAGE: u64 = 4096;

/// The last `max_bytes` of a file, lossily decoded; empty if unreadable.
/// Only the tail is read, however large the file (or its holes) is.
pub(crate) fn tail(path: &Path, max_bytes: usize) -> String {
    let read_tail = || -> std::io::Result<Vec<u8>> {
        let mut file = File::open(path)?;
        let len = file.metadata()?.len();
        let start = len.saturating_sub(max_bytes as u64);
        file.seek(SeekFrom::Start(start))?;
        let mut bytes = Vec::with_capacity(max_bytes.min(1 << 20));
        file.take(max_bytes as u64).read_to_end(&mut bytes)?;
        Ok(bytes)
    };
    read_tail()
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default()
}

/// Once the file at `path` takes more than `budget` bytes of disk, frees
/// all but its newest part (half the budget, at most 1 MiB). Returns the
/// bytes of disk it had before, when it punched.
pub(crate) fn bound(path: &Path, budget: u64) -> std::io::Result<Option<u64>> {
    let file = OpenOptions::new().write(true).open(path)?;
    let meta = file.metadata()?;
    let allocated = meta.blocks().saturating_mul(512);
    if allocated <= budget {
        return Ok(None);
    }
    let keep = (budget / 2).min(KEEP_AT_MOST);
    let end = meta.len().saturating_sub(keep) / PAGE * PAGE;
    if end == 0 {
        return Ok(None);
    }
    let len = i64::try_from(end).map_err(|_| std::io::Error::other("log file too large"))?;
    fallocate(
        &file,
        FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE,
        0,
        len,
    )
    .map_err(std::io::Error::from)?;
    Ok(Some(allocated))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn tail_reads_only_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        std::fs::write(&path, "0123456789").unwrap();
        assert_eq!(tail(&path, 4), "6789");
        assert_eq!(tail(&path, 100), "0123456789");
        assert_eq!(tail(&dir.path().join("missing"), 4), "");
    }

    #[test]
    fn a_log_over_budget_keeps_its_tail_in_less_space() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("console.log");
        let mut writer = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        let line = [b'x'; 4095];
        for _ in 0..512 {
            writer.write_all(&line).unwrap();
            writer.write_all(b"\n").unwrap();
        }
        writer.write_all(b"the last words\n").unwrap();
        writer.flush().unwrap();
        let budget = 256 * 1024;

        let before = bound(&path, budget).unwrap();
        assert!(before.is_some_and(|b| b >= 2 << 20), "{before:?}");
        let meta = std::fs::metadata(&path).unwrap();
        assert!(
            meta.blocks() * 512 <= budget,
            "{} bytes left",
            meta.blocks() * 512
        );
        assert_eq!(meta.len(), 512 * 4096 + 15, "the size stays");
        assert!(tail(&path, 64).ends_with("the last words\n"));

        // The writer goes on at its own offset, and the file can be bounded again.
        writer.write_all(b"more\n").unwrap();
        writer.flush().unwrap();
        assert!(tail(&path, 64).ends_with("the last words\nmore\n"));
        assert_eq!(bound(&path, budget).unwrap(), None, "already under budget");
    }
}
