//! The kernel directory that `airlock-rootfs kernel` writes and `initramfs` reads:
//!
//! ```text
//! DIR/vmlinuz                     the kernel image
//! DIR/version                     kernel release, e.g. 6.1.0-57-cloud-amd64
//! DIR/modules/kernel/.../x.ko     uncompressed modules, paths relative to lib/modules/<release>
//! DIR/modules.order               those paths (relative to DIR/modules), dependencies first
//! DIR/airlock-kernel.stamp        package, version and module request of a COMPLETE build
//! ```
//!
//! A directory is complete only if its stamp parses and every file it implies exists;
//! [`KernelBuild::open`] checks exactly that, which is what makes `kernel` idempotent.

use std::io;
use std::path::{Path, PathBuf};

/// The kernel image.
pub const VMLINUZ: &str = "vmlinuz";
/// The kernel release string.
pub const VERSION: &str = "version";
/// Directory holding the module files.
pub const MODULES_DIR: &str = "modules";
/// Load order of the module files.
pub const MODULES_ORDER: &str = "modules.order";
/// Written last; its presence marks a complete build.
pub const STAMP: &str = "airlock-kernel.stamp";
/// Every name this crate writes at the top of a kernel directory.
pub const ENTRIES: [&str; 5] = [VMLINUZ, VERSION, MODULES_DIR, MODULES_ORDER, STAMP];

/// Why a kernel directory is not a complete build.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KernelDirError {
    /// A file of the layout is missing or unreadable.
    #[error("cannot read {path}; run `airlock-rootfs kernel --out DIR` first")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O failure.
        #[source]
        source: io::Error,
    },
    /// The stamp is present but not in the expected form.
    #[error("{path} is malformed (missing {key}); rebuild with `airlock-rootfs kernel`")]
    BadStamp {
        /// The stamp file.
        path: PathBuf,
        /// The missing key.
        key: &'static str,
    },
    /// `modules.order` names a file that is not there or escapes the modules directory.
    #[error("{path} lists {module}, which is not a module file under modules/")]
    MissingModule {
        /// The order file.
        path: PathBuf,
        /// The bad entry.
        module: String,
    },
}

/// What a build of the kernel directory was made from. Written to [`STAMP`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    /// Concrete image package name.
    pub package: String,
    /// Its Debian version.
    pub version: String,
    /// Normalised module names that were requested.
    pub requested: Vec<String>,
    /// Requested modules found to be built into the kernel.
    pub builtin: Vec<String>,
}

impl Stamp {
    /// The stamp as `key=value` lines.
    pub fn render(&self) -> String {
        format!(
            "package={}\nversion={}\nrequested={}\nbuiltin={}\n",
            self.package,
            self.version,
            self.requested.join(","),
            self.builtin.join(",")
        )
    }

    fn parse(path: &Path, text: &str) -> Result<Self, KernelDirError> {
        let value = |key: &'static str| {
            text.lines()
                .find_map(|line| line.strip_prefix(key)?.strip_prefix('='))
                .map(str::to_owned)
                .ok_or(KernelDirError::BadStamp {
                    path: path.to_owned(),
                    key,
                })
        };
        let list = |s: String| -> Vec<String> {
            s.split(',')
                .filter(|m| !m.is_empty())
                .map(str::to_owned)
                .collect()
        };
        Ok(Self {
            package: value("package")?,
            version: value("version")?,
            requested: list(value("requested")?),
            builtin: list(value("builtin")?),
        })
    }
}

/// A complete kernel directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelBuild {
    /// The directory.
    pub dir: PathBuf,
    /// Kernel release, e.g. `6.1.0-57-cloud-amd64`.
    pub release: String,
    /// What it was built from.
    pub stamp: Stamp,
    /// Module files relative to `dir/modules`, in load order.
    pub modules: Vec<PathBuf>,
    /// True if [`crate::kernel::fetch`] found it already built and did nothing.
    pub cached: bool,
}

impl KernelBuild {
    /// Reads and checks a kernel directory; fails unless it is a complete build.
    pub fn open(dir: &Path) -> Result<Self, KernelDirError> {
        let stamp_path = dir.join(STAMP);
        let stamp = Stamp::parse(&stamp_path, &read(&stamp_path)?)?;
        let release = read(&dir.join(VERSION))?.trim().to_owned();
        let vmlinuz = dir.join(VMLINUZ);
        std::fs::metadata(&vmlinuz).map_err(|source| KernelDirError::Read {
            path: vmlinuz,
            source,
        })?;
        let order_path = dir.join(MODULES_ORDER);
        let modules = parse_order(&read(&order_path)?)
            .into_iter()
            .map(|line| {
                let relative = PathBuf::from(line);
                let safe = relative
                    .components()
                    .all(|c| matches!(c, std::path::Component::Normal(_)));
                if safe && dir.join(MODULES_DIR).join(&relative).is_file() {
                    Ok(relative)
                } else {
                    Err(KernelDirError::MissingModule {
                        path: order_path.clone(),
                        module: line.to_owned(),
                    })
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            dir: dir.to_owned(),
            release,
            stamp,
            modules,
            cached: false,
        })
    }

    /// The kernel image.
    pub fn vmlinuz(&self) -> PathBuf {
        self.dir.join(VMLINUZ)
    }

    /// The directory holding the module files.
    pub fn modules_dir(&self) -> PathBuf {
        self.dir.join(MODULES_DIR)
    }
}

/// Non-empty, non-comment lines of a `modules.order` file.
pub fn parse_order(text: &str) -> Vec<&str> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect()
}

fn read(path: &Path) -> Result<String, KernelDirError> {
    std::fs::read_to_string(path).map_err(|source| KernelDirError::Read {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn stamp() -> Stamp {
        Stamp {
            package: "linux-image-6.1.0-99-test-amd64-unsigned".into(),
            version: "6.1.999-1".into(),
            requested: vec!["virtio_mmio".into(), "ext4".into()],
            builtin: vec!["ext4".into()],
        }
    }

    /// Writes a complete kernel directory with the given modules (relative path, bytes).
    pub(crate) fn write_fake(dir: &Path, modules: &[(&str, &[u8])]) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir.join(MODULES_DIR))?;
        std::fs::write(dir.join(VMLINUZ), b"kernel")?;
        std::fs::write(dir.join(VERSION), "6.1.0-99-test-amd64\n")?;
        let mut order = String::new();
        for (relative, data) in modules {
            let path = dir.join(MODULES_DIR).join(relative);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(path, data)?;
            order.push_str(relative);
            order.push('\n');
        }
        std::fs::write(dir.join(MODULES_ORDER), order)?;
        std::fs::write(dir.join(STAMP), stamp().render())?;
        Ok(())
    }

    #[test]
    fn stamp_round_trips() -> anyhow::Result<()> {
        let text = stamp().render();
        assert_eq!(Stamp::parse(Path::new("s"), &text)?, stamp());
        Ok(())
    }

    #[test]
    fn opens_a_complete_build() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        write_fake(
            dir.path(),
            &[
                ("kernel/a/virtio.ko", b"v"),
                ("kernel/b/virtio_mmio.ko", b"m"),
            ],
        )?;
        let build = KernelBuild::open(dir.path())?;
        assert_eq!(build.release, "6.1.0-99-test-amd64");
        assert_eq!(build.stamp, stamp());
        assert_eq!(
            build.modules,
            [
                PathBuf::from("kernel/a/virtio.ko"),
                PathBuf::from("kernel/b/virtio_mmio.ko")
            ]
        );
        Ok(())
    }

    #[test]
    fn incomplete_builds_are_rejected() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        write_fake(dir.path(), &[("kernel/a/virtio.ko", b"v")])?;
        std::fs::remove_file(dir.path().join("modules/kernel/a/virtio.ko"))?;
        assert!(matches!(
            KernelBuild::open(dir.path()),
            Err(KernelDirError::MissingModule { .. })
        ));
        std::fs::write(dir.path().join(MODULES_ORDER), "../../etc/passwd\n")?;
        assert!(matches!(
            KernelBuild::open(dir.path()),
            Err(KernelDirError::MissingModule { .. })
        ));
        std::fs::remove_file(dir.path().join(STAMP))?;
        assert!(matches!(
            KernelBuild::open(dir.path()),
            Err(KernelDirError::Read { .. })
        ));
        Ok(())
    }
}
