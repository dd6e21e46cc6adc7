//! A deterministic newc ("SVR4 no CRC") cpio archive, the format the kernel unpacks as
//! an initramfs, written with the `cpio` crate.
//!
//! Entries are kept in a sorted map and written in byte order of their paths, so a
//! directory always precedes what it contains (the kernel's unpacker does not create
//! parents) and the same inputs always give the same bytes: fixed mtime, uid/gid 0,
//! inode numbers by position. Missing parent directories are added (mode 0755).

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::{Component, Path};

use ::cpio::newc::{self, ModeFileType};
use ::cpio::NewcBuilder;

/// Why an entry could not be added or the archive written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ArchiveError {
    /// The path is absolute, empty, non-UTF-8 or has `.`/`..` components.
    #[error("invalid archive path {path:?}; use a relative path of plain components")]
    BadPath {
        /// The path as given.
        path: String,
    },
    /// Two different entries at one path (or a file where a directory is needed).
    #[error("archive already has a different entry at {path}")]
    Conflict {
        /// The path.
        path: String,
    },
    /// A file too large for newc's 32-bit size field.
    #[error("{path} is larger than 4 GiB, the newc limit")]
    TooLarge {
        /// The path.
        path: String,
    },
    /// Writing failed.
    #[error("cannot write cpio archive")]
    Write(#[source] io::Error),
}

/// One archive entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    /// A directory with permission bits `mode`.
    Dir {
        /// Permission bits, e.g. `0o755`.
        mode: u32,
    },
    /// A regular file.
    File {
        /// Permission bits.
        mode: u32,
        /// Contents.
        data: Vec<u8>,
    },
    /// A symbolic link (mode 0777).
    Symlink {
        /// Where it points.
        target: String,
    },
    /// A character device node.
    CharDevice {
        /// Permission bits.
        mode: u32,
        /// Device major number.
        major: u32,
        /// Device minor number.
        minor: u32,
    },
}

/// An in-memory archive; see the module docs for its ordering guarantees.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Archive {
    entries: BTreeMap<String, Node>,
    mtime: u32,
}

impl Archive {
    /// An empty archive whose entries all carry `mtime` (seconds since the epoch).
    pub fn new(mtime: u32) -> Self {
        Self {
            entries: BTreeMap::new(),
            mtime,
        }
    }

    /// Adds a directory, or sets the mode of one that exists.
    pub fn dir(&mut self, path: impl AsRef<Path>, mode: u32) -> Result<(), ArchiveError> {
        let key = self.prepare(path.as_ref())?;
        match self.entries.get_mut(&key) {
            Some(Node::Dir { mode: m }) => *m = mode,
            Some(_) => return Err(ArchiveError::Conflict { path: key }),
            None => {
                self.entries.insert(key, Node::Dir { mode });
            }
        }
        Ok(())
    }

    /// Adds a regular file.
    pub fn file(
        &mut self,
        path: impl AsRef<Path>,
        mode: u32,
        data: Vec<u8>,
    ) -> Result<(), ArchiveError> {
        let key = self.prepare(path.as_ref())?;
        if u32::try_from(data.len()).is_err() {
            return Err(ArchiveError::TooLarge { path: key });
        }
        self.insert(key, Node::File { mode, data })
    }

    /// Adds a symbolic link to `target`.
    pub fn symlink(&mut self, path: impl AsRef<Path>, target: &str) -> Result<(), ArchiveError> {
        let key = self.prepare(path.as_ref())?;
        self.insert(
            key,
            Node::Symlink {
                target: target.to_owned(),
            },
        )
    }

    /// Adds a character device node.
    pub fn char_device(
        &mut self,
        path: impl AsRef<Path>,
        mode: u32,
        major: u32,
        minor: u32,
    ) -> Result<(), ArchiveError> {
        let key = self.prepare(path.as_ref())?;
        self.insert(key, Node::CharDevice { mode, major, minor })
    }

    /// Number of entries, directories included.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if the archive has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Number of regular files.
    pub fn file_count(&self) -> usize {
        self.entries
            .values()
            .filter(|n| matches!(n, Node::File { .. }))
            .count()
    }

    /// The entry at `path`, if any.
    pub fn get(&self, path: &str) -> Option<&Node> {
        self.entries.get(path)
    }

    /// Writes the archive, trailer included, and returns the writer.
    pub fn write<W: Write>(&self, mut out: W) -> Result<W, ArchiveError> {
        for (index, (path, node)) in self.entries.iter().enumerate() {
            let ino = u32::try_from(index + 1).unwrap_or(u32::MAX);
            let header = NewcBuilder::new(path)
                .ino(ino)
                .uid(0)
                .gid(0)
                .mtime(self.mtime);
            let (header, data): (NewcBuilder, &[u8]) = match node {
                Node::Dir { mode } => (
                    header
                        .mode(*mode)
                        .set_mode_file_type(ModeFileType::Directory)
                        .nlink(2),
                    &[],
                ),
                Node::File { mode, data } => (
                    header.mode(*mode).set_mode_file_type(ModeFileType::Regular),
                    data,
                ),
                Node::Symlink { target } => (
                    header.mode(0o777).set_mode_file_type(ModeFileType::Symlink),
                    target.as_bytes(),
                ),
                Node::CharDevice { mode, major, minor } => (
                    header
                        .mode(*mode)
                        .set_mode_file_type(ModeFileType::Char)
                        .rdev_major(*major)
                        .rdev_minor(*minor),
                    &[],
                ),
            };
            // Sizes were checked on insertion.
            let size = u32::try_from(data.len())
                .map_err(|_| ArchiveError::TooLarge { path: path.clone() })?;
            let mut writer = header.write(out, size);
            writer.write_all(data).map_err(ArchiveError::Write)?;
            out = writer.finish().map_err(ArchiveError::Write)?;
        }
        newc::trailer(out).map_err(ArchiveError::Write)
    }

    /// Validates `path`, adds its missing parent directories and returns its key.
    fn prepare(&mut self, path: &Path) -> Result<String, ArchiveError> {
        let bad = || ArchiveError::BadPath {
            path: path.display().to_string(),
        };
        let mut key = String::new();
        for component in path.components() {
            let Component::Normal(part) = component else {
                return Err(bad());
            };
            let part = part.to_str().ok_or_else(bad)?;
            if !key.is_empty() {
                match self.entries.get(&key) {
                    Some(Node::Dir { .. }) => {}
                    Some(_) => return Err(ArchiveError::Conflict { path: key }),
                    None => {
                        self.entries.insert(key.clone(), Node::Dir { mode: 0o755 });
                    }
                }
                key.push('/');
            }
            key.push_str(part);
        }
        if key.is_empty() {
            return Err(bad());
        }
        Ok(key)
    }

    fn insert(&mut self, key: String, node: Node) -> Result<(), ArchiveError> {
        match self.entries.get(&key) {
            Some(existing) if *existing == node => Ok(()),
            Some(_) => Err(ArchiveError::Conflict { path: key }),
            None => {
                self.entries.insert(key, node);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::process::{Command, Stdio};

    fn sample() -> Result<Archive, ArchiveError> {
        let mut archive = Archive::new(0);
        archive.file("init", 0o755, b"#!/bin/sh\n".to_vec())?;
        archive.file("etc/airlock/modules.order", 0o644, b"/a.ko\n".to_vec())?;
        archive.dir("tmp", 0o1777)?;
        archive.symlink("usr/bin/env", "/bin/busybox")?;
        archive.char_device("dev/console", 0o600, 5, 1)?;
        Ok(archive)
    }

    /// One entry as the cpio crate's reader sees it.
    #[derive(Debug, Clone, PartialEq, Eq)]
    struct ReadEntry {
        name: String,
        mode: u32,
        rdev: (u32, u32),
        data: Vec<u8>,
    }

    fn read_back(mut bytes: &[u8]) -> anyhow::Result<Vec<ReadEntry>> {
        let mut out = Vec::new();
        loop {
            let mut reader = ::cpio::NewcReader::new(bytes)?;
            let entry = reader.entry().clone();
            if entry.is_trailer() {
                return Ok(out);
            }
            let mut data = Vec::new();
            reader.read_to_end(&mut data)?;
            out.push(ReadEntry {
                name: entry.name().to_owned(),
                mode: entry.mode(),
                rdev: (entry.rdev_major(), entry.rdev_minor()),
                data,
            });
            bytes = reader.finish()?;
        }
    }

    #[test]
    fn parents_first_with_modes_symlinks_and_device() -> anyhow::Result<()> {
        let bytes = sample()?.write(Vec::new())?;
        let entries = read_back(&bytes)?;
        let names: Vec<_> = entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "dev",
                "dev/console",
                "etc",
                "etc/airlock",
                "etc/airlock/modules.order",
                "init",
                "tmp",
                "usr",
                "usr/bin",
                "usr/bin/env"
            ]
        );
        let by_name = |n: &str| entries.iter().find(|e| e.name == n).cloned();
        assert_eq!(by_name("init").map(|e| e.mode), Some(0o100755));
        assert_eq!(by_name("tmp").map(|e| e.mode), Some(0o041777));
        assert_eq!(by_name("etc").map(|e| e.mode), Some(0o040755));
        let env = by_name("usr/bin/env");
        assert_eq!(env.as_ref().map(|e| e.mode), Some(0o120777));
        assert_eq!(env.map(|e| e.data), Some(b"/bin/busybox".to_vec()));
        let console = by_name("dev/console");
        assert_eq!(console.map(|e| (e.mode, e.rdev)), Some((0o020600, (5, 1))));
        Ok(())
    }

    #[test]
    fn output_is_deterministic() -> anyhow::Result<()> {
        let mut reordered = Archive::new(0);
        reordered.char_device("dev/console", 0o600, 5, 1)?;
        reordered.symlink("usr/bin/env", "/bin/busybox")?;
        reordered.dir("tmp", 0o1777)?;
        reordered.file("etc/airlock/modules.order", 0o644, b"/a.ko\n".to_vec())?;
        reordered.file("init", 0o755, b"#!/bin/sh\n".to_vec())?;
        assert_eq!(reordered.write(Vec::new())?, sample()?.write(Vec::new())?);
        Ok(())
    }

    #[test]
    fn bad_paths_and_conflicts_are_errors() -> anyhow::Result<()> {
        let mut archive = sample()?;
        for bad in ["/etc/passwd", "../x", "a/../b", ""] {
            assert!(
                matches!(
                    archive.file(bad, 0o644, Vec::new()),
                    Err(ArchiveError::BadPath { .. })
                ),
                "{bad:?} accepted"
            );
        }
        assert!(matches!(
            archive.symlink("init", "/elsewhere"),
            Err(ArchiveError::Conflict { .. })
        ));
        assert!(matches!(
            archive.file("init/below", 0o644, Vec::new()),
            Err(ArchiveError::Conflict { .. })
        ));
        archive.symlink("usr/bin/env", "/bin/busybox")?;
        Ok(())
    }

    #[test]
    fn gnu_cpio_lists_it_the_same_way() -> anyhow::Result<()> {
        let bytes = sample()?.write(Vec::new())?;
        let mut child = Command::new("cpio")
            .args(["-itv", "--quiet"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| anyhow::anyhow!("cannot run cpio ({e}); run `apt-get install -y cpio`"))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(&bytes)?;
        }
        let output = child.wait_with_output()?;
        anyhow::ensure!(output.status.success(), "cpio -it failed");
        let listing = String::from_utf8(output.stdout)?;
        let line = |name: &str| {
            listing
                .lines()
                .find(|l| l.split_whitespace().any(|w| w == name))
                .map(|l| l.split_whitespace().collect::<Vec<_>>())
                .unwrap_or_default()
        };
        let console = line("dev/console");
        assert_eq!(console.first().copied(), Some("crw-------"), "{listing}");
        assert!(
            console.contains(&"5,") && console.contains(&"1"),
            "{listing}"
        );
        let env = line("usr/bin/env");
        assert_eq!(env.first().copied(), Some("lrwxrwxrwx"), "{listing}");
        assert_eq!(env.last().copied(), Some("/bin/busybox"), "{listing}");
        assert_eq!(
            line("init").first().copied(),
            Some("-rwxr-xr-x"),
            "{listing}"
        );
        assert_eq!(
            line("tmp").first().copied(),
            Some("drwxrwxrwt"),
            "{listing}"
        );
        Ok(())
    }
}
