//! The unprivileged account every Debian image gets: `user` (uid and gid
//! 1000), home `/home/user`, shell `/bin/bash`, no password (locked), the
//! same name, home and ids E2B's images have, so code written for them finds
//! its user and working directory.
//!
//! Written into the tree's `etc/passwd`, `etc/group`, `etc/shadow` and
//! `etc/gshadow` directly (no `useradd` in a chroot): the lines are fixed,
//! so the image stays a function of its inputs. A tree that already has the
//! name is left as it is.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::ImageError;

/// The account's name.
pub const NAME: &str = "user";
/// Its uid and gid.
pub const ID: u32 = 1000;
/// Its home, inside the image.
pub const HOME: &str = "/home/user";

/// Adds the account to the root tree `root` (idempotent).
pub fn add(root: &Path) -> Result<(), ImageError> {
    let passwd = root.join("etc/passwd");
    let existing = fs::read_to_string(&passwd).map_err(io("read", &passwd))?;
    if existing
        .lines()
        .any(|line| line.split(':').next() == Some(NAME))
    {
        return Ok(());
    }
    append(&passwd, &format!("{NAME}:x:{ID}:{ID}::{HOME}:/bin/bash"))?;
    append(&root.join("etc/group"), &format!("{NAME}:x:{ID}:"))?;
    for (file, line) in [
        ("etc/shadow", format!("{NAME}:!:0:0:99999:7:::")),
        ("etc/gshadow", format!("{NAME}:!::")),
    ] {
        let path = root.join(file);
        if path.exists() {
            append(&path, &line)?;
        }
    }
    let home = root.join(HOME.trim_start_matches('/'));
    fs::create_dir_all(&home).map_err(io("make", &home))?;
    let skel = root.join("etc/skel");
    if let Ok(entries) = fs::read_dir(&skel) {
        for entry in entries {
            let entry = entry.map_err(io("read", &skel))?;
            if entry.file_type().map_err(io("read", &skel))?.is_file() {
                let to = home.join(entry.file_name());
                fs::copy(entry.path(), &to).map_err(io("write", &to))?;
                own(&to)?;
            }
        }
    }
    own(&home)
}

fn append(path: &Path, line: &str) -> Result<(), ImageError> {
    let mut file = OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(io("open", path))?;
    writeln!(file, "{line}").map_err(io("write", path))
}

fn own(path: &Path) -> Result<(), ImageError> {
    std::os::unix::fs::chown(path, Some(ID), Some(ID)).map_err(io("chown", path))
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> ImageError {
    let path: PathBuf = path.to_owned();
    move |source| ImageError::Io {
        action,
        path,
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let etc = dir.path().join("etc");
        fs::create_dir_all(etc.join("skel")).expect("etc/skel");
        fs::write(etc.join("passwd"), "root:x:0:0:root:/root:/bin/bash\n").expect("passwd");
        fs::write(etc.join("group"), "root:x:0:\n").expect("group");
        fs::write(etc.join("shadow"), "root:*:19000:0:99999:7:::\n").expect("shadow");
        fs::write(etc.join("skel/.bashrc"), "# bashrc\n").expect("skel");
        dir
    }

    #[test]
    fn adds_the_account_once() {
        let dir = tree();
        add(dir.path()).expect("added");
        add(dir.path()).expect("added again");
        let passwd = fs::read_to_string(dir.path().join("etc/passwd")).expect("passwd");
        assert_eq!(
            passwd
                .matches("user:x:1000:1000::/home/user:/bin/bash")
                .count(),
            1
        );
        let group = fs::read_to_string(dir.path().join("etc/group")).expect("group");
        assert!(group.contains("user:x:1000:"));
        let shadow = fs::read_to_string(dir.path().join("etc/shadow")).expect("shadow");
        assert!(shadow.contains("user:!:"), "locked, no password");
        assert!(
            !dir.path().join("etc/gshadow").exists(),
            "not made when absent"
        );
        assert!(dir.path().join("home/user/.bashrc").is_file());
    }
}
