//! What a program's process does to itself before `exec`, once its stdio
//! and session are in place: undo the agent's OOM protection, set its
//! rlimits, shed dangerous capabilities, drop to the requested user and
//! set no_new_privs.
//!
//! Order matters: raising rlimits and dropping bounding-set capabilities
//! need root (and `CAP_SETPCAP`), and groups must be set before giving up
//! the uid.
//!
//! Capabilities: a program not started `privileged` loses
//! [`DROPPED_CAPS`] from its bounding set, so even as root it gets none of
//! them at `exec` (root's capabilities after `exec` are the bounding set),
//! and runs with no_new_privs, so no setuid binary or file capability
//! gives them back. They are named through the `caps` crate, but dropped
//! with rustix's `prctl(PR_CAPBSET_DROP)` wrapper: `caps::drop` formats a
//! `String` when the call fails (as it does, with `EPERM`, for an agent
//! without `CAP_SETPCAP`), and these steps must not allocate.
//!
//! They run in a child that shares the agent's memory (see `vfork`), so
//! they only make system calls, through rustix's raw wrappers (no libc, so
//! no lock and no `errno`), on values prepared before the clone. Ids are
//! set with the per-thread system calls on purpose: the child is a single
//! thread, and libc's `setuid` would try to reach every thread of the
//! agent.

use caps::Capability;
use rustix::io::Errno;
use rustix::process::{Gid, Resource, Rlimit, Uid};
use rustix::thread::CapabilitySet;

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

/// The identity a program runs as, in the form the system calls take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ids {
    /// Its user.
    pub uid: Uid,
    /// Its primary group.
    pub gid: Gid,
    /// Its supplementary groups.
    pub groups: Vec<Gid>,
}

impl Ids {
    /// The ids of a user and its groups.
    pub fn new(uid: u32, gid: u32, groups: &[u32]) -> Self {
        Self {
            uid: Uid::from_raw(uid),
            gid: Gid::from_raw(gid),
            groups: groups.iter().copied().map(Gid::from_raw).collect(),
        }
    }
}

/// The work to do in the child before `exec`.
#[derive(Debug, Default)]
pub struct ChildSetup {
    /// The identity to switch to.
    pub ids: Option<Ids>,
    /// rlimits to set, soft and hard alike.
    pub rlimits: Vec<(Resource, u64)>,
    /// Keep every capability and leave no_new_privs unset.
    pub privileged: bool,
    /// Reset `oom_score_adj` to 0 (the agent runs at -1000 as PID 1, and
    /// children inherit it).
    pub reset_oom_score: bool,
}

impl ChildSetup {
    /// Runs the steps in the calling process, which is about to `exec`.
    pub(super) fn apply(&self) -> Result<(), Errno> {
        if self.reset_oom_score {
            reset_oom_score_adj();
        }
        // The agent's raised limit is its own; a request's rlimits below
        // may set another.
        crate::open_files::lower_for_program()?;
        for &(resource, value) in &self.rlimits {
            let limit = Rlimit {
                current: Some(value),
                maximum: Some(value),
            };
            rustix::process::setrlimit(resource, limit)?;
        }
        if !self.privileged {
            drop_bounding_caps()?;
        }
        if let Some(ids) = &self.ids {
            rustix::thread::set_thread_groups(&ids.groups)?;
            rustix::thread::set_thread_gid(ids.gid)?;
            rustix::thread::set_thread_uid(ids.uid)?;
        }
        if !self.privileged {
            rustix::thread::set_no_new_privs(true)?;
        }
        Ok(())
    }
}

/// Writes "0" to `/proc/self/oom_score_adj`; a failure leaves the child
/// protected like the agent, which is logged by nobody (no allocation
/// here) but is harmless to the program itself.
fn reset_oom_score_adj() {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::WRONLY | OFlags::CLOEXEC;
    if let Ok(fd) = rustix::fs::open(c"/proc/self/oom_score_adj", flags, Mode::empty()) {
        let _ = rustix::io::write(&fd, b"0");
        // Dropping `fd` closes it.
    }
}

/// Drops [`DROPPED_CAPS`] from the bounding set.
fn drop_bounding_caps() -> Result<(), Errno> {
    for &cap in DROPPED_CAPS {
        match rustix::thread::remove_capability_from_bounding_set(bounding_bit(cap)) {
            // EINVAL: a capability this kernel does not know. EPERM: an
            // agent without CAP_SETPCAP (not PID 1, in tests), whose
            // programs cannot hold more than it does anyway.
            Ok(()) | Err(Errno::INVAL | Errno::PERM) => {}
            Err(errno) => return Err(errno),
        }
    }
    Ok(())
}

/// `cap` as the one-bit set rustix takes (bit n for capability number n).
fn bounding_bit(cap: Capability) -> CapabilitySet {
    CapabilitySet::from_bits_retain(1 << cap.index())
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
        let doc = include_str!("../../../docs/protocol.md");
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
