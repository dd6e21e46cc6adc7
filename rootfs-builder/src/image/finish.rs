//! What every Debian image gets after debootstrap, so that code written for
//! other sandboxes' images runs unchanged:
//!
//! - E2B's account (`account`);
//! - an `/etc/hosts` naming `localhost` (debootstrap writes none, and
//!   without it `localhost` resolves nowhere in the guest);
//! - `pip install` allowed system-wide: Debian marks its Python
//!   `EXTERNALLY-MANAGED` (PEP 668), which makes the `pip install x` that
//!   agents run fail; a sandbox is disposable, so the marker only breaks
//!   what users expect to work.

use std::fs;
use std::path::Path;

use super::{account, ImageError};

/// The `/etc/hosts` written when the tree has none.
pub const HOSTS: &str = "127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n";

/// Finishes the Debian tree `root`.
pub fn debian(root: &Path) -> Result<(), ImageError> {
    account::add(root)?;
    let hosts = root.join("etc/hosts");
    if !hosts.exists() {
        fs::write(&hosts, HOSTS).map_err(|source| ImageError::Io {
            action: "write",
            path: hosts.clone(),
            source,
        })?;
    }
    let lib = root.join("usr/lib");
    let pythons = fs::read_dir(&lib).map_err(|source| ImageError::Io {
        action: "read",
        path: lib.clone(),
        source,
    })?;
    for entry in pythons.flatten() {
        let marker = entry.path().join("EXTERNALLY-MANAGED");
        let is_python = entry.file_name().to_string_lossy().starts_with("python3");
        if is_python && marker.is_file() {
            fs::remove_file(&marker).map_err(|source| ImageError::Io {
                action: "remove",
                path: marker.clone(),
                source,
            })?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_and_pips_marker() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let root = dir.path();
        fs::create_dir_all(root.join("etc")).expect("etc");
        fs::create_dir_all(root.join("usr/lib/python3.11")).expect("python");
        fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/bash\n").expect("passwd");
        fs::write(root.join("etc/group"), "root:x:0:\n").expect("group");
        fs::write(root.join("usr/lib/python3.11/EXTERNALLY-MANAGED"), "[x]\n").expect("marker");
        debian(root).expect("finished");
        assert_eq!(
            fs::read_to_string(root.join("etc/hosts")).expect("hosts"),
            HOSTS
        );
        assert!(!root.join("usr/lib/python3.11/EXTERNALLY-MANAGED").exists());
        // A tree's own hosts file is kept.
        fs::write(root.join("etc/hosts"), "10.0.0.1 mine\n").expect("hosts");
        debian(root).expect("finished again");
        assert_eq!(
            fs::read_to_string(root.join("etc/hosts")).expect("hosts"),
            "10.0.0.1 mine\n"
        );
    }
}
