//! The built filesystem as one root image: the last step's overlay is
//! packed by `tar` inside a VM (so the overlay's whiteouts and ownership
//! are what the guest sees), the archive is copied to the host, unpacked
//! as it was, and `mkfs.ext4 -d` makes the image (no journal: it is only
//! ever mounted read-only).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command as HostCommand;

use crate::exec::Command;
use crate::Sandbox;

use super::BuildError;

/// Where the archive is written in the guest: on the writable layer's
/// disk (not in RAM), excluded from itself.
const GUEST_ARCHIVE: &str = "/var/tmp/.airlock-rootfs.tar";
const MIB: u64 = 1 << 20;

/// Packs the guest's root filesystem into `out`, a new root image.
pub async fn flatten(sandbox: &Sandbox, scratch: &Path, out: &Path) -> Result<(), BuildError> {
    let pack = Command::new("tar").args([
        "--one-file-system",
        "--numeric-owner",
        "--xattrs",
        "--xattrs-include=security.capability",
        "--exclude=./var/tmp/.airlock-rootfs.tar",
        "-cpf",
        GUEST_ARCHIVE,
        "-C",
        "/",
        ".",
    ]);
    let output = sandbox
        .exec(&pack)
        .await
        .map_err(BuildError::tool("tar"))?
        .output()
        .await?;
    // GNU tar exits 1 when a file changed while it was read (logs, say).
    if !matches!(output.status, crate::ExitStatus::Code(0 | 1)) {
        return Err(BuildError::Host(format!(
            "packing the filesystem in the guest: {:?}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    let archive = scratch.join("rootfs.tar");
    sandbox.fs().read_to_file(GUEST_ARCHIVE, &archive).await?;
    let tree = scratch.join("rootfs");
    std::fs::create_dir(&tree).map_err(BuildError::io(&tree))?;
    run(HostCommand::new("tar")
        .args(["--numeric-owner", "--xattrs", "--xattrs-include=*", "-xpf"])
        .arg(&archive)
        .arg("-C")
        .arg(&tree))?;
    std::fs::remove_file(&archive).map_err(BuildError::io(&archive))?;
    let (blocks, inodes) = measure(&tree)?;
    let bytes = (blocks + blocks / 8 + inodes * 256 + 48 * MIB).div_ceil(MIB) * MIB;
    let file = std::fs::File::create(out).map_err(BuildError::io(out))?;
    file.set_len(bytes).map_err(BuildError::io(out))?;
    drop(file);
    run(HostCommand::new("mkfs.ext4")
        .args([
            "-q", "-F", "-t", "ext4", "-b", "4096", "-I", "256", "-m", "0",
        ])
        .args(["-O", "^has_journal", "-L", "airlock-root", "-N"])
        .arg((inodes + inodes / 4 + 1024).to_string())
        .arg("-d")
        .arg(&tree)
        .arg(out))?;
    std::fs::remove_dir_all(&tree).map_err(BuildError::io(&tree))?;
    Ok(())
}

fn run(command: &mut HostCommand) -> Result<(), BuildError> {
    let program = command.get_program().to_string_lossy().into_owned();
    let output = command.output().map_err(|e| {
        BuildError::Host(format!(
            "{program}: {e}; install Debian's tar and e2fsprogs"
        ))
    })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(BuildError::Host(format!(
            "{program} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

/// Bytes in whole blocks, and inodes, of the tree at `root`.
fn measure(root: &Path) -> Result<(u64, u64), BuildError> {
    let mut blocks = 0;
    let mut inodes = 0;
    let mut stack: Vec<PathBuf> = vec![root.to_owned()];
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path).map_err(BuildError::io(&path))?;
        inodes += 1;
        blocks += meta.blocks() * 512;
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path).map_err(BuildError::io(&path))? {
                stack.push(entry.map_err(BuildError::io(&path))?.path());
            }
        }
    }
    Ok((blocks, inodes))
}
