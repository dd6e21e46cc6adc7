//! Tar streams from the guest (`fs::archive::extract`, behind
//! `Files::download_dir`, `download_paths` and `download_changes`): the
//! guest's bytes unpacked into a host directory.
//!
//! Input: `[setup: u8][tar stream]`; every header's checksum is made right
//! before extraction, so mutations reach the entries instead of the
//! checksum test. Setup bit 0 puts a symlink to the outside in the target
//! first (as a user's own directory might hold), bit 1 a directory `d`.
//!
//! Invariants: nothing outside the target changes (a sibling directory
//! with a file and a hard-link count is compared before and after, and
//! nothing new appears beside the target); no extracted file or directory
//! is setuid or setgid; the count returned is at most the entries read.
#![no_main]

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use airlock::fuzzing::extract_tar;
use airlock_fuzz::{fix_tar_checksums, Input};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let setup = input.u8();
    let mut tar = input.rest().to_vec();
    fix_tar_checksums(&mut tar);

    let base = if Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    };
    let root = tempfile::tempdir_in(base).expect("a scratch directory");
    let outside = root.path().join("outside");
    let target = root.path().join("target");
    std::fs::create_dir_all(outside.join("dir")).expect("outside");
    std::fs::write(outside.join("canary"), b"canary").expect("canary");
    std::fs::create_dir(&target).expect("target");
    if setup & 1 != 0 {
        std::os::unix::fs::symlink(&outside, target.join("out")).expect("symlink");
    }
    if setup & 2 != 0 {
        std::fs::create_dir(target.join("d")).expect("d");
    }
    let before = tree(root.path(), &target);

    let result = extract_tar(&tar[..], &target);

    assert_eq!(
        tree(root.path(), &target),
        before,
        "something outside the target changed"
    );
    if let Ok(count) = result {
        assert!(
            count as usize <= tar.len() / 512,
            "{count} entries from {} bytes",
            tar.len()
        );
    }
    for entry in walk(&target) {
        let meta = std::fs::symlink_metadata(&entry).expect("an extracted entry");
        if !meta.file_type().is_symlink() {
            assert_eq!(
                meta.mode() & 0o6000,
                0,
                "{} is setuid or setgid (mode {:o})",
                entry.display(),
                meta.mode()
            );
        }
    }
    // Leave the target deletable whatever modes the archive set.
    for entry in walk(&target) {
        if std::fs::symlink_metadata(&entry).is_ok_and(|m| m.is_dir()) {
            let _ = std::fs::set_permissions(
                &entry,
                std::os::unix::fs::PermissionsExt::from_mode(0o700),
            );
        }
    }
});

/// Everything under `root` except inside `skip`: paths with their kind,
/// mode, link count, contents or link target.
fn tree(root: &Path, skip: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for path in walk(root) {
        if path.starts_with(skip) && path != skip {
            continue;
        }
        let meta = std::fs::symlink_metadata(&path).expect("metadata");
        let what = if meta.file_type().is_symlink() {
            format!("link {:?}", std::fs::read_link(&path).ok())
        } else if meta.is_file() {
            format!(
                "file {:o} {} {:?}",
                meta.mode(),
                meta.nlink(),
                std::fs::read(&path).ok()
            )
        } else {
            format!("dir {:o}", meta.mode())
        };
        out.insert(path.display().to_string(), what);
    }
    out
}

/// Every path under `root` (not following symlinks), `root` included.
fn walk(root: &Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![root.to_owned()];
    let mut at = 0;
    while at < out.len() {
        let path = out[at].clone();
        at += 1;
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
            if let Ok(read) = std::fs::read_dir(&path) {
                let mut children: Vec<_> = read.flatten().map(|e| e.path()).collect();
                children.sort();
                out.extend(children);
            }
        }
    }
    out
}
