//! Finding the host programs a sandbox needs, with errors that say how to
//! install them.

use std::path::{Path, PathBuf};

use super::VmmError;

/// A host program the VMM backend runs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Program {
    /// File name looked up in `PATH`.
    pub name: &'static str,
    /// Environment variable that names it explicitly.
    pub env: &'static str,
    /// How a user gets it.
    pub install_hint: &'static str,
}

pub(crate) const QEMU: Program = Program {
    name: "qemu-system-x86_64",
    env: "AIRLOCK_QEMU",
    install_hint: "install Debian's qemu-system-x86 (apt-get install qemu-system-x86)",
};

pub(crate) const VHOST_DEVICE_VSOCK: Program = Program {
    name: "vhost-device-vsock",
    env: "AIRLOCK_VHOST_DEVICE_VSOCK",
    install_hint: "run scripts/setup, which builds vhost-device-vsock 0.3.0 with Airlock's patch",
};

/// util-linux's `setsid`: starts the VMM processes in a session of their
/// own (see `child::command`).
pub(crate) const SETSID: Program = Program {
    name: "setsid",
    env: "AIRLOCK_SETSID",
    install_hint: "install Debian's util-linux",
};

impl Program {
    /// The program's path: `$ENV` if set, else the first match in `PATH`,
    /// else cargo's bin directory (where `cargo install` puts it).
    pub fn locate(&self) -> Result<PathBuf, VmmError> {
        if let Some(explicit) = std::env::var_os(self.env) {
            let path = PathBuf::from(explicit);
            return if is_executable(&path) {
                Ok(path)
            } else {
                Err(self.not_found())
            };
        }
        let path_dirs = std::env::var_os("PATH").unwrap_or_default();
        let cargo_bin = std::env::var_os("CARGO_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
            .map(|home| home.join("bin"));
        std::env::split_paths(&path_dirs)
            .chain(cargo_bin)
            .map(|dir| dir.join(self.name))
            .find(|candidate| is_executable(candidate))
            .ok_or_else(|| self.not_found())
    }

    fn not_found(&self) -> VmmError {
        VmmError::ProgramNotFound {
            name: self.name,
            env: self.env,
            hint: self.install_hint,
        }
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_program_names_the_install_step() {
        let program = Program {
            name: "airlock-no-such-program",
            env: "AIRLOCK_TEST_NO_SUCH_PROGRAM",
            install_hint: "install it",
        };
        let message = program.locate().unwrap_err().to_string();
        assert!(
            message.contains("airlock-no-such-program not found"),
            "{message}"
        );
        assert!(message.contains("install it"), "{message}");
    }

    #[test]
    fn finds_programs_on_path() {
        let sh = Program {
            name: "sh",
            env: "AIRLOCK_TEST_SH",
            install_hint: "",
        };
        assert!(sh.locate().unwrap().ends_with("sh"));
    }
}
