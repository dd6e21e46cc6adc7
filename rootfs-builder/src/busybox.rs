//! Debian's static busybox (package `busybox-static`) and the applet paths it reports
//! with `busybox --list-full` (`bin/sh`, `usr/bin/env`, `sbin/insmod`, ...), which
//! [`crate::initramfs`] turns into symlinks to `/bin/busybox`.
//!
//! The initramfs has no shared libraries, so a dynamically linked busybox (Debian's
//! `busybox` package) is refused with a message naming the right package.

use std::io;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use crate::elf::{self, ElfError};

/// Where Debian's busybox-static installs the binary.
pub const DEFAULT_PATH: &str = "/bin/busybox";

/// Why busybox could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BusyboxError {
    /// No file at the path.
    #[error("busybox not found at {path}; install Debian's busybox-static")]
    Missing {
        /// The path tried.
        path: PathBuf,
        /// The I/O failure.
        #[source]
        source: io::Error,
    },
    /// The file is not an ELF executable.
    #[error("{path} is not a busybox executable; install Debian's busybox-static")]
    NotElf {
        /// The path.
        path: PathBuf,
        /// Why it did not parse.
        #[source]
        source: ElfError,
    },
    /// The binary needs a dynamic loader the initramfs does not have.
    #[error("{path} is dynamically linked ({interpreter}); install Debian's busybox-static")]
    Dynamic {
        /// The path.
        path: PathBuf,
        /// Its `PT_INTERP`.
        interpreter: String,
    },
    /// `busybox --list-full` could not be run or failed.
    #[error("`{path} --list-full` failed{}", stderr.as_deref().map(|s| format!(": {s}")).unwrap_or_default())]
    List {
        /// The path.
        path: PathBuf,
        /// What it printed, if it ran.
        stderr: Option<String>,
    },
}

/// A static busybox binary and its applets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Busybox {
    /// The executable's bytes.
    pub binary: Vec<u8>,
    /// Applet paths relative to `/`, sorted, e.g. `usr/bin/env`.
    pub applets: Vec<PathBuf>,
}

impl Busybox {
    /// Reads the binary at `path`, checks it is static, and asks it for its applets.
    pub fn load(path: &Path) -> Result<Self, BusyboxError> {
        let binary = std::fs::read(path).map_err(|source| BusyboxError::Missing {
            path: path.to_owned(),
            source,
        })?;
        let interpreter = elf::interpreter(&binary).map_err(|source| BusyboxError::NotElf {
            path: path.to_owned(),
            source,
        })?;
        if let Some(interpreter) = interpreter {
            return Err(BusyboxError::Dynamic {
                path: path.to_owned(),
                interpreter,
            });
        }
        let output = Command::new(path)
            .arg("--list-full")
            .output()
            .map_err(|_| BusyboxError::List {
                path: path.to_owned(),
                stderr: None,
            })?;
        if !output.status.success() {
            return Err(BusyboxError::List {
                path: path.to_owned(),
                stderr: Some(String::from_utf8_lossy(&output.stderr).trim().to_owned()),
            });
        }
        let applets = parse_list_full(&String::from_utf8_lossy(&output.stdout));
        tracing::debug!(path = %path.display(), applets = applets.len(), "loaded busybox");
        Ok(Self { binary, applets })
    }
}

/// Parses `busybox --list-full` output: one relative path per line. Lines that are not
/// plain relative paths (absolute, `..`, empty) are dropped, as is `bin/busybox` itself.
pub fn parse_list_full(text: &str) -> Vec<PathBuf> {
    let mut applets: Vec<PathBuf> = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(PathBuf::from)
        .filter(|path| path.components().all(|c| matches!(c, Component::Normal(_))))
        .filter(|path| path != Path::new("bin/busybox"))
        .collect();
    applets.sort();
    applets.dedup();
    applets
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_applet_paths() {
        let list =
            "usr/bin/env\nbin/sh\n\nsbin/insmod\n/etc/evil\n../escape\nbin/busybox\nbin/sh\n";
        assert_eq!(
            parse_list_full(list),
            [
                PathBuf::from("bin/sh"),
                PathBuf::from("sbin/insmod"),
                PathBuf::from("usr/bin/env")
            ]
        );
    }

    #[test]
    fn missing_binary_names_the_package() {
        let err = Busybox::load(Path::new("/nonexistent/busybox"));
        assert!(matches!(err, Err(BusyboxError::Missing { .. })));
        let message = err.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            message.contains("install Debian's busybox-static"),
            "{message}"
        );
    }

    #[test]
    fn dynamic_binary_is_refused() {
        // coreutils' `true` is dynamically linked on Debian.
        assert!(matches!(
            Busybox::load(Path::new("/bin/true")),
            Err(BusyboxError::Dynamic { .. })
        ));
    }

    #[test]
    fn debian_busybox_static_lists_its_applets() -> anyhow::Result<()> {
        let busybox = Busybox::load(Path::new(DEFAULT_PATH))
            .map_err(|e| anyhow::anyhow!("{e}; run `apt-get install -y busybox-static`"))?;
        for applet in ["bin/sh", "sbin/insmod", "sbin/poweroff"] {
            assert!(
                busybox.applets.iter().any(|a| a == Path::new(applet)),
                "{applet} missing"
            );
        }
        Ok(())
    }
}
