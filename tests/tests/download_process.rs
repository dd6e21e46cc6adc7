//! Single-file downloads through the host library on the process backend
//! (the agent a plain host process, so the guest's files are this host's):
//! a symlink at the guest path downloads as its target, with the target's
//! mode, as `cp` would copy it (`Files::copy_out`, `Files::read_to_file`,
//! what `airlock run --download` does). A directory keeps its links as
//! links.
//!
//! Needs `target/debug/airlock-agent` (`cargo build -p airlock-agent`).

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use airlock_tests::process_builder;

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

#[tokio::test]
async fn a_file_behind_a_guest_symlink_downloads_with_the_targets_mode() {
    let sandbox = process_builder().start().await.expect("agent starts");
    let guest = tempfile::tempdir().unwrap();
    let secret = guest.path().join("secret");
    std::fs::write(&secret, "only mine").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::symlink("secret", guest.path().join("link")).unwrap();
    std::os::unix::fs::symlink(guest.path().join("link"), guest.path().join("chain")).unwrap();
    std::os::unix::fs::symlink("loop", guest.path().join("loop")).unwrap();
    let host = tempfile::tempdir().unwrap();
    let fs = sandbox.fs();
    for name in ["link", "chain"] {
        let dest = host.path().join(name);
        // A host file already there, world-readable: its mode does not stay.
        std::fs::write(&dest, "old").unwrap();
        std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o644)).unwrap();
        let copied = fs.copy_out(guest.path().join(name), &dest).await.unwrap();
        assert_eq!(copied, 9, "{name}");
        assert!(
            std::fs::symlink_metadata(&dest).unwrap().is_file(),
            "{name}"
        );
        assert_eq!(mode(&dest), 0o600, "{name}");
        assert_eq!(std::fs::read(&dest).unwrap(), b"only mine", "{name}");
    }
    let dest = host.path().join("direct");
    fs.read_to_file(guest.path().join("link"), &dest)
        .await
        .unwrap();
    assert_eq!(mode(&dest), 0o600);
    // A link to itself is an error naming the bound, not a hang.
    let error = fs
        .copy_out(guest.path().join("loop"), host.path().join("loop"))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("symlinks"), "{error}");
    // A directory download keeps a link as a link.
    let tree = host.path().join("tree");
    fs.copy_out(guest.path(), &tree).await.unwrap();
    let link = std::fs::symlink_metadata(tree.join("link")).unwrap();
    assert!(link.file_type().is_symlink());
    assert_eq!(mode(&tree.join("secret")), 0o600);
    sandbox.kill();
}
