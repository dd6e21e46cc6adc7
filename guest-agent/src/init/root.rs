//! Leaving the initramfs for a root filesystem image, while staying PID 1.
//!
//! When the command line names `airlock.root=DEV`, [`switch`] (run after
//! [`super::mounts`] and [`super::modules`], so `virtio_blk` and `overlay`
//! are loaded and `/dev`, `/proc`, `/sys`, `/run`, `/tmp` are mounted):
//!
//! 1. waits for the block device(s) to appear;
//! 2. mounts the image read-only (ext4) at `/run/airlock/image`;
//! 3. mounts the writable layer at `/run/airlock/rw`: the workspace disk's
//!    ext4 (`airlock.workspace=DEV`) or a tmpfs, with `upper/` and `work/`;
//! 4. stacks overlayfs on them at `/sysroot`;
//! 5. moves `/dev`, `/proc`, `/sys`, `/run` and `/tmp` into it;
//! 6. the `switch_root` technique: `chdir /sysroot`, `mount --move . /`,
//!    `chroot .`, `chdir /`;
//! 7. detaches the layer mounts from view (the overlay keeps them) and reads
//!    the image's `/etc/airlock/env` for [`image_env`].
//!
//! The process is the same throughout: the agent stays PID 1, and its
//! reaper and server start afterwards in the new root. The initramfs stays
//! in memory underneath (a few MiB). No threads exist yet, so `chroot` moves
//! the whole agent.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::mount::{mount, umount2, MntFlags, MsFlags};

/// Where the image is mounted before (and, detached, after) the switch.
const IMAGE_MOUNT: &str = "/run/airlock/image";
/// Where the writable layer is mounted.
const RW_MOUNT: &str = "/run/airlock/rw";
/// Where the overlay is assembled.
const NEW_ROOT: &str = "/sysroot";
/// Mounts carried into the new root, each with what is mounted below it.
const CARRIED: &[&str] = &["/dev", "/proc", "/sys", "/run", "/tmp"];
/// How long a disk may take to appear after `virtio_blk` loaded.
const DEVICE_WAIT: Duration = Duration::from_secs(10);
/// The image's environment for programs, written by the image builder.
pub use airlock_proto::contract::paths::IMAGE_ENV as IMAGE_ENV_FILE;

static IMAGE_ENV: OnceLock<Vec<(String, String)>> = OnceLock::new();

/// Why the agent could not switch to the root image.
#[derive(Debug, thiserror::Error)]
pub enum RootError {
    /// The disk did not show up.
    #[error("disk {device} did not appear within {waited:?}; is the virtio_blk module in the initramfs?")]
    NoDevice {
        /// The device path.
        device: PathBuf,
        /// How long the agent waited.
        waited: Duration,
    },
    /// A directory could not be created.
    #[error("cannot create {path}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `mount(2)` failed.
    #[error("cannot mount {what} on {target}")]
    Mount {
        /// What was being mounted.
        what: String,
        /// The mount point.
        target: String,
        /// The errno.
        #[source]
        source: Errno,
    },
    /// A step of the switch itself failed.
    #[error("cannot switch root: {step}")]
    Switch {
        /// The step.
        step: &'static str,
        /// The errno.
        #[source]
        source: Errno,
    },
}

/// The image's environment (`KEY=VALUE` lines of `/etc/airlock/env`), empty
/// without a root image or without the file.
pub fn image_env() -> &'static [(String, String)] {
    IMAGE_ENV.get().map_or(&[], Vec::as_slice)
}

/// Mounts the image and the writable layer, and makes their overlay `/`.
#[tracing::instrument(skip_all, fields(root = %root.display()))]
pub fn switch(root: &Path, workspace: Option<&Path>) -> Result<(), RootError> {
    let began = Instant::now();
    wait_for(root)?;
    if let Some(ws) = workspace {
        wait_for(ws)?;
    }
    for dir in [IMAGE_MOUNT, RW_MOUNT, NEW_ROOT] {
        create_dir(Path::new(dir))?;
    }
    mount_at(Some(root), IMAGE_MOUNT, "ext4", MsFlags::MS_RDONLY, None)?;
    match workspace {
        Some(ws) => mount_at(Some(ws), RW_MOUNT, "ext4", MsFlags::MS_NOATIME, None)?,
        None => mount_at(
            Some(Path::new("tmpfs")),
            RW_MOUNT,
            "tmpfs",
            MsFlags::empty(),
            // Half the guest's memory, below the programs' memory cap:
            // filling the overlay gives ENOSPC, not an OOM kill.
            Some("mode=0755,size=50%"),
        )?,
    }
    let upper = Path::new(RW_MOUNT).join("upper");
    let work = Path::new(RW_MOUNT).join("work");
    create_dir(&upper)?;
    create_dir(&work)?;
    let options = format!(
        "lowerdir={IMAGE_MOUNT},upperdir={},workdir={},index=off",
        upper.display(),
        work.display()
    );
    mount_at(
        Some(Path::new("overlay")),
        NEW_ROOT,
        "overlay",
        MsFlags::empty(),
        Some(&options),
    )?;

    for carried in CARRIED {
        let target = format!("{NEW_ROOT}{carried}");
        create_dir(Path::new(&target))?;
        mount(
            Some(*carried),
            target.as_str(),
            None::<&str>,
            MsFlags::MS_MOVE,
            None::<&str>,
        )
        .map_err(|source| RootError::Mount {
            what: (*carried).to_owned(),
            target,
            source,
        })?;
    }

    let step = |step| move |source| RootError::Switch { step, source };
    nix::unistd::chdir(NEW_ROOT).map_err(step("chdir to the new root"))?;
    mount(Some("."), "/", None::<&str>, MsFlags::MS_MOVE, None::<&str>)
        .map_err(step("move the new root onto /"))?;
    nix::unistd::chroot(".").map_err(step("chroot"))?;
    nix::unistd::chdir("/").map_err(step("chdir to /"))?;

    // The overlay holds its own references to its layers.
    for layer in [IMAGE_MOUNT, RW_MOUNT] {
        if let Err(e) = umount2(layer, MntFlags::MNT_DETACH) {
            tracing::debug!(layer, error = %e, "layer mount stays visible");
        }
    }
    let env = read_env(Path::new(IMAGE_ENV_FILE));
    tracing::info!(
        workspace = workspace.is_some(),
        env = env.len(),
        elapsed_ms = began.elapsed().as_millis() as u64,
        "switched to the root image"
    );
    let _ = IMAGE_ENV.set(env);
    Ok(())
}

fn wait_for(device: &Path) -> Result<(), RootError> {
    let began = Instant::now();
    while !device.exists() {
        if began.elapsed() >= DEVICE_WAIT {
            return Err(RootError::NoDevice {
                device: device.to_owned(),
                waited: DEVICE_WAIT,
            });
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

fn create_dir(path: &Path) -> Result<(), RootError> {
    std::fs::create_dir_all(path).map_err(|source| RootError::Dir {
        path: path.to_owned(),
        source,
    })
}

fn mount_at(
    source: Option<&Path>,
    target: &str,
    fstype: &str,
    flags: MsFlags,
    data: Option<&str>,
) -> Result<(), RootError> {
    mount(source, target, Some(fstype), flags, data).map_err(|errno| RootError::Mount {
        what: match source {
            Some(s) => format!("{} ({fstype})", s.display()),
            None => fstype.to_owned(),
        },
        target: target.to_owned(),
        source: errno,
    })
}

/// Reads `KEY=VALUE` lines; anything else is skipped. A missing file is an
/// empty environment.
fn read_env(path: &Path) -> Vec<(String, String)> {
    match std::fs::read_to_string(path) {
        Ok(text) => parse_env(&text),
        Err(e) => {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(path = %path.display(), error = %e, "cannot read the image environment");
            }
            Vec::new()
        }
    }
}

/// Parses `/etc/airlock/env` text.
pub fn parse_env(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|line| {
            let (key, value) = line.split_once('=')?;
            let valid = !key.is_empty()
                && !key.contains('\0')
                && !value.contains('\0')
                && !key.starts_with('#');
            valid.then(|| (key.to_owned(), value.to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_lines_are_key_value_pairs() {
        let env = parse_env("PATH=/opt/bin:/bin\nLANG=C.UTF-8\n# c=1\nnonsense\n=x\nEMPTY=\n");
        assert_eq!(
            env,
            vec![
                ("PATH".to_owned(), "/opt/bin:/bin".to_owned()),
                ("LANG".to_owned(), "C.UTF-8".to_owned()),
                ("EMPTY".to_owned(), String::new()),
            ]
        );
    }

    #[test]
    fn no_root_image_means_no_image_env() {
        assert!(image_env().is_empty());
    }

    #[test]
    fn carried_mounts_are_top_level_and_cover_the_layer_mounts() {
        for carried in CARRIED {
            assert_eq!(carried.matches('/').count(), 1, "{carried}");
        }
        // The layer mounts live under /run, so they travel with it.
        assert!(IMAGE_MOUNT.starts_with("/run/") && RW_MOUNT.starts_with("/run/"));
    }
}
