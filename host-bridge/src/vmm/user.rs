//! Which user QEMU and vhost-device-vsock run as.
//!
//! A host library running as root should not run the VMM as root: QEMU
//! parses what the guest sends, and a QEMU compromised from the guest then
//! holds only an unprivileged user's rights (plus its seccomp sandbox). The
//! processes are started with that uid and gid and no supplementary groups
//! (std's `CommandExt::uid`/`gid`, which clear them when root spawns).
//!
//! The VMM user must reach what QEMU opens itself: the programs, the kernel
//! and initramfs, the disks (the workspace read-write), the state directory
//! (shared with its group, see `state_dir`), the directories of serial-port
//! sockets, and `/dev/kvm` under KVM. [`VmmUser::Auto`] checks this from the
//! files' modes (owner, group, other; ACLs are not read) and runs as the
//! caller, with a warning naming the file, where the host does not allow it.

use std::path::{Path, PathBuf};

use super::VmmError;

/// The user and group `nobody`/`nogroup` on Debian and most distributions.
pub const NOBODY: u32 = 65534;

/// Who runs the VMM processes (see [`SandboxBuilder::vmm_user`](crate::SandboxBuilder::vmm_user)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum VmmUser {
    /// When the caller is root: uid `nobody` (65534) and group `nogroup`
    /// (65534), or `/dev/kvm`'s group under KVM, if that user can reach
    /// every file the VM needs; otherwise the caller, with a warning. When
    /// the caller is not root: the caller.
    #[default]
    Auto,
    /// The caller's own user.
    Caller,
    /// This uid and gid (the caller must be root). Starting fails if the
    /// user cannot reach a file the VM needs.
    Id { uid: u32, gid: u32 },
}

/// A uid and gid to start the VMM processes with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Credentials {
    pub uid: u32,
    pub gid: u32,
}

/// How the VMM user must be able to use a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    ReadWrite,
    Execute,
    /// Create entries in this directory.
    CreateIn,
    /// Reach this directory (search every component).
    Reach,
}

impl Access {
    /// What the user could not do, for error messages.
    pub fn verb(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::ReadWrite => "read and write",
            Access::Execute => "execute",
            Access::CreateIn => "create files in",
            Access::Reach => "reach",
        }
    }

    fn bits(self) -> u32 {
        match self {
            Access::Read => 0o4,
            Access::ReadWrite => 0o6,
            Access::Execute | Access::Reach => 0o1,
            Access::CreateIn => 0o3,
        }
    }
}

impl VmmUser {
    /// The user and group the VMM would switch to, before any file is
    /// checked (`None`: it runs as the caller).
    fn candidate(self, kvm: bool) -> Option<Credentials> {
        let root = nix::unistd::geteuid().is_root();
        match self {
            VmmUser::Caller => None,
            VmmUser::Auto if !root => None,
            VmmUser::Auto => {
                let gid = if kvm {
                    kvm_group().unwrap_or(NOBODY)
                } else {
                    NOBODY
                };
                Some(Credentials { uid: NOBODY, gid })
            }
            VmmUser::Id { uid, gid } => Some(Credentials { uid, gid }),
        }
    }

    /// The group a file made for the VMM is given to: the group the VMM
    /// runs with when the caller is root and it switches users; `None`
    /// when it runs as the caller, who owns the file anyway.
    pub(crate) fn group(self, kvm: bool) -> Option<u32> {
        if !nix::unistd::geteuid().is_root() {
            return None;
        }
        self.candidate(kvm).map(|credentials| credentials.gid)
    }

    /// The credentials to start the VMM with (`None`: as the caller), given
    /// the paths it needs and whether it uses `/dev/kvm`.
    pub(crate) fn resolve(
        self,
        needs: &[(PathBuf, Access)],
        kvm: bool,
    ) -> Result<Option<Credentials>, VmmError> {
        let credentials = match self.candidate(kvm) {
            None => return Ok(None),
            Some(credentials) => credentials,
        };
        if !nix::unistd::geteuid().is_root() {
            return Err(VmmError::UserNeedsRoot {
                uid: credentials.uid,
            });
        }
        let kvm_need = kvm.then(|| (PathBuf::from("/dev/kvm"), Access::ReadWrite));
        let blocked = needs
            .iter()
            .chain(kvm_need.as_ref())
            .find(|(path, access)| !credentials.can(path, *access));
        match (blocked, self) {
            (None, _) => Ok(Some(credentials)),
            (Some((path, access)), VmmUser::Id { uid, gid }) => Err(VmmError::UserCannotReach {
                uid,
                gid,
                path: path.clone(),
                access: access.verb(),
            }),
            (Some((path, _)), _) => {
                // Once per process: a host set up this way says so at every start.
                static WARNED: std::sync::Once = std::sync::Once::new();
                WARNED.call_once(|| {
                    tracing::warn!(
                        uid = credentials.uid,
                        gid = credentials.gid,
                        path = %path.display(),
                        "the VMM runs as root: the unprivileged user cannot reach this file \
                         (make it and its directories world-readable, or choose a VMM user)"
                    );
                });
                Ok(None)
            }
        }
    }
}

impl Credentials {
    /// Whether this user may use `path` so, judged from the modes of the
    /// path (symlinks resolved) and of every directory above it.
    pub fn can(&self, path: &Path, access: Access) -> bool {
        let Ok(path) = std::fs::canonicalize(path) else {
            return false;
        };
        let ancestors_searchable = path
            .ancestors()
            .skip(1)
            .all(|dir| self.permits(dir, Access::Reach.bits()));
        ancestors_searchable && self.permits(&path, access.bits())
    }

    fn permits(&self, path: &Path, bits: u32) -> bool {
        use std::os::unix::fs::MetadataExt;
        let Ok(meta) = std::fs::metadata(path) else {
            return false;
        };
        let mode = meta.mode();
        let granted = if meta.uid() == self.uid {
            mode >> 6
        } else if meta.gid() == self.gid {
            mode >> 3
        } else {
            mode
        } & 0o7;
        granted & bits == bits
    }
}

/// The group of `/dev/kvm`, if members of it may open it read-write.
fn kvm_group() -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata("/dev/kvm").ok()?;
    (meta.mode() & 0o060 == 0o060).then_some(meta.gid())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn chmod(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn access_follows_owner_group_and_other_bits_down_the_path() {
        let dir = tempfile::tempdir().unwrap();
        chmod(dir.path(), 0o755);
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        chmod(&file, 0o644);
        let stranger = Credentials {
            uid: 4_000_000,
            gid: 4_000_000,
        };
        assert!(stranger.can(&file, Access::Read));
        assert!(!stranger.can(&file, Access::ReadWrite));
        assert!(!stranger.can(dir.path(), Access::CreateIn));
        chmod(dir.path(), 0o700);
        assert!(
            !stranger.can(&file, Access::Read),
            "directory not searchable"
        );
        assert!(!stranger.can(&dir.path().join("missing"), Access::Read));

        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(&file).unwrap();
        let owner = Credentials {
            uid: meta.uid(),
            gid: meta.gid(),
        };
        assert!(owner.can(&file, Access::ReadWrite));
    }

    #[test]
    fn files_made_for_the_vmm_go_to_the_group_it_runs_with() {
        assert_eq!(VmmUser::Caller.group(false), None);
        let explicit = VmmUser::Id {
            uid: 4242,
            gid: 4243,
        };
        if nix::unistd::geteuid().is_root() {
            assert_eq!(VmmUser::Auto.group(false), Some(NOBODY));
            assert_eq!(explicit.group(true), Some(4243));
        } else {
            assert_eq!(VmmUser::Auto.group(false), None);
            assert_eq!(explicit.group(false), None, "no switch, so no group");
        }
    }

    #[test]
    fn the_caller_needs_no_check() {
        let needs = [(PathBuf::from("/nonexistent/kernel"), Access::Read)];
        assert_eq!(VmmUser::Caller.resolve(&needs, false).unwrap(), None);
    }

    #[test]
    fn auto_falls_back_to_the_caller_when_a_file_is_out_of_reach() {
        let needs = [(PathBuf::from("/nonexistent/kernel"), Access::Read)];
        assert_eq!(VmmUser::Auto.resolve(&needs, false).unwrap(), None);
    }

    #[test]
    fn an_explicit_user_that_cannot_reach_a_file_fails_with_its_path() {
        let needs = [(PathBuf::from("/nonexistent/kernel"), Access::Read)];
        let result = VmmUser::Id {
            uid: NOBODY,
            gid: NOBODY,
        }
        .resolve(&needs, false);
        let message = result.unwrap_err().to_string();
        if nix::unistd::geteuid().is_root() {
            assert!(message.contains("/nonexistent/kernel"), "{message}");
        } else {
            assert!(message.contains("root"), "{message}");
        }
    }
}
