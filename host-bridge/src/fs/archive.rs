//! Directories as tar streams on the host side (`tar` crate), bridged to
//! async gRPC streams through bounded channels so a tree of any size moves
//! in bounded memory. Extraction refuses entries that would land outside
//! the target directory, as the agent does.

use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};

use bytes::Bytes;
use tokio::sync::mpsc;

use super::error::FsError;
use super::CHUNK;

/// A blocking `Read` over chunks arriving on a channel.
#[derive(Debug)]
pub(crate) struct ChannelReader {
    rx: mpsc::Receiver<Bytes>,
    current: Bytes,
}

impl ChannelReader {
    pub(crate) fn new(rx: mpsc::Receiver<Bytes>) -> Self {
        ChannelReader {
            rx,
            current: Bytes::new(),
        }
    }
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(chunk) => self.current = chunk,
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

/// A blocking `Write` sending [`CHUNK`]-sized pieces to a channel.
#[derive(Debug)]
pub(crate) struct ChannelWriter {
    tx: mpsc::Sender<Bytes>,
    buf: Vec<u8>,
}

impl ChannelWriter {
    pub(crate) fn new(tx: mpsc::Sender<Bytes>) -> Self {
        ChannelWriter {
            tx,
            buf: Vec::with_capacity(CHUNK),
        }
    }

    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK)));
        self.tx
            .blocking_send(chunk)
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "upload stopped"))
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let n = data.len().min(CHUNK - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == CHUNK {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

/// Writes the host directory `dir` as a tar stream (paths relative to it,
/// symlinks kept as symlinks).
pub(crate) fn archive(dir: &Path, out: impl Write) -> Result<(), FsError> {
    let local = |e| FsError::local("archive", dir, e);
    if !std::fs::metadata(dir).map_err(local)?.is_dir() {
        return Err(FsError::NotADirectory(dir.to_owned()));
    }
    let mut builder = tar::Builder::new(out);
    builder.follow_symlinks(false);
    builder.append_dir_all(".", dir).map_err(local)?;
    builder
        .into_inner()
        .and_then(|mut w| w.flush())
        .map_err(local)
}

/// Extracts a tar stream into the host directory `target` (created if
/// missing), with each entry's permission bits (`0o777`; setuid, setgid
/// and sticky bits are dropped); returns the number of entries.
pub(crate) fn extract(reader: impl Read, target: &Path) -> Result<u64, FsError> {
    std::fs::create_dir_all(target).map_err(|e| FsError::local("create", target, e))?;
    let mut archive = tar::Archive::new(reader);
    // The permission bits only: a setuid or setgid bit from the guest
    // would make a host file that runs as its (host) owner.
    archive.set_preserve_permissions(false);
    archive.set_overwrite(true);
    let mut count = 0;
    for entry in archive.entries().map_err(FsError::BadTar)? {
        let mut entry = entry.map_err(FsError::BadTar)?;
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let escaping = || FsError::EscapingEntry {
            entry: name.clone(),
            target: target.to_owned(),
        };
        let relative = entry.path().map_err(FsError::BadTar)?.into_owned();
        let dest = inside(target, &relative).ok_or_else(escaping)?;
        if entry.header().entry_type().is_hard_link() {
            let link = entry
                .link_name()
                .map_err(FsError::BadTar)?
                .ok_or_else(escaping)?;
            inside(target, &link).ok_or_else(escaping)?;
        }
        if through_symlink(target, &dest) {
            return Err(escaping());
        }
        if dest == target {
            continue;
        }
        entry
            .unpack_in(target)
            .map_err(|e| FsError::local("extract", &dest, e))?;
        count += 1;
    }
    Ok(count)
}

/// `target/relative` if `relative` has no root and no `..`.
fn inside(target: &Path, relative: &Path) -> Option<PathBuf> {
    let mut dest = target.to_owned();
    for part in relative.components() {
        match part {
            Component::Normal(p) => dest.push(p),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(dest)
}

/// Whether a directory between `target` and `dest` is a symlink.
fn through_symlink(target: &Path, dest: &Path) -> bool {
    let Ok(rest) = dest.strip_prefix(target) else {
        return true;
    };
    let parts: Vec<_> = rest.components().collect();
    let mut at = target.to_owned();
    for part in parts.iter().take(parts.len().saturating_sub(1)) {
        at.push(part);
        if std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
            return true;
        }
    }
    false
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn tar_with(name: &str) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(1);
        h.set_mode(0o644);
        let raw = &mut h.as_old_mut().name;
        raw[..name.len()].copy_from_slice(name.as_bytes());
        h.set_cksum();
        b.append(&h, &b"x"[..]).unwrap();
        b.into_inner().unwrap()
    }

    #[test]
    fn escaping_entries_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("t");
        for name in ["../evil", "/tmp/evil", "a/../../evil"] {
            let err = extract(&tar_with(name)[..], &target).unwrap_err();
            assert!(matches!(err, FsError::EscapingEntry { .. }), "{err}");
            assert!(err.to_string().contains(name), "{err}");
        }
        std::os::unix::fs::symlink(dir.path(), target.join("out")).unwrap();
        let err = extract(&tar_with("out/evil")[..], &target).unwrap_err();
        assert!(matches!(err, FsError::EscapingEntry { .. }), "{err}");
        assert!(!dir.path().join("evil").exists());
    }

    /// Found by the `tar_extract` fuzz target: the guest's mode bits were
    /// kept whole, so a guest could leave a setuid (or setgid) file in a
    /// host directory, owned by the host user who downloaded it (root, say).
    #[test]
    fn setuid_and_setgid_bits_from_the_guest_are_dropped() {
        use std::os::unix::fs::PermissionsExt;
        let mut b = tar::Builder::new(Vec::new());
        for (name, kind, mode, data) in [
            ("d/", tar::EntryType::Directory, 0o3775, &b""[..]),
            ("d/tool", tar::EntryType::Regular, 0o6755, &b"#!"[..]),
        ] {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(kind);
            h.set_mode(mode);
            h.set_size(data.len() as u64);
            h.set_path(name).unwrap();
            h.set_cksum();
            b.append(&h, data).unwrap();
        }
        let bytes = b.into_inner().unwrap();
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(extract(&bytes[..], dir.path()).unwrap(), 2);
        let mode = |p: &str| {
            std::fs::metadata(dir.path().join(p))
                .unwrap()
                .permissions()
                .mode()
                & 0o7777
        };
        assert_eq!(mode("d/tool"), 0o755);
        assert_eq!(mode("d"), 0o775);
    }

    #[test]
    fn round_trip_keeps_modes_and_symlinks() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir_all(src.join("sub")).unwrap();
        std::fs::write(src.join("sub/run.sh"), "echo").unwrap();
        std::fs::set_permissions(
            src.join("sub/run.sh"),
            std::fs::Permissions::from_mode(0o751),
        )
        .unwrap();
        std::os::unix::fs::symlink("sub/run.sh", src.join("link")).unwrap();
        let mut bytes = Vec::new();
        archive(&src, &mut bytes).unwrap();
        let dst = dir.path().join("dst");
        extract(&bytes[..], &dst).unwrap();
        let mode = std::fs::metadata(dst.join("sub/run.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o751);
        assert_eq!(
            std::fs::read_link(dst.join("link")).unwrap(),
            Path::new("sub/run.sh")
        );
    }
}
