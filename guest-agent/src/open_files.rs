//! The agent's open-file limit, and the one its programs start with.
//!
//! The kernel starts PID 1 with 1024 open files (soft) of 4096 (hard).
//! The agent holds several descriptors per running program (its output
//! pipes, its stdin, its pidfd) besides every connection it carries, so
//! 200 programs at once ran out. The agent raises its own limit to the
//! kernel's ceiling (`fs.nr_open`), and each program it starts gets the
//! conventional soft limit of 1024 back (programs that use `select` break
//! above it), under the same raised hard limit, which a program may climb
//! to with `ulimit -n` as it would on any Linux host.

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// The soft open-file limit a program starts with (unless its request
/// sets one).
pub const PROGRAM_SOFT: u64 = 1024;

/// The ceiling when `/proc/sys/fs/nr_open` cannot be read (its default).
const NR_OPEN_DEFAULT: u64 = 1 << 20;

/// Raises the agent's own limit: as PID 1 (root) both soft and hard to the
/// kernel's ceiling; otherwise the soft limit to the hard one. Logs what
/// it could not do; the agent serves on either way.
pub fn raise(pid1: bool) {
    let current = getrlimit(Resource::Nofile);
    let raised = if pid1 {
        let ceiling = std::fs::read_to_string("/proc/sys/fs/nr_open")
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(NR_OPEN_DEFAULT);
        Rlimit {
            current: Some(ceiling),
            maximum: Some(ceiling),
        }
    } else {
        Rlimit {
            // An unlimited hard limit: the usual ceiling will do.
            current: Some(current.maximum.unwrap_or(NR_OPEN_DEFAULT)),
            maximum: current.maximum,
        }
    };
    let limit = raised.current;
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => tracing::debug!(?limit, "open files raised"),
        Err(error) => tracing::warn!(%error, ?limit, "cannot raise the open-file limit"),
    }
}

/// In a new program's child, before `exec`: the soft limit back to
/// [`PROGRAM_SOFT`] when the agent's is higher (the hard one stays).
/// Raw system calls only (it runs between clone and exec).
pub fn lower_for_program() -> Result<(), rustix::io::Errno> {
    let current = getrlimit(Resource::Nofile);
    match current.current {
        Some(soft) if soft <= PROGRAM_SOFT => Ok(()),
        _ => setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(PROGRAM_SOFT),
                maximum: current.maximum,
            },
        ),
    }
}
