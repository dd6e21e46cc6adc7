//! Powering the VM off: the only way PID 1 may leave.
//!
//! If PID 1 exits the kernel panics, and depending on `panic=` the VM then
//! hangs. So every fatal path of the agent (an error out of `run`, a panic
//! anywhere, a `System.Shutdown`) ends in [`power_off`]: sync the
//! filesystems, then `reboot(RB_POWER_OFF)`, which makes the VMM exit.

use nix::sys::reboot::{reboot, RebootMode};

/// Syncs filesystems and powers the machine off. Returns only if the kernel
/// refused (no `CAP_SYS_BOOT`); the caller then exits, which as PID 1 turns
/// into a kernel panic rather than a hung VM.
pub fn power_off(reason: &str) {
    tracing::info!(reason, "syncing filesystems and powering off");
    nix::unistd::sync();
    match reboot(RebootMode::RB_POWER_OFF) {
        Ok(never) => match never {},
        Err(e) => tracing::error!(error = %e, "power-off refused by the kernel"),
    }
}

/// Powers off; if the kernel refuses, exits, which as PID 1 is a kernel
/// panic: with `panic=-1` and QEMU's `-no-reboot` the VM still ends.
pub fn power_off_or_exit(reason: &str) -> ! {
    power_off(reason);
    std::process::exit(1)
}

/// Makes every panic, on any thread, power the VM off after the default
/// hook has printed it to the console.
pub fn install_panic_hook() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        tracing::error!(panic = %info, "agent panicked");
        power_off_or_exit("agent panicked");
    }));
}
