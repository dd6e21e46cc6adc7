//! Loading the kernel modules the initramfs builder chose.
//!
//! The builder writes `/etc/airlock/modules.order`: one absolute `.ko` path
//! per line, dependencies first. [`parse`] turns that text into paths;
//! [`load_all`] feeds each to `finit_module(2)`. A missing file means there
//! is nothing to load; a module that is already loaded (`EEXIST`, e.g. built
//! in) is fine; any other failure is logged and the rest still load, since a
//! guest missing one driver can often still do useful work.

use std::ffi::CStr;
use std::fs::File;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::kmod::{finit_module, ModuleInitFlags};

/// Where the initramfs builder writes the module list.
pub use airlock_proto::contract::paths::MODULES_ORDER;

/// `MODULE_INIT_COMPRESSED_FILE` from `<linux/module.h>` (Linux 5.17+): the
/// kernel decompresses the module itself. Not yet named by nix.
const MODULE_INIT_COMPRESSED_FILE: u32 = 4;

/// A module that could not be listed or loaded.
#[derive(Debug, thiserror::Error)]
pub enum ModuleError {
    /// A line of `modules.order` is not an absolute path.
    #[error("modules.order line {line}: {text:?} is not an absolute path")]
    NotAbsolute {
        /// 1-based line number.
        line: usize,
        /// The offending text.
        text: String,
    },
    /// `modules.order` exists but could not be read.
    #[error("cannot read {path}")]
    ReadList {
        /// The list's path.
        path: PathBuf,
        /// Why reading failed.
        #[source]
        source: std::io::Error,
    },
    /// The module file could not be opened.
    #[error("cannot open module {path}")]
    Open {
        /// The module's path.
        path: PathBuf,
        /// Why opening failed.
        #[source]
        source: std::io::Error,
    },
    /// The kernel refused the module.
    #[error("kernel refused module {path}")]
    Load {
        /// The module's path.
        path: PathBuf,
        /// The errno from `finit_module(2)`.
        #[source]
        source: Errno,
    },
}

/// Parses `modules.order` text: blank lines and `#` comments are skipped,
/// surrounding whitespace is trimmed, and each remaining line must be an
/// absolute path.
pub fn parse(text: &str) -> Vec<Result<PathBuf, ModuleError>> {
    text.lines()
        .enumerate()
        .filter_map(|(i, raw)| {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                return None;
            }
            let path = PathBuf::from(line);
            Some(if path.is_absolute() {
                Ok(path)
            } else {
                Err(ModuleError::NotAbsolute {
                    line: i + 1,
                    text: line.to_owned(),
                })
            })
        })
        .collect()
}

/// Loads every module listed in `list`, in order, logging failures.
/// Returns how many modules the kernel newly loaded.
pub fn load_all(list: &Path) -> usize {
    let text = match std::fs::read_to_string(list) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            tracing::debug!(list = %list.display(), "no module list; loading none");
            return 0;
        }
        Err(source) => {
            let e = ModuleError::ReadList {
                path: list.to_owned(),
                source,
            };
            tracing::warn!(error = %airlock_report::chain(&e), "loading no modules");
            return 0;
        }
    };
    let mut loaded = 0;
    for entry in parse(&text) {
        match entry.and_then(|path| load(&path).map(|fresh| (path, fresh))) {
            Ok((path, true)) => {
                loaded += 1;
                tracing::debug!(module = %path.display(), "module loaded");
            }
            Ok((path, false)) => {
                tracing::debug!(module = %path.display(), "module already loaded");
            }
            Err(e) => tracing::warn!(error = %airlock_report::chain(&e), "module skipped"),
        }
    }
    loaded
}

/// Loads one module; `Ok(false)` if the kernel already had it.
fn load(path: &Path) -> Result<bool, ModuleError> {
    let file = File::open(path).map_err(|source| ModuleError::Open {
        path: path.to_owned(),
        source,
    })?;
    // No module parameters: the builder passes none today.
    let params: &CStr = c"";
    match finit_module(&file, params, flags_for(path)) {
        Ok(()) => Ok(true),
        Err(Errno::EEXIST) => Ok(false),
        Err(source) => Err(ModuleError::Load {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Compressed modules (`.ko.xz`, `.ko.zst`, `.ko.gz`) ask the kernel to
/// decompress them.
fn flags_for(path: &Path) -> ModuleInitFlags {
    let compressed = matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("xz" | "zst" | "gz")
    );
    if compressed {
        ModuleInitFlags::from_bits_retain(MODULE_INIT_COMPRESSED_FILE)
    } else {
        ModuleInitFlags::empty()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_paths_in_order_skipping_blanks_and_comments() {
        let text = "# generated\n/lib/modules/6.1/kernel/a.ko\n\n  /lib/modules/6.1/b.ko.xz  \n";
        let paths: Vec<PathBuf> = parse(text).into_iter().map(|r| r.unwrap()).collect();
        assert_eq!(
            paths,
            vec![
                PathBuf::from("/lib/modules/6.1/kernel/a.ko"),
                PathBuf::from("/lib/modules/6.1/b.ko.xz"),
            ]
        );
    }

    #[test]
    fn relative_path_is_an_error_with_its_line_number() {
        let entries = parse("/a.ko\nkernel/b.ko\n/c.ko");
        assert_eq!(entries.len(), 3);
        match &entries[1] {
            Err(ModuleError::NotAbsolute { line, text }) => {
                assert_eq!(*line, 2);
                assert_eq!(text, "kernel/b.ko");
            }
            other => panic!("expected NotAbsolute, got {other:?}"),
        }
        assert!(entries[2].is_ok());
    }

    #[test]
    fn empty_text_lists_nothing() {
        assert!(parse("").is_empty());
        assert!(parse("\n\n# nothing\n").is_empty());
    }

    #[test]
    fn compressed_modules_ask_the_kernel_to_decompress() {
        assert_eq!(flags_for(Path::new("/m/a.ko")), ModuleInitFlags::empty());
        for name in ["/m/a.ko.xz", "/m/a.ko.zst", "/m/a.ko.gz"] {
            assert_eq!(flags_for(Path::new(name)).bits(), 4, "{name}");
        }
    }

    #[test]
    fn missing_list_loads_nothing() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load_all(&dir.path().join("modules.order")), 0);
    }

    #[test]
    fn unopenable_module_is_skipped_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let list = dir.path().join("modules.order");
        std::fs::write(&list, "/nonexistent/airlock-test.ko\nrelative.ko\n").unwrap();
        assert_eq!(load_all(&list), 0);
    }
}
