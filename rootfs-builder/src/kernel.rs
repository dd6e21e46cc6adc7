//! `airlock-rootfs kernel`: Debian's cloud kernel and the guest's modules, into the
//! directory layout of [`crate::kernel_dir`].
//!
//! Data flow: [`apt::resolve_image`] (metapackage -> concrete package and version) ->
//! cache check against the directory's stamp -> [`apt::download`] -> [`apt::extract`] ->
//! [`ModuleTree::scan`] -> [`ModuleTree::select`] (modinfo closure, load order) -> write a
//! staging directory beside the target -> swap it into place.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::apt::{self, AptError};
use crate::kernel_dir::{self, KernelBuild, KernelDirError, Stamp};
use crate::modinfo;
use crate::module_tree::{ModuleTree, ModuleTreeError, Selection};

/// Debian's metapackage that always depends on the current cloud kernel image.
pub const DEFAULT_PACKAGE: &str = "linux-image-cloud-amd64";

/// Modules the Airlock guest needs (the contract's list): the virtio-mmio bus of
/// `-M microvm`, its block and console devices, virtio vsock, and overlayfs.
/// Dependencies are added automatically.
pub use airlock_proto::contract::GUEST_MODULES as DEFAULT_MODULES;

/// What to fetch and where to put it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelOptions {
    /// The kernel directory to create or update.
    pub out_dir: PathBuf,
    /// Metapackage or concrete image package to resolve through apt.
    pub package: String,
    /// Modules to ship (plus their dependencies); built-in ones are skipped.
    pub modules: Vec<String>,
}

impl KernelOptions {
    /// Default package and module set, written to `out_dir`.
    pub fn new(out_dir: impl Into<PathBuf>) -> Self {
        Self {
            out_dir: out_dir.into(),
            package: DEFAULT_PACKAGE.to_owned(),
            modules: DEFAULT_MODULES.iter().map(|&m| m.to_owned()).collect(),
        }
    }

    /// Uses another package (metapackage or concrete image).
    pub fn package(mut self, package: impl Into<String>) -> Self {
        self.package = package.into();
        self
    }

    /// Uses another module set.
    pub fn modules<I, S>(mut self, modules: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.modules = modules.into_iter().map(Into::into).collect();
        self
    }
}

/// Why the kernel directory could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KernelError {
    /// Resolving, downloading or unpacking the package failed.
    #[error(transparent)]
    Apt(#[from] AptError),
    /// The package's contents or the module set are unusable.
    #[error(transparent)]
    Modules(#[from] ModuleTreeError),
    /// The freshly written directory did not read back as complete.
    #[error(transparent)]
    KernelDir(#[from] KernelDirError),
    /// The output directory holds files this crate did not write; it will not delete them.
    #[error("{dir} holds files airlock-rootfs did not write ({entry}); choose an empty or new directory")]
    ForeignDir {
        /// The output directory.
        dir: PathBuf,
        /// The first unexpected entry.
        entry: String,
    },
    /// A file system operation failed.
    #[error("cannot {action} {path}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// On what.
        path: PathBuf,
        /// The I/O failure.
        #[source]
        source: io::Error,
    },
}

/// Makes `options.out_dir` a complete kernel directory for the current package version,
/// doing nothing (and returning `cached: true`) if it already is one.
pub fn fetch(options: &KernelOptions) -> Result<KernelBuild, KernelError> {
    let requested = normalized(&options.modules);
    let started = Instant::now();
    tracing::info!(package = %options.package, "resolving kernel package through apt");
    let package = apt::resolve_image(&options.package)?;
    tracing::info!(package = %package.name, version = %package.version, "resolved in {}", secs(started));

    if let Some(mut build) = cached(&options.out_dir, &package, &requested) {
        tracing::info!(
            dir = %options.out_dir.display(),
            release = %build.release,
            "kernel directory already holds this build; nothing to do"
        );
        build.cached = true;
        return Ok(build);
    }

    // Refuse a directory with foreign files now, before the download.
    check_ours(&options.out_dir)?;
    let work = tempfile::Builder::new()
        .prefix("airlock-kernel-")
        .tempdir()
        .map_err(io_err(
            "create a temporary directory in",
            std::env::temp_dir(),
        ))?;
    let download_dir = work.path().join("download");
    let root = work.path().join("root");
    for dir in [&download_dir, &root] {
        std::fs::create_dir(dir).map_err(io_err("create", dir))?;
    }

    let step = Instant::now();
    let size = package
        .size
        .map(|b| format!(" ({:.1} MB)", b as f64 / 1e6))
        .unwrap_or_default();
    tracing::info!("downloading {} {}{size}", package.name, package.version);
    let deb = apt::download(&package, &download_dir)?;
    tracing::info!("downloaded in {}", secs(step));

    let step = Instant::now();
    tracing::info!("extracting {}", deb.display());
    apt::extract(&deb, &root)?;
    let tree = ModuleTree::scan(&root)?;
    tracing::info!(
        release = tree.release(),
        "extracted in {} ({} module files in the package)",
        secs(step),
        tree.module_count()
    );

    let step = Instant::now();
    let selection = tree.select(&requested)?;
    for name in &selection.builtin {
        tracing::info!(
            "{name} is built into kernel {}; not shipping it",
            tree.release()
        );
    }
    tracing::info!(
        "{} modules in load order: {} (resolved in {})",
        selection.modules.len(),
        selection
            .modules
            .iter()
            .map(|m| m.name.as_str())
            .collect::<Vec<_>>()
            .join(" "),
        secs(step)
    );

    let stamp = Stamp {
        package: package.name.clone(),
        version: package.version.clone(),
        requested,
        builtin: selection.builtin.clone(),
    };
    let step = Instant::now();
    write_and_install(&options.out_dir, &tree, &selection, &stamp)?;
    let build = KernelBuild::open(&options.out_dir)?;
    tracing::info!(dir = %options.out_dir.display(), "wrote kernel directory in {} (total {})", secs(step), secs(started));
    Ok(build)
}

/// The existing build in `dir`, if it is complete and made from the same inputs.
fn cached(dir: &Path, package: &apt::Package, requested: &[String]) -> Option<KernelBuild> {
    let build = KernelBuild::open(dir).ok()?;
    let same = build.stamp.package == package.name
        && build.stamp.version == package.version
        && build.stamp.requested == requested;
    same.then_some(build)
}

fn write_and_install(
    out_dir: &Path,
    tree: &ModuleTree,
    selection: &Selection,
    stamp: &Stamp,
) -> Result<(), KernelError> {
    let parent = match out_dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(parent).map_err(io_err("create", parent))?;
    let stage = tempfile::Builder::new()
        .prefix(".airlock-kernel-")
        .tempdir_in(parent)
        .map_err(io_err("create a staging directory in", parent))?;
    write_layout(stage.path(), tree, selection, stamp)?;

    let old = tempfile::Builder::new()
        .prefix(".airlock-kernel-old-")
        .tempdir_in(parent)
        .map_err(io_err("create a staging directory in", parent))?;
    if check_ours(out_dir)? {
        let aside = old.path().join("previous");
        std::fs::rename(out_dir, &aside).map_err(io_err("move aside", out_dir))?;
    }
    std::fs::rename(stage.path(), out_dir).map_err(io_err("rename into", out_dir))?;
    // The staging directory now lives at `out_dir`; stop `TempDir` from deleting it.
    let _installed = stage.keep();
    Ok(())
}

fn write_layout(
    dir: &Path,
    tree: &ModuleTree,
    selection: &Selection,
    stamp: &Stamp,
) -> Result<(), KernelError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
        .map_err(io_err("set permissions of", dir))?;
    let vmlinuz = dir.join(kernel_dir::VMLINUZ);
    std::fs::copy(tree.vmlinuz(), &vmlinuz).map_err(io_err("write", &vmlinuz))?;
    write(
        &dir.join(kernel_dir::VERSION),
        format!("{}\n", tree.release()),
    )?;

    let modules_dir = dir.join(kernel_dir::MODULES_DIR);
    let mut order = String::new();
    for module in &selection.modules {
        let path = modules_dir.join(&module.relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io_err("create", parent))?;
        }
        write(&path, &module.data)?;
        order.push_str(&module.relative.to_string_lossy());
        order.push('\n');
    }
    std::fs::create_dir_all(&modules_dir).map_err(io_err("create", &modules_dir))?;
    write(&dir.join(kernel_dir::MODULES_ORDER), order)?;
    write(&dir.join(kernel_dir::STAMP), stamp.render())
}

/// True if `dir` exists and holds only names this crate writes; false if it does not
/// exist; an error if it holds anything else.
fn check_ours(dir: &Path) -> Result<bool, KernelError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(source) => {
            return Err(KernelError::Io {
                action: "read",
                path: dir.to_owned(),
                source,
            })
        }
    };
    for entry in entries {
        let name = entry.map_err(io_err("read", dir))?.file_name();
        let name = name.to_string_lossy();
        if !kernel_dir::ENTRIES.contains(&name.as_ref()) {
            return Err(KernelError::ForeignDir {
                dir: dir.to_owned(),
                entry: name.into_owned(),
            });
        }
    }
    Ok(true)
}

fn write(path: &Path, contents: impl AsRef<[u8]>) -> Result<(), KernelError> {
    std::fs::write(path, contents).map_err(io_err("write", path))
}

fn io_err(action: &'static str, path: impl AsRef<Path>) -> impl FnOnce(io::Error) -> KernelError {
    let path = path.as_ref().to_owned();
    move |source| KernelError::Io {
        action,
        path,
        source,
    }
}

/// Normalised names, first occurrence kept.
fn normalized(modules: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for name in modules.iter().map(|m| modinfo::normalize(m.trim())) {
        if !name.is_empty() && !out.contains(&name) {
            out.push(name);
        }
    }
    out
}

fn secs(since: Instant) -> String {
    format!("{:.1} s", since.elapsed().as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel_dir::tests::{stamp, write_fake};

    #[test]
    fn defaults_name_the_cloud_kernel_and_guest_modules() {
        let options = KernelOptions::new("/k");
        assert_eq!(options.package, "linux-image-cloud-amd64");
        assert!(options
            .modules
            .iter()
            .any(|m| m == "vmw_vsock_virtio_transport"));
        let custom = KernelOptions::new("/k").modules(["vsock"]).package("p");
        assert_eq!((custom.package.as_str(), custom.modules.len()), ("p", 1));
    }

    #[test]
    fn requested_names_are_normalised_and_deduplicated() {
        let names: Vec<String> = ["virtio-mmio", "virtio_mmio", " overlay ", ""]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(normalized(&names), ["virtio_mmio", "overlay"]);
    }

    #[test]
    fn cache_hit_needs_same_package_version_and_modules() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        write_fake(dir.path(), &[("kernel/virtio_mmio.ko", b"m")])?;
        let s = stamp();
        let package = apt::Package {
            name: s.package.clone(),
            version: s.version.clone(),
            size: None,
        };
        assert!(cached(dir.path(), &package, &s.requested).is_some());
        assert!(cached(dir.path(), &package, &["overlay".into()]).is_none());
        let newer = apt::Package {
            version: "6.1.1000-1".into(),
            ..package
        };
        assert!(cached(dir.path(), &newer, &s.requested).is_none());
        Ok(())
    }

    #[test]
    fn refuses_to_replace_a_directory_it_did_not_write() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        assert!(!check_ours(&dir.path().join("absent"))?);
        write_fake(dir.path(), &[])?;
        assert!(check_ours(dir.path())?);
        std::fs::write(dir.path().join("notes.txt"), "mine")?;
        assert!(matches!(
            check_ours(dir.path()),
            Err(KernelError::ForeignDir { entry, .. }) if entry == "notes.txt"
        ));
        Ok(())
    }
}
