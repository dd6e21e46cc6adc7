//! The first moments of the agent, before logging exists.
//!
//! [`Boot::begin`] notes the boot clock, learns whether the agent is PID 1,
//! and if so installs the power-off panic hook and mounts `/proc`; then it
//! reads `/proc/cmdline`. The binary uses [`Boot::log_filter`] to set up
//! logging, and `crate::run` takes the `Boot` from there, logging what
//! happened here.

use std::path::Path;

use crate::clock;
use crate::cmdline::{Cmdline, CmdlineError, DEFAULT_LOG_FILTER};
use crate::init::{mounts, poweroff};

/// What the agent learned before logging was set up.
#[derive(Debug)]
pub struct Boot {
    pub(crate) pid1: bool,
    pub(crate) init_started_us: u64,
    pub(crate) proc_mount: Result<(), mounts::MountError>,
    pub(crate) cmdline: Result<Cmdline, CmdlineError>,
}

impl Boot {
    /// Starts the agent: first thing `main` calls.
    pub fn begin() -> Self {
        let init_started_us = clock::boottime_us();
        let pid1 = nix::unistd::getpid().as_raw() == 1;
        if pid1 {
            poweroff::install_panic_hook();
        }
        let proc_mount = if pid1 { mounts::mount_proc() } else { Ok(()) };
        let cmdline = Cmdline::read(Path::new("/proc/cmdline"));
        Self {
            pid1,
            init_started_us,
            proc_mount,
            cmdline,
        }
    }

    /// Whether the agent is the guest's init.
    pub fn is_pid1(&self) -> bool {
        self.pid1
    }

    /// The tracing filter: `RUST_LOG` when set and not PID 1 (tests, local
    /// runs), else the command line's `airlock.log`, else `info`.
    pub fn log_filter(&self) -> String {
        if !self.pid1 {
            if let Ok(filter) = std::env::var("RUST_LOG") {
                return filter;
            }
        }
        match &self.cmdline {
            Ok(cmdline) => cmdline.log.clone(),
            Err(_) => DEFAULT_LOG_FILTER.to_owned(),
        }
    }
}
