//! Where the guest's kernel and initramfs live by default.
//!
//! `scripts/setup` builds them into the Airlock home: `$AIRLOCK_HOME`, else
//! `/var/cache/airlock` for root, else `$XDG_CACHE_HOME/airlock`, else
//! `~/.cache/airlock`.
//!
//! Root's default is outside its 0700 home directory so that the VMM,
//! which a root host bridge runs as an unprivileged user, can read the
//! kernel, initramfs and images (see `vmm::user`).

use std::path::PathBuf;

/// The environment variable naming the Airlock home directory.
pub const HOME_ENV: &str = "AIRLOCK_HOME";

/// The Airlock home of root.
pub const ROOT_HOME: &str = "/var/cache/airlock";

/// The directory holding built guest artifacts.
pub fn home() -> PathBuf {
    if let Some(dir) = std::env::var_os(HOME_ENV) {
        return PathBuf::from(dir);
    }
    if nix::unistd::geteuid().is_root() {
        return PathBuf::from(ROOT_HOME);
    }
    if let Some(cache) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(cache).join("airlock");
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    home.join(".cache").join("airlock")
}

/// The default guest kernel: `<home>/kernel/vmlinuz`.
pub fn default_kernel() -> PathBuf {
    home().join("kernel").join("vmlinuz")
}

/// The default initramfs (agent as `/init`, busybox, modules):
/// `<home>/initramfs.cpio`.
pub fn default_initramfs() -> PathBuf {
    home().join("initramfs.cpio")
}
