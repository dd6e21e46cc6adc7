//! What a child does between `fork` and `exec`: lead a new session on its
//! terminal (for `pty`), join its cgroup, undo the agent's OOM protection,
//! set its rlimits, shed dangerous capabilities, drop to the requested user
//! and set no_new_privs. Every step goes through a safe wrapper (nix, and
//! rustix where nix has none); the one `unsafe` block left is installing
//! the hook itself (`pre_exec`). The agent's only other one is
//! `crate::entropy`'s `RNDRESEEDCRNG` ioctl.
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
//! gives them back. They are named through the `caps` crate, but dropped
//! with rustix's `prctl(PR_CAPBSET_DROP)` wrapper: `caps::drop` formats a
//! `String` when the call fails (as it does, with `EPERM`, for an agent
//! without `CAP_SETPCAP`), and the hook must not allocate.
//!
//! The hook runs in a forked copy of a multi-threaded process, so it may
//! only make async-signal-safe system calls: every value it needs (the open
//! `cgroup.procs`, the group list, the rlimits) is prepared in the parent,
//! and it neither allocates nor takes locks.

#![allow(unsafe_code)]

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::process::Command;

use caps::Capability;
use nix::errno::Errno;
use nix::fcntl::{open, OFlag};
use nix::sys::prctl;
use nix::sys::resource::{setrlimit, Resource};
use nix::sys::stat::Mode;
use nix::unistd::{setgid, setgroups, setsid, setuid, write, Gid, Uid};
use rustix::thread::CapabilitySet;

use super::user::Credentials;

/// Capabilities a program loses unless started `privileged`: those that
/// reach the kernel, the agent or the machine rather than the sandbox's own
/// files and processes.
pub const DROPPED_CAPS: &[Capability] = &[
    Capability::CAP_KILL,
    Capability::CAP_SYS_MODULE,
    Capability::CAP_SYS_RAWIO,
    Capability::CAP_SYS_PTRACE,
    Capability::CAP_SYS_ADMIN,
    Capability::CAP_SYS_BOOT,
    Capability::CAP_SYS_RESOURCE,
    Capability::CAP_SYS_TIME,
    Capability::CAP_MAC_OVERRIDE,
    Capability::CAP_MAC_ADMIN,
    Capability::CAP_SYSLOG,
    Capability::CAP_PERFMON,
    Capability::CAP_BPF,
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
        // setuid(2) on values prepared before the fork (a static path, a
        // static list of capabilities, a moved Vec that is only read),
        // through nix's and rustix's wrappers, which pass them straight to
        // the kernel (rustix without libc); it builds its errors from raw
        // errnos, which does not allocate. It takes no locks and touches no
        // state shared with other threads.
        unsafe {
            command.pre_exec(hook);
        }
    }
}

/// Writes "0" to `/proc/self/oom_score_adj`; a failure leaves the child
/// protected like the agent, which is logged by nobody (no allocation
/// here) but is harmless to the program itself.
fn reset_oom_score_adj() {
    // A `CStr` path: nix passes it to open(2) as it is, without copying.
    let path = c"/proc/self/oom_score_adj";
    if let Ok(fd) = open(path, OFlag::O_WRONLY | OFlag::O_CLOEXEC, Mode::empty()) {
        let _ = write(&fd, b"0");
        // Dropping `fd` closes it.
    }
}

/// Makes stdin, a terminal, the controlling terminal of the session the
/// child just started (it has none yet). The terminal is new and belongs
/// to no other session, so this needs no privilege (argument 0: do not
/// steal it from another session). std set fd 0 up before the hook runs;
/// rustix borrows it without touching `std::io::stdin`'s lock or buffer.
fn take_controlling_terminal() -> std::io::Result<()> {
    rustix::process::ioctl_tiocsctty(rustix::stdio::stdin())?;
    Ok(())
}

/// Drops [`DROPPED_CAPS`] from the bounding set.
fn drop_bounding_caps() -> std::io::Result<()> {
    for &cap in DROPPED_CAPS {
        match rustix::thread::remove_capability_from_bounding_set(bounding_bit(cap)) {
            // EINVAL: a capability this kernel does not know. EPERM: an
            // agent without CAP_SETPCAP (not PID 1, in tests), whose
            // programs cannot hold more than it does anyway.
            Ok(()) | Err(rustix::io::Errno::INVAL | rustix::io::Errno::PERM) => {}
            Err(errno) => return Err(errno.into()),
        }
    }
    Ok(())
}

/// `cap` as the one-bit set rustix takes (bit n for capability number n).
fn bounding_bit(cap: Capability) -> CapabilitySet {
    CapabilitySet::from_bits_retain(1 << cap.index())
}

/// Sets no_new_privs: `exec` can no longer grant privileges.
fn set_no_new_privs() -> std::io::Result<()> {
    prctl::set_no_new_privs().map_err(io_error)
}

/// An errno as an `io::Error`, without allocating.
fn io_error(errno: Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(errno as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounding_bits_are_the_kernel_numbers() {
        assert_eq!(bounding_bit(Capability::CAP_KILL), CapabilitySet::KILL);
        assert_eq!(
            bounding_bit(Capability::CAP_SYS_BOOT),
            CapabilitySet::SYS_BOOT
        );
        assert_eq!(bounding_bit(Capability::CAP_BPF), CapabilitySet::BPF);
    }

    #[test]
    fn the_protocol_doc_lists_the_dropped_capabilities() {
        let doc = include_str!("../../../../docs/protocol.md");
        let privileges = doc
            .split("**Privileges**")
            .nth(1)
            .and_then(|rest| rest.split("\n\n").next())
            .unwrap_or_default();
        let listed = privileges.matches("`CAP_").count();
        assert_eq!(listed, DROPPED_CAPS.len(), "{privileges}");
        for cap in DROPPED_CAPS {
            assert!(privileges.contains(&format!("`{cap}`")), "{cap}");
        }
    }
}
