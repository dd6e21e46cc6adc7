//! Helpers shared by the VM integration tests in `tests/`.
//!
//! The tests boot real QEMU microVMs from the kernel and initramfs that
//! `scripts/setup` builds; when those are missing a test fails with a
//! message naming that command, never skips.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use airlock::{Sandbox, SandboxBuilder};

/// How long a test VM may take to boot: generous, since CI runs several
/// software-emulated guests on two cores at once.
pub const BOOT_TIMEOUT: Duration = Duration::from_secs(120);

/// A builder for a small test sandbox, failing with the set-up command when
/// the guest artifacts are missing.
pub fn builder() -> SandboxBuilder {
    for path in [
        airlock::artifacts::default_kernel(),
        airlock::artifacts::default_initramfs(),
    ] {
        assert!(
            path.is_file(),
            "{} is missing: run scripts/setup (or scripts/test) first",
            path.display()
        );
    }
    Sandbox::builder()
        .memory_mib(256)
        .boot_timeout(BOOT_TIMEOUT)
}

/// The default root image (`scripts/setup` builds it), failing with the
/// set-up command when it is missing.
pub fn default_image() -> PathBuf {
    let store = airlock::images::ImageStore::open_default();
    match store.resolve(airlock::images::DEFAULT_IMAGE) {
        Ok(image) => image.path,
        Err(error) => panic!("{error}: run scripts/setup (or scripts/test) first"),
    }
}

/// Boots a test sandbox.
pub async fn boot() -> Sandbox {
    match builder().start().await {
        Ok(sandbox) => sandbox,
        Err(error) => panic!("sandbox did not start: {error}"),
    }
}

/// Pids of live processes whose command line mentions `needle` (for
/// example a state directory), zombies excluded.
pub fn processes_mentioning(needle: &Path) -> Vec<u32> {
    let needle = needle.to_string_lossy().into_owned();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let proc_dir = PathBuf::from(format!("/proc/{pid}"));
            let cmdline = std::fs::read(proc_dir.join("cmdline")).unwrap_or_default();
            let stat = std::fs::read_to_string(proc_dir.join("stat")).unwrap_or_default();
            let zombie = stat
                .rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('Z'));
            !zombie && String::from_utf8_lossy(&cmdline).contains(&needle)
        })
        .collect()
}

/// The `airlock` binary built next to the test executable.
pub fn airlock_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    // target/<profile>/deps/<test> -> target/<profile>/airlock
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("airlock"))
        .unwrap_or_default();
    assert!(
        bin.is_file(),
        "{} is missing: build it with `cargo build --workspace --bins` first (scripts/test does)",
        bin.display()
    );
    bin
}
