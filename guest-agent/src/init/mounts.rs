//! The filesystems PID 1 mounts before anything else runs.
//!
//! [`mount_proc`] runs first, before logging is set up, because the log
//! filter comes from `/proc/cmdline`; [`mount_rest`] mounts the others and
//! logs as it goes. A filesystem that is already mounted (`EBUSY`) is fine:
//! the initramfs or a test harness may have done it.

use std::path::Path;

use nix::errno::Errno;
use nix::mount::{mount, MsFlags};

/// A filesystem that could not be mounted.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// The mount point could not be created.
    #[error("cannot create mount point {target}")]
    MountPoint {
        /// The directory that was to be created.
        target: &'static str,
        /// Why creating it failed.
        #[source]
        source: std::io::Error,
    },
    /// `mount(2)` failed.
    #[error("cannot mount {fstype} on {target}")]
    Mount {
        /// The filesystem type.
        fstype: &'static str,
        /// The mount point.
        target: &'static str,
        /// The errno from `mount(2)`.
        #[source]
        source: Errno,
    },
    /// `/dev/ptmx` could not be pointed at the devpts instance.
    #[error("cannot link /dev/ptmx to pts/ptmx")]
    Ptmx(#[source] std::io::Error),
}

/// One entry of the mount table.
#[derive(Debug)]
struct Mount {
    fstype: &'static str,
    target: &'static str,
    flags: MsFlags,
    data: Option<&'static str>,
    /// `data` names options that only newer kernels know: when the kernel
    /// refuses them (`EINVAL`), mount without them.
    data_optional: bool,
}

const NOSUID_NODEV: MsFlags = MsFlags::MS_NOSUID.union(MsFlags::MS_NODEV);
const NOSUID_NODEV_NOEXEC: MsFlags = NOSUID_NODEV.union(MsFlags::MS_NOEXEC);

const PROC: Mount = Mount {
    fstype: "proc",
    target: "/proc",
    flags: NOSUID_NODEV_NOEXEC,
    data: None,
    data_optional: false,
};

/// Mounted in order: a later target may live inside an earlier one.
const REST: &[Mount] = &[
    Mount {
        fstype: "sysfs",
        target: "/sys",
        flags: NOSUID_NODEV_NOEXEC,
        data: None,
        data_optional: false,
    },
    Mount {
        fstype: "devtmpfs",
        target: "/dev",
        flags: MsFlags::MS_NOSUID,
        data: Some("mode=0755"),
        data_optional: false,
    },
    Mount {
        fstype: "devpts",
        target: "/dev/pts",
        flags: MsFlags::MS_NOSUID.union(MsFlags::MS_NOEXEC),
        data: Some("newinstance,ptmxmode=0666,mode=0620"),
        data_optional: false,
    },
    Mount {
        fstype: "tmpfs",
        target: "/dev/shm",
        flags: NOSUID_NODEV,
        data: Some("mode=1777"),
        data_optional: false,
    },
    Mount {
        fstype: "tmpfs",
        target: "/run",
        flags: NOSUID_NODEV,
        data: Some("mode=0755"),
        data_optional: false,
    },
    Mount {
        fstype: "tmpfs",
        target: "/tmp",
        flags: NOSUID_NODEV,
        // Half the guest's memory (the kernel's default, made explicit):
        // a program filling /tmp meets ENOSPC before the programs' memory
        // cap of seven eighths (tmpfs pages are charged to the writer's
        // cgroup), and the agent keeps its headroom either way.
        data: Some("mode=1777,size=50%"),
        data_optional: false,
    },
    Mount {
        fstype: "cgroup2",
        target: "/sys/fs/cgroup",
        flags: NOSUID_NODEV_NOEXEC,
        // Every program is moved into a cgroup of its own as it starts.
        // Without `favordynmods` (Linux 6.0+) each move takes the
        // threadgroup lock for writing, which waits out an RCU grace
        // period: about 11 ms of every exec on one emulated vCPU, against
        // a few atomic operations more per fork and exit with it.
        data: Some("favordynmods"),
        data_optional: true,
    },
];

/// Mounts `/proc`. Runs before logging exists, so it only reports.
pub fn mount_proc() -> Result<(), MountError> {
    mount_one(&PROC)
}

/// Mounts everything but `/proc`, logging each failure and carrying on: a
/// guest without cgroup2 can still run programs.
pub fn mount_rest() {
    for m in REST {
        match mount_one(m) {
            Ok(()) => tracing::debug!(target = m.target, fstype = m.fstype, "mounted"),
            Err(e) => tracing::warn!(error = %airlock_report::chain(&e), "mount failed"),
        }
    }
    if let Err(e) = link_ptmx(Path::new("/dev/ptmx")) {
        tracing::warn!(error = %airlock_report::chain(&e), "no /dev/ptmx");
    }
}

fn mount_one(m: &Mount) -> Result<(), MountError> {
    std::fs::create_dir_all(m.target).map_err(|source| MountError::MountPoint {
        target: m.target,
        source,
    })?;
    let mounted = match mount(Some(m.fstype), m.target, Some(m.fstype), m.flags, m.data) {
        Err(Errno::EINVAL) if m.data_optional => {
            tracing::info!(
                target = m.target,
                refused = m.data.unwrap_or_default(),
                "kernel refused mount options; mounting without them"
            );
            mount(
                Some(m.fstype),
                m.target,
                Some(m.fstype),
                m.flags,
                None::<&str>,
            )
        }
        other => other,
    };
    match mounted {
        Ok(()) | Err(Errno::EBUSY) => Ok(()),
        Err(source) => Err(MountError::Mount {
            fstype: m.fstype,
            target: m.target,
            source,
        }),
    }
}

/// Points `ptmx` at the devpts instance's `pts/ptmx` unless something
/// (devtmpfs's own node, usually) is already there.
fn link_ptmx(ptmx: &Path) -> Result<(), MountError> {
    match std::fs::symlink_metadata(ptmx) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::os::unix::fs::symlink("pts/ptmx", ptmx).map_err(MountError::Ptmx)
        }
        Err(e) => Err(MountError::Ptmx(e)),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn no_mount_is_hidden_by_a_later_one() {
        let all: Vec<&Mount> = std::iter::once(&PROC).chain(REST).collect();
        for (i, earlier) in all.iter().enumerate() {
            for later in &all[i + 1..] {
                assert!(
                    !Path::new(earlier.target).starts_with(later.target),
                    "{} is mounted before its parent {}",
                    earlier.target,
                    later.target
                );
            }
        }
    }

    #[test]
    fn cgroups_favour_moving_programs_and_fall_back_on_older_kernels() {
        let cgroup = REST.iter().find(|m| m.fstype == "cgroup2").unwrap();
        assert_eq!(cgroup.data, Some("favordynmods"));
        assert!(cgroup.data_optional);
        let required = REST.iter().chain([&PROC]).filter(|m| m.data_optional);
        assert_eq!(required.count(), 1, "only cgroup2's options are optional");
    }

    #[test]
    fn devpts_is_a_private_instance_with_open_ptmx() {
        let devpts = REST.iter().find(|m| m.fstype == "devpts").unwrap();
        let data = devpts.data.unwrap();
        assert!(data.contains("newinstance"));
        assert!(data.contains("ptmxmode=0666"));
    }

    #[test]
    fn ptmx_link_is_created_only_when_missing() {
        let dir = tempfile::tempdir().unwrap();
        let ptmx = dir.path().join("ptmx");
        link_ptmx(&ptmx).unwrap();
        assert_eq!(std::fs::read_link(&ptmx).unwrap(), Path::new("pts/ptmx"));

        let existing = dir.path().join("existing");
        std::fs::write(&existing, b"node").unwrap();
        link_ptmx(&existing).unwrap();
        assert!(std::fs::symlink_metadata(&existing).unwrap().is_file());
    }
}
