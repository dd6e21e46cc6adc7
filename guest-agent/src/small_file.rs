//! Reading the kernel's small text files (`/proc`, cgroupfs) the cheap way:
//! one `open`, one `read` into the text's own buffer, one `close`.
//!
//! `std::fs::read_to_string` adds a `statx` for a size hint (always 0 for
//! these files) and a second `read` to see the end; on an emulated vCPU
//! each system call costs tens of microseconds, and the agent reads such
//! files at every program's exit and in every `Health.Check`. The kernel
//! hands a whole small file to the first `read` (seq_file fills the
//! buffer it is given), so a file that fits is read in one; one that does
//! not is read again, whole.
//!
//! A file read again and again (by every `Health.Check`) is kept open
//! instead ([`Kept`]): the kernel makes a seq_file's text anew at each
//! read from offset 0, so one `pread` is all a read costs, without the
//! path walk, the `open` and the `close`.

use std::fs::File;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Larger than any file read this way (`/proc/meminfo` is about 1.5 KiB).
const BUFFER: usize = 4096;

/// The file at `path`.
pub fn read(path: &Path) -> Option<String> {
    let file = File::open(path).ok()?;
    whole(&file, ReadFrom::Position)
}

/// The file `name` in the directory `dir`.
pub fn read_at(dir: impl AsFd, name: &str) -> Option<String> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(dir.as_fd(), name, flags, Mode::empty()).ok()?;
    whole(&fd, ReadFrom::Position)
}

/// A small kernel file opened at its first read and then kept open, each
/// read of it a fresh copy of its text.
#[derive(Debug)]
pub struct Kept {
    path: PathBuf,
    file: OnceLock<File>,
}

impl Kept {
    /// The file at `path`, not opened yet: one that cannot be opened now
    /// is tried again at the next read.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            file: OnceLock::new(),
        }
    }

    /// The file's text now.
    pub fn read(&self) -> Option<String> {
        let file = match self.file.get() {
            Some(file) => file,
            None => {
                let opened = File::open(&self.path).ok()?;
                self.file.get_or_init(|| opened)
            }
        };
        whole(file, ReadFrom::Start)
    }
}

/// Where [`whole`] reads from.
#[derive(Clone, Copy)]
enum ReadFrom {
    /// The file's own position, with `read` (a file just opened).
    Position,
    /// Offset 0, with `pread` (a kept file, whose position never moves).
    Start,
}

/// The text of `fd` to its end. The bytes go straight into the spare room
/// of the `String`'s buffer: nothing is zeroed first and nothing copied
/// after. A read that leaves room is the whole file (seq_file fills all it
/// is given); one that fills it is followed by more.
fn whole(fd: impl AsFd, from: ReadFrom) -> Option<String> {
    let mut bytes = Vec::with_capacity(BUFFER);
    loop {
        let offset = u64::try_from(bytes.len()).ok()?;
        let spare = rustix::buffer::spare_capacity(&mut bytes);
        let n = match from {
            ReadFrom::Position => rustix::io::read(fd.as_fd(), spare),
            ReadFrom::Start => rustix::io::pread(fd.as_fd(), spare, offset),
        }
        .ok()?;
        if n == 0 || bytes.len() < bytes.capacity() {
            break;
        }
        bytes.reserve(BUFFER);
    }
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn small_and_large_files_are_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let small = "low 0\noom_kill 2\n";
        std::fs::write(dir.path().join("small"), small).unwrap();
        let large = "x".repeat(3 * BUFFER + 5);
        std::fs::write(dir.path().join("large"), &large).unwrap();
        let open = File::open(dir.path()).unwrap();

        assert_eq!(read(&dir.path().join("small")).as_deref(), Some(small));
        assert_eq!(read_at(&open, "small").as_deref(), Some(small));
        assert_eq!(read(&dir.path().join("large")), Some(large.clone()));
        assert_eq!(read_at(&open, "large"), Some(large));
        assert_eq!(read_at(&open, "missing"), None);
        assert!(read(Path::new("/proc/self/statm")).is_some());
    }

    #[test]
    fn a_kept_file_is_read_anew_each_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("later");
        let kept = Kept::new(&path);
        assert_eq!(kept.read(), None, "no file yet");
        std::fs::write(&path, "first\n").unwrap();
        assert_eq!(kept.read().as_deref(), Some("first\n"));
        let large = "y".repeat(2 * BUFFER + 7);
        std::fs::write(&path, &large).unwrap();
        assert_eq!(kept.read(), Some(large), "the same open file, read whole");
    }

    #[test]
    fn a_kept_proc_file_changes_between_reads() {
        let uptime = Kept::new("/proc/uptime");
        let first = uptime.read().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let second = uptime.read().unwrap();
        assert_ne!(first, second, "the kernel makes the text anew at offset 0");
    }
}
