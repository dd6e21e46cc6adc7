//! A Debian root filesystem from `debootstrap --variant=minbase`.
//!
//! [`DebianSpec`] names the suite, the mirror and the packages on top of
//! minbase; [`bootstrap`] runs debootstrap into a directory, turning its
//! `I:` lines into progress (packages retrieved, then unpacked and
//! configured), and afterwards drops the downloaded `.deb` files and apt
//! lists, which only make the image bigger. debootstrap needs root.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::ImageError;

/// The suite of the default image.
pub const DEFAULT_SUITE: &str = "bookworm";
/// Debian's mirror.
pub const DEFAULT_MIRROR: &str = "http://deb.debian.org/debian";
/// What the default image adds to minbase: the full Python 3 with pip and
/// the `python` name, curl and the CA certificates (coreutils is essential,
/// listed because users count on it; bash is in minbase): what code written
/// for E2B's base image runs without installing anything.
pub const DEFAULT_PACKAGES: &[&str] = &[
    "python3",
    "python3-pip",
    "python-is-python3",
    "curl",
    "ca-certificates",
    "coreutils",
];
/// How many lines of debootstrap's output an error shows.
const ERROR_TAIL_LINES: usize = 15;

/// What to bootstrap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebianSpec {
    /// The suite (`bookworm`).
    pub suite: String,
    /// The mirror URL.
    pub mirror: String,
    /// Packages on top of minbase, sorted and without duplicates.
    pub packages: Vec<String>,
}

impl Default for DebianSpec {
    fn default() -> Self {
        Self::new(DEFAULT_SUITE, DEFAULT_MIRROR, &[])
    }
}

impl DebianSpec {
    /// The default packages plus `extra`.
    pub fn new(suite: &str, mirror: &str, extra: &[String]) -> Self {
        let mut packages: Vec<String> = DEFAULT_PACKAGES
            .iter()
            .map(|p| (*p).to_owned())
            .chain(extra.iter().cloned())
            .filter(|p| !p.is_empty())
            .collect();
        packages.sort();
        packages.dedup();
        Self {
            suite: suite.to_owned(),
            mirror: mirror.to_owned(),
            packages,
        }
    }

    /// For people: `debian bookworm minbase +ca-certificates,python3`.
    pub fn describe(&self) -> String {
        format!("debian {} minbase +{}", self.suite, self.packages.join(","))
    }
}

/// Runs debootstrap into `target` (an empty directory).
pub fn bootstrap(spec: &DebianSpec, target: &Path) -> Result<(), ImageError> {
    let program = find_program("debootstrap");
    let mut command = Command::new(&program);
    command
        .arg("--variant=minbase")
        .arg(format!("--include={}", spec.packages.join(",")))
        .arg(&spec.suite)
        .arg(target)
        .arg(&spec.mirror)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    tracing::debug!(?command, "starting debootstrap");
    let tool = |detail: String| ImageError::Tool {
        program: program.clone(),
        detail,
    };
    let mut child = command.spawn().map_err(|e| {
        tool(format!(
            "{e}; install Debian's debootstrap (scripts/setup does)"
        ))
    })?;
    // stderr goes to a thread so neither pipe can fill up and stall it.
    let stderr = child.stderr.take().map(|err| {
        std::thread::spawn(move || {
            BufReader::new(err)
                .lines()
                .map_while(Result::ok)
                .collect::<Vec<_>>()
        })
    });
    let mut tail = Vec::new();
    let mut phase = Phase::default();
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            tracing::debug!(target: "debootstrap", "{line}");
            phase.observe(&line);
            tail.push(line);
            if tail.len() > ERROR_TAIL_LINES {
                tail.remove(0);
            }
        }
    }
    let status = child.wait().map_err(|e| tool(e.to_string()))?;
    let errors = stderr.and_then(|t| t.join().ok()).unwrap_or_default();
    if !status.success() {
        tail.extend(errors);
        let start = tail.len().saturating_sub(ERROR_TAIL_LINES);
        return Err(tool(format!("{status}:\n{}", tail[start..].join("\n"))));
    }
    tracing::info!(packages = phase.retrieved, "debootstrap done");
    clean(target)
}

/// debootstrap's phases, in order.
const PHASES: &[&str] = &[
    "resolving dependencies",
    "downloading packages",
    "unpacking packages",
    "configuring packages",
];

/// Counts debootstrap's progress lines and reports phase changes.
#[derive(Debug, Default)]
struct Phase {
    current: &'static str,
    retrieved: u32,
}

impl Phase {
    fn observe(&mut self, line: &str) {
        let Some(message) = line.strip_prefix("I: ") else {
            return;
        };
        let phase = if message.starts_with("Retrieving ") || message.starts_with("Validating ") {
            if message.starts_with("Retrieving ") && !message.starts_with("Retrieving Release") {
                self.retrieved += 1;
                if self.retrieved.is_multiple_of(25) {
                    tracing::info!(packages = self.retrieved, "downloading packages");
                }
            }
            "downloading packages"
        } else if message.starts_with("Extracting ") || message.starts_with("Unpacking ") {
            "unpacking packages"
        } else if message.starts_with("Configuring ") || message.starts_with("Installing ") {
            "configuring packages"
        } else if message.starts_with("Resolving ") || message.starts_with("Found ") {
            "resolving dependencies"
        } else {
            return;
        };
        // debootstrap goes back and forth between unpacking and configuring;
        // report each phase once, in order.
        let rank = |p: &str| PHASES.iter().position(|q| *q == p);
        if rank(phase) > rank(self.current) {
            self.current = phase;
            tracing::info!(retrieved = self.retrieved, "debootstrap: {phase}");
        }
    }
}

/// Drops what only the bootstrap needed: downloaded packages, apt lists.
fn clean(target: &Path) -> Result<(), ImageError> {
    for dir in ["var/cache/apt/archives", "var/lib/apt/lists"] {
        let dir = target.join(dir);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let is_file = entry.file_type().is_ok_and(|t| t.is_file());
            if is_file && path.file_name().is_some_and(|n| n != "lock") {
                std::fs::remove_file(&path).map_err(|source| ImageError::Io {
                    action: "clean",
                    path: path.clone(),
                    source,
                })?;
            }
        }
    }
    Ok(())
}

/// A program from `PATH`, else from the sbin directories a non-root
/// user's `PATH` lacks on Debian.
pub fn find_program(name: &str) -> PathBuf {
    let dirs = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    dirs.into_iter()
        .chain(["/usr/sbin", "/sbin", "/usr/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packages_are_the_defaults_plus_extras_sorted_once() {
        let spec = DebianSpec::new(
            "bookworm",
            DEFAULT_MIRROR,
            &["git".into(), "python3".into()],
        );
        assert_eq!(
            spec.packages,
            vec![
                "ca-certificates",
                "coreutils",
                "curl",
                "git",
                "python-is-python3",
                "python3",
                "python3-pip"
            ]
        );
        assert_eq!(
            spec.describe(),
            "debian bookworm minbase \
             +ca-certificates,coreutils,curl,git,python-is-python3,python3,python3-pip"
        );
        assert!(DebianSpec::default()
            .packages
            .contains(&"python3".to_owned()));
    }

    #[test]
    fn progress_counts_retrieved_packages() {
        let mut phase = Phase::default();
        for line in [
            "I: Retrieving InRelease ",
            "I: Retrieving Packages ",
            "I: Retrieving libc6 2.36-9",
            "I: Validating libc6 2.36-9",
            "I: Extracting libc6...",
            "W: something",
        ] {
            phase.observe(line);
        }
        assert_eq!(phase.retrieved, 3);
        assert_eq!(phase.current, "unpacking packages");
    }
}
