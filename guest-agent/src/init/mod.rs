//! Making the guest a usable Linux system when the agent is PID 1.
//!
//! - [`mounts`]: `/proc` first (the command line lives there), then `/sys`,
//!   `/dev`, `/dev/pts`, `/dev/shm`, `/run`, `/tmp`, `/sys/fs/cgroup`.
//! - [`modules`]: kernel modules from `/etc/airlock/modules.order`.
//! - [`poweroff`]: the way out of PID 1 on shutdown, error or panic.
//!
//! [`setup`] runs the steps after `/proc` in order; none is fatal, because a
//! guest with one thing missing is still worth serving (and the host can
//! then see what is missing) rather than powering off blind.
//! [`adopt_orphans`] is the non-PID 1 stand-in: the agent becomes a child
//! subreaper so it still reaps the grandchildren of the programs it runs.
//!
//! The loopback interface is left down for now: raising it needs the
//! `SIOCSIFFLAGS` ioctl or netlink, which nix does not wrap safely.

pub mod modules;
pub mod mounts;
pub mod poweroff;

use std::path::Path;

use crate::cmdline::Cmdline;

/// Mounts the remaining filesystems, loads modules and sets the hostname.
pub fn setup(cmdline: &Cmdline) {
    mounts::mount_rest();
    let loaded = modules::load_all(Path::new(modules::MODULES_ORDER));
    tracing::info!(loaded, "kernel modules loaded");
    match nix::unistd::sethostname(&cmdline.hostname) {
        Ok(()) => tracing::debug!(hostname = %cmdline.hostname, "hostname set"),
        Err(e) => tracing::warn!(error = %e, hostname = %cmdline.hostname, "cannot set hostname"),
    }
}

/// Makes orphaned descendants reparent to the agent instead of to the real
/// init, so the agent's reaper sees them exit.
pub fn adopt_orphans() {
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        tracing::warn!(error = %e, "cannot become child subreaper; orphans go to init");
    }
}
