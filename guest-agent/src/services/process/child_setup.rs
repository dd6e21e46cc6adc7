//! What a child does between `fork` and `exec`: join its cgroup, then drop
//! to the requested user. The agent's only `unsafe` code.
//!
//! Both must happen in the child before `exec`: a cgroup joined afterwards
//! (by the parent writing the pid) would miss anything the program forks
//! first, and std's own `uid`/`gid` options clear supplementary groups
//! instead of setting them. Order matters: the cgroup write needs root, and
//! groups must be set before giving up the uid.
//!
//! The hook runs in a forked copy of a multi-threaded process, so it may
//! only make async-signal-safe system calls: every value it needs (the open
//! `cgroup.procs`, the group list) is prepared in the parent, and it neither
//! allocates nor takes locks.

#![allow(unsafe_code)]

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::process::Command;

use nix::errno::Errno;
use nix::unistd::{setgid, setgroups, setuid, write, Gid, Uid};

use super::user::Credentials;

/// The work to do in the child before `exec`.
#[derive(Debug, Default)]
pub struct ChildSetup {
    /// The program's `cgroup.procs`, opened (close-on-exec) by the parent.
    pub cgroup_procs: Option<File>,
    /// The identity to switch to.
    pub credentials: Option<Credentials>,
}

/// Ids in the form the system calls take, built before the fork.
#[derive(Debug)]
struct Ids {
    uid: Uid,
    gid: Gid,
    groups: Vec<Gid>,
}

impl ChildSetup {
    /// Installs the hook on `command`; does nothing when there is nothing
    /// to do.
    pub fn install(self, command: &mut Command) {
        let Self {
            cgroup_procs,
            credentials,
        } = self;
        if cgroup_procs.is_none() && credentials.is_none() {
            return;
        }
        let ids = credentials.map(|c| Ids {
            uid: Uid::from_raw(c.uid),
            gid: Gid::from_raw(c.gid),
            groups: c.groups.into_iter().map(Gid::from_raw).collect(),
        });
        let hook = move || -> std::io::Result<()> {
            if let Some(procs) = &cgroup_procs {
                // "0" means the writing process itself.
                write(procs, b"0").map_err(io_error)?;
            }
            if let Some(ids) = &ids {
                setgroups(&ids.groups).map_err(io_error)?;
                setgid(ids.gid).map_err(io_error)?;
                setuid(ids.uid).map_err(io_error)?;
            }
            Ok(())
        };
        // SAFETY: the hook runs in the child after fork. It only calls
        // write(2), setgroups(2), setgid(2) and setuid(2) on values prepared
        // before the fork (nix's wrappers pass them straight to libc), and
        // builds its error from a raw errno, which does not allocate. It
        // takes no locks and touches no state shared with other threads.
        unsafe {
            command.pre_exec(hook);
        }
    }
}

/// An errno as an `io::Error`, without allocating.
fn io_error(errno: Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(errno as i32)
}
