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

use std::fs::File;
use std::io::Read;
use std::os::fd::AsFd;
use std::path::Path;

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
}
