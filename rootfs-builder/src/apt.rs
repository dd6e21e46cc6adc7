//! Debian's package registry through apt's own clients; the only network this crate uses.
//!
//! [`resolve_image`] follows a kernel metapackage (`linux-image-cloud-amd64`) through its
//! `Depends: linux-image-*` to the concrete image package with `apt-cache show`, preferring
//! the `-unsigned` build (QEMU does not check Secure Boot signatures). [`download`] fetches
//! that exact version with `apt-get download`; [`extract`] unpacks it with `dpkg-deb -x`.

use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Metapackages point at each other in short chains; anything deeper is a loop.
const MAX_META_DEPTH: usize = 4;

/// One concrete version of one Debian package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Package {
    /// Package name, e.g. `linux-image-6.1.0-57-cloud-amd64-unsigned`.
    pub name: String,
    /// Debian version, e.g. `6.1.192-3`.
    pub version: String,
    /// Size of the `.deb` in bytes, when apt knows it.
    pub size: Option<u64>,
}

/// Why apt could not resolve, download or unpack a package.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AptError {
    /// An apt or dpkg program is not on `PATH`.
    #[error("{program} not found; this needs a Debian host with apt and dpkg")]
    NotInstalled {
        /// The missing program.
        program: String,
        /// The spawn failure.
        #[source]
        source: io::Error,
    },
    /// The program could not be started for another reason.
    #[error("cannot run {program}")]
    Spawn {
        /// The program.
        program: String,
        /// The spawn failure.
        #[source]
        source: io::Error,
    },
    /// apt has never heard of the package.
    #[error("package {name} not found in apt's lists; run `apt-get update`")]
    NotFound {
        /// The package name.
        name: String,
    },
    /// A command exited unsuccessfully.
    #[error("`{command}` failed: {stderr}")]
    Failed {
        /// The command line.
        command: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// `apt-cache show` printed a stanza without a `Version:` field.
    #[error("apt-cache show {name} printed no Version field")]
    NoVersion {
        /// The package name.
        name: String,
    },
    /// Metapackages kept pointing at other metapackages.
    #[error("{name} does not lead to a kernel image within {MAX_META_DEPTH} metapackages")]
    MetaLoop {
        /// Where the chain started.
        name: String,
    },
    /// `apt-get download` succeeded but left no `.deb` behind.
    #[error("apt-get download left no .deb in {dir}")]
    NoDeb {
        /// The download directory.
        dir: PathBuf,
    },
    /// Listing the download directory failed.
    #[error("cannot list {dir}")]
    Io {
        /// The directory.
        dir: PathBuf,
        /// The I/O failure.
        #[source]
        source: io::Error,
    },
}

/// Resolves `name` (a metapackage such as `linux-image-cloud-amd64`, or a concrete image
/// package) to the concrete kernel image package apt would install, preferring `-unsigned`.
///
/// Each step asks apt about a package and its `-unsigned` twin in one `apt-cache` call,
/// since every call re-reads apt's lists (about a second where apt keeps no binary cache).
pub fn resolve_image(name: &str) -> Result<Package, AptError> {
    let mut current = name.to_owned();
    for _ in 0..=MAX_META_DEPTH {
        let unsigned = if current.ends_with("-unsigned") {
            None
        } else {
            Some(format!("{current}-unsigned"))
        };
        let names: Vec<&str> = std::iter::once(current.as_str())
            .chain(unsigned.as_deref())
            .collect();
        let stanzas = show(&names)?;
        let stanza_of = |n: &str| {
            stanzas
                .iter()
                .find(|s| field(s, "Package").as_deref() == Some(n))
        };
        let Some(stanza) = stanza_of(&current) else {
            return Err(AptError::NotFound { name: current });
        };
        let depends = field(stanza, "Depends").unwrap_or_default();
        if let Some(next) = depends_names(&depends)
            .into_iter()
            .find(|dep| dep.starts_with("linux-image-"))
        {
            tracing::debug!(from = %current, to = %next, "following metapackage");
            current = next;
            continue;
        }
        let signed = package_from(&current, stanza)?;
        let unsigned = match unsigned.as_deref().and_then(|n| Some((n, stanza_of(n)?))) {
            Some((n, stanza)) => Some(package_from(n, stanza)?),
            None => None,
        };
        return Ok(match unsigned {
            Some(unsigned) if unsigned.version == signed.version => unsigned,
            _ => signed,
        });
    }
    Err(AptError::MetaLoop {
        name: name.to_owned(),
    })
}

fn package_from(name: &str, stanza: &str) -> Result<Package, AptError> {
    let version = field(stanza, "Version").ok_or_else(|| AptError::NoVersion {
        name: name.to_owned(),
    })?;
    Ok(Package {
        name: name.to_owned(),
        version,
        size: field(stanza, "Size").and_then(|s| s.parse().ok()),
    })
}

/// The candidate version's stanza of each of `names` that apt knows, from one
/// `apt-cache show` call. apt succeeds if it knows at least one of them.
fn show(names: &[&str]) -> Result<Vec<String>, AptError> {
    let mut args = vec!["show", "--no-all-versions"];
    args.extend_from_slice(names);
    let output = run("apt-cache", &args, None)?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() || stdout.trim().is_empty() {
        if stderr.contains("No packages found") || stdout.trim().is_empty() {
            return Err(AptError::NotFound {
                name: names.first().copied().unwrap_or_default().to_owned(),
            });
        }
        return Err(AptError::Failed {
            command: format!("apt-cache {}", args.join(" ")),
            stderr: stderr.trim().to_owned(),
        });
    }
    Ok(stanzas(&stdout))
}

/// Splits `apt-cache show` output into stanzas.
fn stanzas(text: &str) -> Vec<String> {
    text.split("\n\n")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Downloads `package` (that exact version) into `dir` and returns the `.deb`'s path.
pub fn download(package: &Package, dir: &Path) -> Result<PathBuf, AptError> {
    let spec = format!("{}={}", package.name, package.version);
    let output = run("apt-get", ["download", spec.as_str()], Some(dir))?;
    if !output.status.success() {
        return Err(AptError::Failed {
            command: format!("apt-get download {spec}"),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    let io_err = |source| AptError::Io {
        dir: dir.to_owned(),
        source,
    };
    for entry in std::fs::read_dir(dir).map_err(io_err)? {
        let path = entry.map_err(io_err)?.path();
        if path.extension() == Some(OsStr::new("deb")) {
            return Ok(path);
        }
    }
    Err(AptError::NoDeb {
        dir: dir.to_owned(),
    })
}

/// Unpacks the files of `deb` into `dest` (no maintainer scripts run).
pub fn extract(deb: &Path, dest: &Path) -> Result<(), AptError> {
    let output = run(
        "dpkg-deb",
        [OsStr::new("-x"), deb.as_os_str(), dest.as_os_str()],
        None,
    )?;
    if output.status.success() {
        Ok(())
    } else {
        Err(AptError::Failed {
            command: format!("dpkg-deb -x {} {}", deb.display(), dest.display()),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }
}

fn run<I, S>(program: &str, args: I, cwd: Option<&Path>) -> Result<Output, AptError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut command = Command::new(program);
    command.args(args);
    if let Some(cwd) = cwd {
        command.current_dir(cwd);
    }
    command.output().map_err(|source| {
        let program = program.to_owned();
        if source.kind() == io::ErrorKind::NotFound {
            AptError::NotInstalled { program, source }
        } else {
            AptError::Spawn { program, source }
        }
    })
}

/// The value of `key` in a deb822 stanza, continuation lines joined with spaces.
pub fn field(stanza: &str, key: &str) -> Option<String> {
    let mut lines = stanza.lines();
    let first = lines.find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k == key).then(|| v.trim().to_owned())
    })?;
    let continuation = lines
        .take_while(|line| line.starts_with([' ', '\t']))
        .map(str::trim);
    Some(
        std::iter::once(first.as_str())
            .chain(continuation)
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// Package names in a `Depends:` value: the first alternative of each group, without
/// version constraints or architecture qualifiers.
pub fn depends_names(depends: &str) -> Vec<String> {
    depends
        .split(',')
        .filter_map(|group| {
            let first = group.split('|').next()?.trim();
            let name = first.split([' ', '(', '[']).next()?.trim();
            let name = name.split(':').next()?;
            (!name.is_empty()).then(|| name.to_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const META: &str = "Package: linux-image-cloud-amd64\n\
        Source: linux-signed-amd64 (6.1.192+3)\n\
        Version: 6.1.192-3\n\
        Provides: linux-latest-modules-6.1.0-57-cloud-amd64, wireguard-modules (= 1.0.0)\n\
        Depends: linux-image-6.1.0-57-cloud-amd64 (= 6.1.192-3)\n\
        Description: Linux for x86-64 cloud (meta-package)\n";

    const IMAGE: &str = "Package: linux-image-6.1.0-57-cloud-amd64-unsigned\n\
        Version: 6.1.192-3\n\
        Depends: kmod, linux-base (>= 4.3~), initramfs-tools (>= 0.120+deb8u2) | linux-initramfs-tool\n\
        Size: 26715828\n\
        Description: Linux 6.1 for x86-64 cloud\n \
        This package contains the Linux kernel image,\n \
        the System.map.\n";

    #[test]
    fn reads_fields_of_a_stanza() {
        assert_eq!(field(META, "Version").as_deref(), Some("6.1.192-3"));
        assert_eq!(field(IMAGE, "Size").as_deref(), Some("26715828"));
        assert_eq!(
            field(IMAGE, "Description").as_deref(),
            Some("Linux 6.1 for x86-64 cloud This package contains the Linux kernel image, the System.map.")
        );
        assert_eq!(field(META, "Missing"), None);
    }

    #[test]
    fn metapackage_depends_name_the_image() {
        let deps = depends_names(&field(META, "Depends").unwrap_or_default());
        assert_eq!(deps, ["linux-image-6.1.0-57-cloud-amd64"]);
    }

    #[test]
    fn image_depends_have_no_kernel_image() {
        let deps = depends_names(&field(IMAGE, "Depends").unwrap_or_default());
        assert_eq!(deps, ["kmod", "linux-base", "initramfs-tools"]);
        assert!(!deps.iter().any(|d| d.starts_with("linux-image-")));
    }

    #[test]
    fn architecture_qualifiers_are_dropped() {
        assert_eq!(
            depends_names("libc6:amd64 (>= 2.36), python3:any | python3-minimal [amd64]"),
            ["libc6", "python3"]
        );
    }

    #[test]
    fn splits_stanzas() {
        let text = format!("{META}\n{IMAGE}\n\n");
        let parts = stanzas(&text);
        assert_eq!(parts.len(), 2);
        assert_eq!(
            field(&parts[1], "Package").as_deref(),
            Some("linux-image-6.1.0-57-cloud-amd64-unsigned")
        );
    }

    #[test]
    fn package_needs_a_version() {
        assert!(matches!(
            package_from("x", "Package: x\n"),
            Err(AptError::NoVersion { .. })
        ));
        let image = package_from("linux-image-x-unsigned", IMAGE).ok();
        assert_eq!(image.and_then(|p| p.size), Some(26_715_828));
    }
}
