//! Reading the kernel's small text files (`/proc`, cgroupfs) the cheap way:
//! one `open`, one `read` into a stack buffer, one `close`.
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
use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Larger than any file read this way (`/proc/meminfo` is about 1.5 KiB).
const BUFFER: usize = 4096;

/// The file at `path`.
pub fn read(path: &Path) -> Option<String> {
    let mut file = File::open(path).ok()?;
    let mut buffer = [0u8; BUFFER];
    let n = file.read(&mut buffer).ok()?;
    whole(&buffer, n).or_else(|| std::fs::read_to_string(path).ok())
}

/// The file `name` in the directory `dir`.
pub fn read_at(dir: impl AsFd, name: &str) -> Option<String> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(dir.as_fd(), name, flags, Mode::empty()).ok()?;
    let mut buffer = [0u8; BUFFER];
    let n = rustix::io::read(&fd, &mut buffer).ok()?;
    whole(&buffer, n).or_else(|| {
        // The rest follows what the first read got.
        let mut bytes = buffer.to_vec();
        File::from(fd).read_to_end(&mut bytes).ok()?;
        String::from_utf8(bytes).ok()
    })
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
        let mut buffer = [0u8; BUFFER];
        let n = file.read_at(&mut buffer, 0).ok()?;
        whole(&buffer, n).or_else(|| {
            // Larger than the buffer: read on from where the first read ended.
            let mut bytes = buffer.to_vec();
            loop {
                let mut more = [0u8; BUFFER];
                let offset = u64::try_from(bytes.len()).ok()?;
                match file.read_at(&mut more, offset).ok()? {
                    0 => break,
                    n => bytes.extend_from_slice(more.get(..n)?),
                }
            }
            String::from_utf8(bytes).ok()
        })
    }
}

/// The text read, unless it filled the buffer (then there may be more).
fn whole(buffer: &[u8], n: usize) -> Option<String> {
    if n >= buffer.len() {
        return None;
    }
    String::from_utf8(buffer.get(..n)?.to_vec()).ok()
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
