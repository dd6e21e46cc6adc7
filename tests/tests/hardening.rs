//! The VMM is hardened: QEMU runs under its seccomp filter and, when the
//! host library runs as root, QEMU and vhost-device-vsock run as an
//! unprivileged user that cannot touch the state directory's owner record,
//! also with a workspace the library made (one an embedder made is used as
//! it is: the VMM drops privileges once its user can write the file).

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use airlock::state_dir::owner::{OwnerRecord, OWNER_FILE};
use airlock::{Command, Sandbox, VmmUser};

#[tokio::test]
async fn the_vmm_runs_unprivileged_and_under_seccomp() {
    assert!(
        nix_is_root(),
        "this test checks the switch to an unprivileged VMM user, which needs root"
    );
    // Copies of the guest artifacts and the device program where any user
    // can reach them (the originals are under root's 0700 home here).
    let reachable = Reachable::new().with_device();
    let base = reachable.dir.path().join("state");

    // Auto: nobody/nogroup, since every file is within its reach.
    let auto = reachable
        .builder(&base)
        .start()
        .await
        .expect("start with the default VMM user");
    check_vm(&auto, 65534, 65534).await;

    // An explicit uid and gid.
    let explicit = reachable
        .builder(&base)
        .vmm_user(VmmUser::Id {
            uid: 4242,
            gid: 4243,
        })
        .start()
        .await
        .expect("start as 4242:4243");
    check_vm(&explicit, 4242, 4243).await;

    for sandbox in [auto, explicit] {
        let dir = sandbox.state_dir().to_owned();
        drop(sandbox);
        assert!(!dir.exists(), "state dir left behind: {}", dir.display());
        assert!(airlock_tests::processes_mentioning(&dir).is_empty());
    }

    // An explicit user that cannot read the kernel is refused, naming it.
    // (In this same test: the device copy is named by a process-wide
    // environment variable.)
    let private = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let kernel = private.path().join("vmlinuz");
    std::fs::copy(&reachable.kernel, &kernel).expect("copy kernel");
    let error = reachable
        .builder(&base)
        .kernel(&kernel)
        .vmm_user(VmmUser::Id {
            uid: 4242,
            gid: 4242,
        })
        .start()
        .await
        .expect_err("the VMM user cannot read the kernel");
    let message = airlock::error_chain(&error);
    assert!(message.contains("cannot read"), "{message}");
    assert!(message.contains(&kernel.display().to_string()), "{message}");
}

#[tokio::test]
async fn a_workspace_the_library_makes_is_used_by_an_unprivileged_vmm() {
    assert!(
        nix_is_root(),
        "this test checks the switch to an unprivileged VMM user, which needs root"
    );
    let reachable = Reachable::new();
    let base = reachable.dir.path().join("state");
    let image = airlock_tests::default_image();
    let with = |workspace: &Path| {
        reachable
            .builder(&base)
            .image(&image)
            .workspace(workspace)
            .workspace_size(64 << 20)
    };

    // Made by the library: the VMM's group's, so QEMU drops to nobody.
    let made = reachable.dir.path().join("made.img");
    let sandbox = with(&made).start().await.expect("start on a new workspace");
    check_vm(&sandbox, 65534, 65534).await;
    let meta = std::fs::metadata(&made).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o777),
        (0, 65534, 0o660)
    );
    drop(sandbox);

    // The embedder's own file is used as it is: root's 0644 keeps a root
    // VMM (the unprivileged user could not write it)...
    let own = reachable.dir.path().join("own.img");
    std::fs::File::create(&own)
        .and_then(|file| file.set_len(32 << 20))
        .unwrap();
    let mkfs = std::process::Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .arg(&own)
        .status()
        .expect("mkfs.ext4 (e2fsprogs)");
    assert!(mkfs.success());
    std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o644)).unwrap();
    let sandbox = with(&own)
        .start()
        .await
        .expect("start on the embedder's file");
    let qemu = airlock_tests::processes_mentioning(sandbox.state_dir());
    assert_eq!(qemu.len(), 1, "{qemu:?}");
    let owner = std::fs::metadata(format!("/proc/{}", qemu[0]))
        .unwrap()
        .uid();
    assert_eq!(owner, 0, "QEMU stays root for a file its user cannot write");
    drop(sandbox);
    assert_eq!(
        std::fs::metadata(&own).unwrap().mode() & 0o777,
        0o644,
        "left as it was"
    );

    // ... until the embedder shares it with the VMM's group.
    std::os::unix::fs::chown(&own, None, Some(65534)).unwrap();
    std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o660)).unwrap();
    let sandbox = with(&own).start().await.expect("start on the shared file");
    check_vm(&sandbox, 65534, 65534).await;
}

/// Checks that the VM works and that its VMM processes run as `uid`:`gid`
/// under seccomp, in a state directory they cannot take over.
async fn check_vm(sandbox: &Sandbox, uid: u32, gid: u32) {
    let out = sandbox
        .exec(Command::new("echo").arg("hello"))
        .await
        .expect("exec")
        .output()
        .await
        .expect("output");
    assert_eq!(out.stdout, b"hello\n");

    let dir = sandbox.state_dir();
    let processes = airlock_tests::processes_mentioning(dir);
    assert_eq!(
        processes.len(),
        1,
        "qemu (the serial channel needs no device)"
    );
    for pid in processes {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .map(|rest| rest.split_whitespace().collect::<Vec<_>>())
                .unwrap_or_default()
        };
        let comm = field("Name:").join(" ");
        let expect_id = |id: u32| vec![id.to_string(); 4];
        assert_eq!(field("Uid:"), expect_id(uid), "{comm} uids");
        assert_eq!(field("Gid:"), expect_id(gid), "{comm} gids");
        assert!(field("Groups:").is_empty(), "{comm} has no extra groups");
        if comm.starts_with("qemu") {
            assert_eq!(field("Seccomp:"), ["2"], "qemu runs under a seccomp filter");
        }
    }

    // The VMM's group may create files here, but the owner record stays the
    // host's: root-owned in a sticky directory.
    let meta = std::fs::metadata(dir).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o1770);
    assert_eq!(meta.gid(), gid);
    let record = std::fs::metadata(dir.join(OWNER_FILE)).unwrap();
    assert_eq!(record.uid(), 0);
    assert_eq!(
        record.mode() & 0o022,
        0,
        "record writable only by its owner"
    );
    assert_eq!(OwnerRecord::read(dir).unwrap().vmm.len(), 1, "qemu");
    let console = std::fs::metadata(dir.join("console.log")).unwrap();
    assert_eq!(console.uid(), uid, "QEMU wrote its console log as {uid}");
}

/// The kernel, initramfs and vhost-device-vsock in a world-readable place.
struct Reachable {
    dir: tempfile::TempDir,
    kernel: PathBuf,
    initramfs: PathBuf,
}

impl Reachable {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let copy = |from: &Path, name: &str, mode: u32| {
            let to = dir.path().join(name);
            std::fs::copy(from, &to).unwrap_or_else(|e| panic!("copy {}: {e}", from.display()));
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(mode)).unwrap();
            to
        };
        let kernel = copy(&airlock::artifacts::default_kernel(), "vmlinuz", 0o644);
        let initramfs = copy(
            &airlock::artifacts::default_initramfs(),
            "initramfs.cpio",
            0o644,
        );
        Reachable {
            dir,
            kernel,
            initramfs,
        }
    }

    /// Names a copy of vhost-device-vsock here for the library, in the
    /// process's environment (so for one test of this binary only).
    fn with_device(self) -> Self {
        // Built with the test (scripts/setup installs it); the test
        // binaries' PATH and cargo home find it as the library does.
        let device = which("vhost-device-vsock");
        let to = self.dir.path().join("vhost-device-vsock");
        std::fs::copy(&device, &to).unwrap_or_else(|e| panic!("copy {}: {e}", device.display()));
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::env::set_var("AIRLOCK_VHOST_DEVICE_VSOCK", to);
        self
    }

    fn builder(&self, base: &Path) -> airlock::SandboxBuilder {
        airlock_tests::builder()
            .kernel(&self.kernel)
            .initramfs(&self.initramfs)
            .state_dir_base(base)
    }
}

/// Finds a program as the library does: `PATH`, then cargo's bin directory.
fn which(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let cargo_bin = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")))
        .map(|home| home.join("bin"));
    std::env::split_paths(&path)
        .chain(cargo_bin)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| panic!("{name} not found: run scripts/setup first"))
}

fn nix_is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|meta| meta.uid() == 0)
        .unwrap_or(false)
}
