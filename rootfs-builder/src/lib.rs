//! Builds the two boot artifacts of an Airlock guest from Debian's packages. So far the
//! kernel directory: [`apt`] (resolve, download, unpack) -> [`module_tree`] (index the
//! package, read each wanted module's `.modinfo` via [`elf`]/[`modinfo`], uncompress via
//! [`decompress`]) -> [`depsort`] (load order) -> [`kernel_dir`] (stamped layout), driven
//! by [`kernel::fetch`].

#![forbid(unsafe_code)]

pub mod apt;
pub mod decompress;
pub mod depsort;
pub mod elf;
pub mod kernel;
pub mod kernel_dir;
pub mod modinfo;
pub mod module_tree;

pub use kernel::{KernelError, KernelOptions};
pub use kernel_dir::KernelBuild;
