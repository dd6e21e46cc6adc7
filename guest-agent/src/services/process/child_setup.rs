//! What a child does between `fork` and `exec`: lead a new session on its
//! terminal (for `pty`), join its cgroup, undo the agent's OOM protection,
//! set its rlimits, shed dangerous capabilities, drop to the requested user
//! and set no_new_privs. The agent's only `unsafe` code.
//!
//! All of it must happen in the child before `exec`: a cgroup joined
//! afterwards (by the parent writing the pid) would miss anything the
//! program forks first, and std's own `uid`/`gid` options clear
//! supplementary groups instead of setting them. A terminal must become
//! the controlling terminal of the session the program leads, which only
//! the program itself can do (`setsid`, then `TIOCSCTTY` on its stdin, the
//! terminal's slave side by then). Order matters: the cgroup
//! write, raising rlimits and dropping bounding-set capabilities need root
//! (and `CAP_SETPCAP`), and groups must be set before giving up the uid.
//!
//! Capabilities: a program not started `privileged` loses
//! [`DROPPED_CAPS`] from its bounding set, so even as root it gets none of
//! them at `exec` (root's capabilities after `exec` are the bounding set),
//! and runs with no_new_privs, so no setuid binary or file capability
//! gives them back.
//!
//! The hook runs in a forked copy of a multi-threaded process, so it may
//! only make async-signal-safe system calls: every value it needs (the open
//! `cgroup.procs`, the group list, the rlimits) is prepared in the parent,
//! and it neither allocates nor takes locks.

#![allow(unsafe_code)]

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::process::Command;

use nix::errno::Errno;
use nix::libc;
use nix::sys::resource::{setrlimit, Resource};
use nix::unistd::{setgid, setgroups, setsid, setuid, write, Gid, Uid};

use super::user::Credentials;

/// Capabilities a program loses unless started `privileged`: those that
/// reach the kernel, the agent or the machine rather than the sandbox's own
/// files and processes.
pub const DROPPED_CAPS: &[(&str, libc::c_int)] = &[
    ("CAP_KILL", 5),
    ("CAP_SYS_MODULE", 16),
    ("CAP_SYS_RAWIO", 17),
    ("CAP_SYS_PTRACE", 19),
    ("CAP_SYS_ADMIN", 21),
    ("CAP_SYS_BOOT", 22),
    ("CAP_SYS_RESOURCE", 24),
    ("CAP_SYS_TIME", 25),
    ("CAP_MAC_OVERRIDE", 32),
    ("CAP_MAC_ADMIN", 33),
    ("CAP_SYSLOG", 34),
    ("CAP_PERFMON", 38),
    ("CAP_BPF", 39),
];

/// The work to do in the child before `exec`.
#[derive(Debug, Default)]
pub struct ChildSetup {
    /// The program's `cgroup.procs`, opened (close-on-exec) by the parent.
    pub cgroup_procs: Option<File>,
    /// The identity to switch to.
    pub credentials: Option<Credentials>,
    /// rlimits to set, soft and hard alike.
    pub rlimits: Vec<(Resource, u64)>,
    /// Keep every capability and leave no_new_privs unset.
    pub privileged: bool,
    /// Reset `oom_score_adj` to 0 (the agent runs at -1000 as PID 1, and
    /// children inherit it).
    pub reset_oom_score: bool,
    /// Start a new session and make stdin (a terminal) its controlling
    /// terminal. The command must not also ask for a process group: a
    /// group leader cannot `setsid`.
    pub controlling_terminal: bool,
}

/// Ids in the form the system calls take, built before the fork.
#[derive(Debug)]
struct Ids {
    uid: Uid,
    gid: Gid,
    groups: Vec<Gid>,
}

impl ChildSetup {
    /// Installs the hook on `command`.
    pub fn install(self, command: &mut Command) {
        let Self {
            cgroup_procs,
            credentials,
            rlimits,
            privileged,
            reset_oom_score,
            controlling_terminal,
        } = self;
        let ids = credentials.map(|c| Ids {
            uid: Uid::from_raw(c.uid),
            gid: Gid::from_raw(c.gid),
            groups: c.groups.into_iter().map(Gid::from_raw).collect(),
        });
        let hook = move || -> std::io::Result<()> {
            if controlling_terminal {
                setsid().map_err(io_error)?;
                take_controlling_terminal()?;
            }
            if let Some(procs) = &cgroup_procs {
                // "0" means the writing process itself.
                write(procs, b"0").map_err(io_error)?;
            }
            if reset_oom_score {
                reset_oom_score_adj();
            }
            for &(resource, value) in &rlimits {
                setrlimit(resource, value, value).map_err(io_error)?;
            }
            if !privileged {
                drop_bounding_caps()?;
            }
            if let Some(ids) = &ids {
                setgroups(&ids.groups).map_err(io_error)?;
                setgid(ids.gid).map_err(io_error)?;
                setuid(ids.uid).map_err(io_error)?;
            }
            if !privileged {
                set_no_new_privs()?;
            }
            Ok(())
        };
        // SAFETY: the hook runs in the child after fork. It only calls
        // setsid(2), ioctl(2) (TIOCSCTTY on fd 0), write(2), open(2),
        // close(2), setrlimit(2), prctl(2), setgroups(2), setgid(2) and
        // setuid(2) on values prepared before the fork (a
        // static path, a moved Vec that is only read, nix's wrappers passing
        // them straight to libc), and builds its error from a raw errno,
        // which does not allocate. It takes no locks and touches no state
        // shared with other threads.
        unsafe {
            command.pre_exec(hook);
        }
    }
}

/// Writes "0" to `/proc/self/oom_score_adj`; a failure leaves the child
/// protected like the agent, which is logged by nobody (no allocation
/// here) but is harmless to the program itself.
fn reset_oom_score_adj() {
    // SAFETY: open(2), write(2) and close(2) are async-signal-safe; the path
    // is a static NUL-terminated string and the buffer a static slice.
    unsafe {
        let fd = libc::open(
            c"/proc/self/oom_score_adj".as_ptr(),
            libc::O_WRONLY | libc::O_CLOEXEC,
        );
        if fd >= 0 {
            libc::write(fd, b"0".as_ptr().cast(), 1);
            libc::close(fd);
        }
    }
}

/// Makes stdin, a terminal, the controlling terminal of the session the
/// child just started (it has none yet). The terminal is new and belongs
/// to no other session, so this needs no privilege (argument 0: do not
/// steal it from another session).
fn take_controlling_terminal() -> std::io::Result<()> {
    // SAFETY: ioctl(TIOCSCTTY) takes an integer argument, no pointer; fd 0
    // is the child's own stdin (std set it up before the hook runs). A
    // plain system call, async-signal-safe.
    let rc = unsafe { libc::ioctl(libc::STDIN_FILENO, libc::TIOCSCTTY, 0) };
    if rc != 0 {
        return Err(io_error(Errno::last()));
    }
    Ok(())
}

/// Drops [`DROPPED_CAPS`] from the bounding set. `EINVAL` (a capability
/// this kernel does not know) is skipped.
fn drop_bounding_caps() -> std::io::Result<()> {
    for &(_, cap) in DROPPED_CAPS {
        // SAFETY: prctl(PR_CAPBSET_DROP) is a plain system call on an
        // integer argument; async-signal-safe.
        let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
        if rc != 0 {
            let errno = Errno::last();
            // EINVAL: a capability this kernel does not know. EPERM: an
            // agent without CAP_SETPCAP (not PID 1, in tests), whose
            // programs cannot hold more than it does anyway.
            if errno != Errno::EINVAL && errno != Errno::EPERM {
                return Err(io_error(errno));
            }
        }
    }
    Ok(())
}

/// Sets no_new_privs: `exec` can no longer grant privileges.
fn set_no_new_privs() -> std::io::Result<()> {
    // SAFETY: prctl(PR_SET_NO_NEW_PRIVS) is a plain system call on integer
    // arguments; async-signal-safe.
    let rc = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, 0, 0, 0) };
    if rc != 0 {
        return Err(io_error(Errno::last()));
    }
    Ok(())
}

/// An errno as an `io::Error`, without allocating.
fn io_error(errno: Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(errno as i32)
}
