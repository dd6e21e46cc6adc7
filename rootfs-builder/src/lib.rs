//! Builds the two boot artifacts of an Airlock guest from Debian's packages: a kernel
//! directory (the cloud kernel plus the modules the guest needs) and an initramfs whose
//! `/init` is the guest agent.
//!
//! Data flow for [`kernel::fetch`]:
//! [`apt`] (resolve `linux-image-cloud-amd64`, download, unpack) -> [`module_tree`]
//! (index the package; for each wanted module read its ELF `.modinfo` via [`elf`] and
//! [`modinfo`], uncompress it via [`decompress`], follow `depends=`) -> [`depsort`]
//! (load order) -> the on-disk layout of [`kernel_dir`], stamped so reruns are free.
//!
//! Data flow for [`initramfs::build`]:
//! [`kernel_dir`] (read the kernel directory) + [`busybox`] (static binary and its
//! applets) + the agent -> [`archive`] (sorted, fixed-mtime newc cpio) -> gzip -> atomic
//! rename.
//!
//! Data flow for [`image::build`] (root filesystem images for sandboxes):
//! a [`image::Source`] (Debian via debootstrap, a directory, a tarball, an
//! OCI layout or `docker save` archive) -> hash of the inputs -> the image
//! store's cache, or else a root tree (container layers applied with their
//! whiteouts) -> `mkfs.ext4 -d` -> the store, under a name.
//!
//! ```no_run
//! use airlock_rootfs::{initramfs, kernel};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let build = kernel::fetch(&kernel::KernelOptions::new("/var/cache/airlock/kernel"))?;
//! let summary = initramfs::build(&initramfs::InitramfsOptions::new(
//!     &build.dir,
//!     "target/x86_64-unknown-linux-musl/release/airlock-agent",
//!     "/var/cache/airlock/initramfs.cpio",
//! ))?;
//! println!("{} ({} bytes)", summary.path.display(), summary.bytes);
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]

pub mod apt;
pub mod archive;
pub mod busybox;
pub mod decompress;
pub mod depsort;
pub mod elf;
pub mod image;
pub mod initramfs;
pub mod kernel;
pub mod kernel_dir;
pub mod modinfo;
pub mod module_tree;

pub use initramfs::{InitramfsError, InitramfsOptions, InitramfsSummary};
pub use kernel::{KernelError, KernelOptions};
pub use kernel_dir::KernelBuild;
