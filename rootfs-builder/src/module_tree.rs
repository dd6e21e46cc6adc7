//! An unpacked kernel image package: its release, `vmlinuz`, every module file under
//! `lib/modules/<release>/` and the names in `modules.builtin`.
//!
//! [`ModuleTree::select`] turns a list of wanted modules into the files to ship: it reads
//! each module's `.modinfo` ([`crate::modinfo`]), follows `depends=` to a closure, drops
//! modules built into the kernel, and orders the rest with [`crate::depsort`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io;
use std::path::{Path, PathBuf};

use crate::decompress::{self, Compression, DecompressError};
use crate::depsort::{self, DepsortError};
use crate::modinfo::{self, ModInfo, ModinfoError};

/// Where kernel packages put their modules, oldest layout first.
const MODULE_ROOTS: [&str; 2] = ["lib/modules", "usr/lib/modules"];

/// Why an unpacked package could not be read or a module set not resolved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModuleTreeError {
    /// Reading the unpacked tree failed.
    #[error("cannot read {path}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The I/O failure.
        #[source]
        source: io::Error,
    },
    /// The package has no `lib/modules/<release>` directory.
    #[error("package has no lib/modules/<release> directory; is it a kernel image package?")]
    NoRelease,
    /// The package holds modules for more than one release.
    #[error("package holds modules for several releases: {}", releases.join(", "))]
    SeveralReleases {
        /// The releases found.
        releases: Vec<String>,
    },
    /// The package has modules but no kernel.
    #[error("package has no boot/vmlinuz-{release}")]
    NoVmlinuz {
        /// The release.
        release: String,
    },
    /// A requested module is neither a module file nor built into the kernel.
    #[error("module {name} does not exist in kernel {release} (neither a .ko nor built in)")]
    UnknownModule {
        /// The requested name.
        name: String,
        /// The kernel release.
        release: String,
    },
    /// A module depends on one the package does not have.
    #[error("module {needed_by} depends on {name}, which kernel {release} lacks")]
    MissingDependency {
        /// The missing dependency.
        name: String,
        /// The module that needs it.
        needed_by: String,
        /// The kernel release.
        release: String,
    },
    /// A module file could not be read or decompressed.
    #[error(transparent)]
    Decompress(#[from] DecompressError),
    /// A module's metadata could not be read.
    #[error("cannot read metadata of {path}")]
    Modinfo {
        /// The module file.
        path: PathBuf,
        /// The failure.
        #[source]
        source: ModinfoError,
    },
    /// The dependency graph has no load order.
    #[error(transparent)]
    Order(#[from] DepsortError),
}

/// A module chosen for the guest, uncompressed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectedModule {
    /// Normalised module name (`vmw_vsock_virtio_transport`).
    pub name: String,
    /// Path relative to `lib/modules/<release>/`, always ending in `.ko`.
    pub relative: PathBuf,
    /// The uncompressed module.
    pub data: Vec<u8>,
}

/// The result of [`ModuleTree::select`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// Modules to load, dependencies first.
    pub modules: Vec<SelectedModule>,
    /// Requested modules that are built into the kernel and need no loading.
    pub builtin: Vec<String>,
}

/// Index of an unpacked kernel image package.
#[derive(Debug, Clone)]
pub struct ModuleTree {
    release: String,
    base: PathBuf,
    vmlinuz: PathBuf,
    /// Module name -> file path relative to `base`, as shipped (possibly compressed).
    modules: BTreeMap<String, PathBuf>,
    builtin: BTreeSet<String>,
}

impl ModuleTree {
    /// Indexes the package unpacked at `root` (the directory given to `dpkg-deb -x`).
    pub fn scan(root: &Path) -> Result<Self, ModuleTreeError> {
        let (release, base) = find_release(root)?;
        let vmlinuz = root.join("boot").join(format!("vmlinuz-{release}"));
        if !vmlinuz.is_file() {
            return Err(ModuleTreeError::NoVmlinuz { release });
        }
        let mut modules = BTreeMap::new();
        walk(&base, Path::new(""), &mut modules)?;
        let builtin = read_builtin(&base.join("modules.builtin"))?;
        tracing::debug!(%release, modules = modules.len(), builtin = builtin.len(), "indexed kernel package");
        Ok(Self {
            release,
            base,
            vmlinuz,
            modules,
            builtin,
        })
    }

    /// The kernel release string, e.g. `6.1.0-57-cloud-amd64`.
    pub fn release(&self) -> &str {
        &self.release
    }

    /// The kernel image.
    pub fn vmlinuz(&self) -> &Path {
        &self.vmlinuz
    }

    /// Number of loadable module files in the package.
    pub fn module_count(&self) -> usize {
        self.modules.len()
    }

    /// Resolves `requested` module names to the module files to ship, with all their
    /// dependencies, in load order. Built-in modules are skipped and reported.
    pub fn select<S: AsRef<str>>(&self, requested: &[S]) -> Result<Selection, ModuleTreeError> {
        let mut roots = Vec::new();
        let mut builtin = Vec::new();
        for name in requested {
            let name = modinfo::normalize(name.as_ref());
            if self.modules.contains_key(&name) {
                roots.push(name);
            } else if self.builtin.contains(&name) {
                if !builtin.contains(&name) {
                    builtin.push(name);
                }
            } else {
                return Err(ModuleTreeError::UnknownModule {
                    name,
                    release: self.release.clone(),
                });
            }
        }

        let mut graph: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut data: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        let mut queue: VecDeque<String> = roots.iter().cloned().collect();
        while let Some(name) = queue.pop_front() {
            if graph.contains_key(&name) {
                continue;
            }
            let Some(relative) = self.modules.get(&name) else {
                continue;
            };
            let path = self.base.join(relative);
            let bytes = decompress::read_module(&path)?;
            let info = ModInfo::from_elf(&bytes)
                .map_err(|source| ModuleTreeError::Modinfo { path, source })?;
            let mut deps = Vec::new();
            for dep in info.depends() {
                if self.modules.contains_key(&dep) {
                    queue.push_back(dep.clone());
                    deps.push(dep);
                } else if !self.builtin.contains(&dep) {
                    return Err(ModuleTreeError::MissingDependency {
                        name: dep,
                        needed_by: name,
                        release: self.release.clone(),
                    });
                }
            }
            graph.insert(name.clone(), deps);
            data.insert(name, bytes);
        }

        let order = depsort::load_order(&roots, &graph)?;
        let modules = order
            .into_iter()
            .filter_map(|name| {
                let relative = plain_ko_path(self.modules.get(&name)?);
                let data = data.remove(&name)?;
                Some(SelectedModule {
                    name,
                    relative,
                    data,
                })
            })
            .collect();
        Ok(Selection { modules, builtin })
    }
}

fn find_release(root: &Path) -> Result<(String, PathBuf), ModuleTreeError> {
    let mut found = Vec::new();
    for dir in MODULE_ROOTS {
        let dir = root.join(dir);
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(source) => return Err(ModuleTreeError::Io { path: dir, source }),
        };
        for entry in entries {
            let entry = entry.map_err(|source| ModuleTreeError::Io {
                path: dir.clone(),
                source,
            })?;
            if entry.path().is_dir() {
                if let Some(release) = entry.file_name().to_str() {
                    found.push((release.to_owned(), entry.path()));
                }
            }
        }
    }
    found.sort();
    match found.len() {
        0 => Err(ModuleTreeError::NoRelease),
        1 => Ok(found.remove(0)),
        _ => Err(ModuleTreeError::SeveralReleases {
            releases: found.into_iter().map(|(r, _)| r).collect(),
        }),
    }
}

/// Collects module files under `base/relative`, sorted, first one winning on duplicates.
fn walk(
    base: &Path,
    relative: &Path,
    modules: &mut BTreeMap<String, PathBuf>,
) -> Result<(), ModuleTreeError> {
    let dir = base.join(relative);
    let io_err = |source| ModuleTreeError::Io {
        path: dir.clone(),
        source,
    };
    let mut entries = std::fs::read_dir(&dir)
        .map_err(io_err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(io_err)?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let child = relative.join(entry.file_name());
        let file_type = entry.file_type().map_err(io_err)?;
        if file_type.is_dir() {
            walk(base, &child, modules)?;
        } else if let Some((stem, _)) = entry.file_name().to_str().and_then(Compression::split_name)
        {
            let name = modinfo::normalize(stem);
            if let Some(first) = modules.get(&name) {
                tracing::warn!(first = %first.display(), ignored = %child.display(), "duplicate module");
            } else {
                modules.insert(name, child);
            }
        }
    }
    Ok(())
}

/// Names listed in `modules.builtin` (one path per line); an absent file means none.
fn read_builtin(path: &Path) -> Result<BTreeSet<String>, ModuleTreeError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(BTreeSet::new()),
        Err(source) => {
            return Err(ModuleTreeError::Io {
                path: path.to_owned(),
                source,
            })
        }
    };
    Ok(text
        .lines()
        .filter_map(|line| {
            let file = line.trim().rsplit('/').next()?;
            Compression::split_name(file).map(|(stem, _)| modinfo::normalize(stem))
        })
        .collect())
}

/// `kernel/net/vsock.ko.xz` -> `kernel/net/vsock.ko`.
fn plain_ko_path(shipped: &Path) -> PathBuf {
    let file = shipped.file_name().and_then(|f| f.to_str());
    match file.and_then(Compression::split_name) {
        Some((stem, _)) => shipped.with_file_name(format!("{stem}.ko")),
        None => shipped.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elf::tests::object_with_section;

    const RELEASE: &str = "6.1.0-99-test-amd64";

    fn module(deps: &str, name: &str) -> anyhow::Result<Vec<u8>> {
        object_with_section(
            modinfo::SECTION,
            format!("depends={deps}\0name={name}\0").as_bytes(),
        )
    }

    /// A fake unpacked package: virtio_ring <- virtio <- virtio_mmio, vsock (xz) <- transport,
    /// ext4 built in, and a module depending on a module the package lacks.
    fn fake_package() -> anyhow::Result<tempfile::TempDir> {
        let root = tempfile::tempdir()?;
        let base = root.path().join("lib/modules").join(RELEASE);
        let virtio = base.join("kernel/drivers/virtio");
        let vsock = base.join("kernel/net/vmw_vsock");
        std::fs::create_dir_all(&virtio)?;
        std::fs::create_dir_all(&vsock)?;
        std::fs::create_dir_all(root.path().join("boot"))?;
        std::fs::write(
            root.path().join(format!("boot/vmlinuz-{RELEASE}")),
            b"kernel",
        )?;
        std::fs::write(virtio.join("virtio_ring.ko"), module("", "virtio_ring")?)?;
        std::fs::write(virtio.join("virtio.ko"), module("virtio_ring", "virtio")?)?;
        std::fs::write(
            virtio.join("virtio_mmio.ko"),
            module("virtio,virtio_ring", "virtio_mmio")?,
        )?;
        let mut packed = Vec::new();
        lzma_rs::xz_compress(&mut module("", "vsock")?.as_slice(), &mut packed)?;
        std::fs::write(vsock.join("vsock.ko.xz"), packed)?;
        std::fs::write(
            vsock.join("vmw_vsock_virtio_transport.ko"),
            module("vsock,virtio,ext4", "vmw_vsock_virtio_transport")?,
        )?;
        std::fs::write(vsock.join("orphan.ko"), module("ghost", "orphan")?)?;
        std::fs::write(
            base.join("modules.builtin"),
            "kernel/fs/ext4/ext4.ko\nkernel/arch/x86/events/amd/amd-uncore.ko\n",
        )?;
        Ok(root)
    }

    #[test]
    fn scans_release_vmlinuz_and_modules() -> anyhow::Result<()> {
        let root = fake_package()?;
        let tree = ModuleTree::scan(root.path())?;
        assert_eq!(tree.release(), RELEASE);
        assert!(tree.vmlinuz().ends_with(format!("vmlinuz-{RELEASE}")));
        assert_eq!(tree.module_count(), 6);
        assert!(tree.builtin.contains("amd_uncore"));
        Ok(())
    }

    #[test]
    fn selects_closure_in_load_order_and_decompresses() -> anyhow::Result<()> {
        let root = fake_package()?;
        let tree = ModuleTree::scan(root.path())?;
        let selection = tree.select(&["vmw_vsock_virtio_transport", "virtio-mmio", "ext4"])?;
        let names: Vec<_> = selection.modules.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "vsock",
                "virtio_ring",
                "virtio",
                "vmw_vsock_virtio_transport",
                "virtio_mmio"
            ]
        );
        assert_eq!(selection.builtin, ["ext4"]);
        let vsock = &selection.modules[0];
        assert_eq!(vsock.relative, Path::new("kernel/net/vmw_vsock/vsock.ko"));
        assert_eq!(
            ModInfo::from_elf(&vsock.data)?.name().as_deref(),
            Some("vsock")
        );
        Ok(())
    }

    #[test]
    fn unknown_module_is_an_error_builtin_is_not() -> anyhow::Result<()> {
        let root = fake_package()?;
        let tree = ModuleTree::scan(root.path())?;
        assert!(matches!(
            tree.select(&["no_such_module"]),
            Err(ModuleTreeError::UnknownModule { name, .. }) if name == "no_such_module"
        ));
        let only_builtin = tree.select(&["ext4"])?;
        assert!(only_builtin.modules.is_empty());
        Ok(())
    }

    #[test]
    fn missing_dependency_names_the_module_that_needs_it() -> anyhow::Result<()> {
        let root = fake_package()?;
        let tree = ModuleTree::scan(root.path())?;
        assert!(matches!(
            tree.select(&["orphan"]),
            Err(ModuleTreeError::MissingDependency { name, needed_by, .. })
                if name == "ghost" && needed_by == "orphan"
        ));
        Ok(())
    }

    #[test]
    fn not_a_kernel_package() -> anyhow::Result<()> {
        let root = tempfile::tempdir()?;
        assert!(matches!(
            ModuleTree::scan(root.path()),
            Err(ModuleTreeError::NoRelease)
        ));
        Ok(())
    }
}
