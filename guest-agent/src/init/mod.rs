//! Making the guest a usable Linux system when the agent is PID 1.
//!
//! - [`mounts`]: `/proc` first (the command line lives there), then `/sys`,
//!   `/dev`, `/dev/pts`, `/dev/shm`, `/run`, `/tmp`, `/sys/fs/cgroup`.
//! - [`modules`]: kernel modules from `/etc/airlock/modules.order`.
//! - [`root`]: with `airlock.root=`, the switch from the initramfs into the
//!   root image (read-only ext4 under an overlay), still as PID 1.
//! - [`poweroff`]: the way out of PID 1 on shutdown, error or panic.
//!
//! [`setup`] first puts the agent out of the OOM killer's reach
//! (`oom_score_adj` -1000), then runs the steps after `/proc` in order; none is fatal, because a
//! guest with one thing missing is still worth serving (and the host can
//! then see what is missing) rather than powering off blind. The exception
//! is the root switch: a guest that was asked for an image and cannot mount
//! it would run programs from the wrong filesystem, so that error is fatal
//! (it reaches the console, and the host reports the console).
//! [`adopt_orphans`] is the non-PID 1 stand-in: the agent becomes a child
//! subreaper so it still reaps the grandchildren of the programs it runs.
//!
//! The loopback interface is raised last (over netlink, see
//! `services::network::link`): programs' own servers listen on it, and
//! ingress (`Network.Dial`) reaches them there, with or without a network.

pub mod modules;
pub mod mounts;
pub mod poweroff;
pub mod root;

use std::path::Path;

use crate::cmdline::Cmdline;

/// Mounts the remaining filesystems, loads modules, switches to the root
/// image if asked, and sets the hostname.
pub fn setup(cmdline: &Cmdline) -> Result<(), root::RootError> {
    protect_from_oom_killer();
    mounts::mount_rest();
    let loaded = modules::load_all(Path::new(modules::MODULES_ORDER));
    tracing::info!(loaded, "kernel modules loaded");
    if let Some(device) = &cmdline.root {
        root::switch(device, cmdline.workspace.as_deref())?;
    }
    match nix::unistd::sethostname(&cmdline.hostname) {
        Ok(()) => tracing::debug!(hostname = %cmdline.hostname, "hostname set"),
        Err(e) => tracing::warn!(error = %e, hostname = %cmdline.hostname, "cannot set hostname"),
    }
    match crate::services::network::link::raise_loopback() {
        Ok(()) => tracing::debug!("loopback up"),
        Err(e) => tracing::warn!(error = %e, "cannot raise loopback; ingress will find nothing"),
    }
    Ok(())
}

/// Sets the agent's `oom_score_adj` to -1000, so the OOM killer never
/// picks it; programs get 0 back before their exec.
fn protect_from_oom_killer() {
    match std::fs::write("/proc/self/oom_score_adj", "-1000") {
        Ok(()) => tracing::info!("oom_score_adj -1000: the OOM killer spares the agent"),
        Err(e) => tracing::warn!(error = %e, "cannot protect the agent from the OOM killer"),
    }
}

/// Makes orphaned descendants reparent to the agent instead of to the real
/// init, so the agent's reaper sees them exit.
pub fn adopt_orphans() {
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        tracing::warn!(error = %e, "cannot become child subreaper; orphans go to init");
    }
}
