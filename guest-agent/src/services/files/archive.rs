//! `UploadTar` and `DownloadTar`: directories as tar streams (`tar` crate);
//! `DownloadPaths`: listed paths as one tar stream.
//!
//! The async side and the blocking tar code meet through [`ChannelReader`]
//! and [`ChannelWriter`], channels of [`super::io::QUEUE`] chunks, so a tree
//! of any size moves in bounded memory. Extraction refuses an entry that
//! would land outside the target: an absolute path, a `..` component, a
//! path through a symlink, or a hard link pointing out.

use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};

use bytes::Bytes;
use tokio::sync::mpsc;

use super::access::Actor;
use super::error::FilesError;
use super::io::CHUNK;

/// A blocking `Read` over chunks arriving on a channel.
#[derive(Debug)]
pub struct ChannelReader {
    rx: mpsc::Receiver<Bytes>,
    current: Bytes,
}

impl ChannelReader {
    /// Reads what `rx` delivers until it closes.
    pub fn new(rx: mpsc::Receiver<Bytes>) -> Self {
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

/// A blocking `Write` that sends [`CHUNK`]-sized pieces to a channel.
#[derive(Debug)]
pub struct ChannelWriter<T> {
    tx: mpsc::Sender<T>,
    wrap: fn(Bytes) -> T,
    buf: Vec<u8>,
}

impl<T> ChannelWriter<T> {
    /// Wraps each chunk with `wrap` before sending it.
    pub fn new(tx: mpsc::Sender<T>, wrap: fn(Bytes) -> T) -> Self {
        ChannelWriter {
            tx,
            wrap,
            buf: Vec::with_capacity(CHUNK),
        }
    }

    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK)));
        self.tx
            .blocking_send((self.wrap)(chunk))
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "receiver gone"))
    }
}

impl<T> Write for ChannelWriter<T> {
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

/// A reader that notes whether its source ran dry: a tar archive ends
/// with its end-of-archive blocks, which the `tar` crate stops at without
/// reading on, so an archive that reached the end of its stream instead
/// was cut.
struct EndWatch<R> {
    inner: R,
    ran_dry: std::rc::Rc<std::cell::Cell<bool>>,
}

impl<R: Read> Read for EndWatch<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && !buf.is_empty() {
            self.ran_dry.set(true);
        }
        Ok(n)
    }
}

/// Extracts a tar stream into `target`, created if missing. Returns the
/// number of entries. The archive must be whole: one cut short (in an
/// entry, or before its end-of-archive blocks) is [`FilesError::BadTar`],
/// and the entries this call created are removed again (an entry it
/// replaced stays replaced).
pub fn extract(reader: impl Read, target: &Path, actor: &Actor) -> Result<u64, FilesError> {
    let mut created = Vec::new();
    let result = extract_noting(reader, target, actor, &mut created);
    if result.is_err() {
        for path in created.iter().rev() {
            let removed = match std::fs::symlink_metadata(path) {
                Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path),
                Ok(_) => std::fs::remove_file(path),
                Err(_) => Ok(()),
            };
            if let Err(e) = removed {
                tracing::warn!(path = %path.display(), error = %e, "removing a cut upload's entry");
            }
        }
    }
    result
}

fn extract_noting(
    reader: impl Read,
    target: &Path,
    actor: &Actor,
    created: &mut Vec<PathBuf>,
) -> Result<u64, FilesError> {
    if std::fs::symlink_metadata(target).is_err() {
        created.push(first_missing(target));
    }
    super::tree::make_dirs(target, 0o755, actor)?;
    actor.check_dir_writable(target)?;
    let ran_dry = std::rc::Rc::new(std::cell::Cell::new(false));
    let mut archive = tar::Archive::new(EndWatch {
        inner: reader,
        ran_dry: std::rc::Rc::clone(&ran_dry),
    });
    archive.set_preserve_permissions(true);
    archive.set_overwrite(true);
    let mut count = 0;
    for entry in archive.entries().map_err(FilesError::BadTar)? {
        let mut entry = entry.map_err(FilesError::BadTar)?;
        let raw = entry.path_bytes();
        let name = String::from_utf8_lossy(&raw).into_owned();
        let escaping = || FilesError::EscapingEntry {
            entry: name.clone(),
            target: target.display().to_string(),
        };
        let relative = entry.path().map_err(FilesError::BadTar)?.into_owned();
        let dest = inside(target, &relative).ok_or_else(escaping)?;
        if entry.header().entry_type().is_hard_link() {
            let link = entry
                .link_name()
                .map_err(FilesError::BadTar)?
                .ok_or_else(escaping)?;
            inside(target, &link).ok_or_else(escaping)?;
        }
        if through_symlink(target, &dest) {
            return Err(escaping());
        }
        if dest == target {
            continue; // the `./` entry
        }
        if std::fs::symlink_metadata(&dest).is_err() {
            created.push(first_missing(&dest));
        }
        entry.unpack_in(target).map_err(|e| {
            // An entry whose data the stream did not hold: a cut archive.
            if ran_dry.get() || e.kind() == std::io::ErrorKind::UnexpectedEof {
                FilesError::BadTar(e)
            } else {
                FilesError::io("extract", &dest, e)
            }
        })?;
        actor.own(&dest)?;
        count += 1;
    }
    if ran_dry.get() {
        return Err(FilesError::BadTar(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the archive ended before its end-of-archive blocks (a cut upload)",
        )));
    }
    Ok(count)
}

/// The outermost missing directory on the way to `path` (`path` itself if
/// its parent exists): what making `path` creates first.
fn first_missing(path: &Path) -> PathBuf {
    let mut first = path.to_owned();
    let mut at = path.parent();
    while let Some(dir) = at {
        if std::fs::symlink_metadata(dir).is_ok() {
            break;
        }
        first = dir.to_owned();
        at = dir.parent();
    }
    first
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

/// Whether any directory between `target` and `dest` (exclusive) is a
/// symlink, so writing `dest` could land elsewhere.
fn through_symlink(target: &Path, dest: &Path) -> bool {
    let Ok(rest) = dest.strip_prefix(target) else {
        return true;
    };
    let mut at = target.to_owned();
    let parts: Vec<_> = rest.components().collect();
    for part in parts.iter().take(parts.len().saturating_sub(1)) {
        at.push(part);
        if std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
            return true;
        }
    }
    false
}

/// Writes `dir` as a tar stream (paths relative to it, symlinks kept).
pub fn archive(dir: &Path, out: impl Write) -> Result<(), FilesError> {
    let meta = std::fs::metadata(dir).map_err(|e| FilesError::io("archive", dir, e))?;
    if !meta.is_dir() {
        return Err(FilesError::io(
            "archive",
            dir,
            std::io::Error::from_raw_os_error(nix::libc::ENOTDIR),
        ));
    }
    let mut builder = tar::Builder::new(out);
    builder.follow_symlinks(false);
    builder
        .append_dir_all(".", dir)
        .map_err(|e| FilesError::io("archive", dir, e))?;
    builder
        .into_inner()
        .and_then(|mut w| w.flush())
        .map_err(|e| FilesError::io("archive", dir, e))
}

/// Writes `paths` (absolute) as a tar stream, each named by its path
/// without the leading `/`, symlinks kept and a directory alone (not its
/// contents). A path that is gone is left out.
pub fn archive_paths(paths: &[PathBuf], out: impl Write) -> Result<u64, FilesError> {
    let mut builder = tar::Builder::new(out);
    builder.follow_symlinks(false);
    let mut count = 0;
    for path in paths {
        let name: PathBuf = path
            .components()
            .filter(|c| matches!(c, Component::Normal(_)))
            .collect();
        if name.as_os_str().is_empty() {
            continue; // `/` itself
        }
        match builder.append_path_with_name(path, &name) {
            Ok(()) => count += 1,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                tracing::debug!(path = %path.display(), "gone before its download");
            }
            Err(e) => return Err(FilesError::io("archive", path, e)),
        }
    }
    builder
        .into_inner()
        .and_then(|mut w| w.flush())
        .map_err(|e| FilesError::io("archive", Path::new("/"), e))?;
    Ok(count)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn listed_paths_are_named_from_the_root_and_missing_ones_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("sub")).unwrap();
        std::fs::write(d.join("sub/a"), "aa").unwrap();
        std::fs::write(d.join("b"), "b").unwrap();
        let mut bytes = Vec::new();
        let paths = [d.join("sub"), d.join("sub/a"), d.join("missing")];
        assert_eq!(archive_paths(&paths, &mut bytes).unwrap(), 2);
        let mut archive = tar::Archive::new(&bytes[..]);
        let names: Vec<String> = archive
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        let rel = d.strip_prefix("/").unwrap();
        assert_eq!(
            names,
            [
                rel.join("sub").display().to_string(),
                rel.join("sub/a").display().to_string()
            ]
        );
    }

    fn tar_with(name: &str) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(1);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        // set_path refuses `..`; write the raw name as an attacker would.
        let raw = &mut h.as_old_mut().name;
        raw[..name.len()].copy_from_slice(name.as_bytes());
        h.set_cksum();
        b.append(&h, &b"x"[..]).unwrap();
        b.into_inner().unwrap()
    }

    #[test]
    fn parent_and_absolute_entries_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("t");
        for name in ["../evil", "/etc/evil", "a/../../evil"] {
            let err = extract(&tar_with(name)[..], &target, &Actor::default()).unwrap_err();
            assert!(
                matches!(err, FilesError::EscapingEntry { .. }),
                "{name}: {err}"
            );
            assert!(err.to_string().contains(name), "{err}");
        }
        assert!(!dir.path().join("evil").exists());
    }

    #[test]
    fn a_cut_archive_is_refused_and_leaves_nothing_it_made() {
        let mut b = tar::Builder::new(Vec::new());
        for (name, data) in [("sub/a", &b"aaaa"[..]), ("sub/big", &[7u8; 4096][..])] {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_path(name).unwrap();
            h.set_cksum();
            b.append(&h, data).unwrap();
        }
        let whole = b.into_inner().unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("kept"), "kept").unwrap();
        // In the middle of an entry, and at an entry's end without the
        // end-of-archive blocks.
        for cut in [whole.len() - 1024 - 2048, 1024] {
            let err = extract(&whole[..cut], dir.path(), &Actor::default()).unwrap_err();
            assert!(matches!(err, FilesError::BadTar(_)), "{cut}: {err}");
            assert_eq!(err.code(), tonic::Code::InvalidArgument);
            let names: Vec<_> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(names, ["kept"], "{cut}");
        }
        let fresh = dir.path().join("new/target");
        extract(&whole[..1024], &fresh, &Actor::default()).unwrap_err();
        assert!(!dir.path().join("new").exists());
        assert_eq!(extract(&whole[..], &fresh, &Actor::default()).unwrap(), 2);
        assert_eq!(std::fs::read(fresh.join("sub/big")).unwrap(), [7u8; 4096]);
    }

    #[test]
    fn entries_through_a_symlink_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("t");
        std::fs::create_dir(&target).unwrap();
        std::os::unix::fs::symlink(dir.path(), target.join("out")).unwrap();
        let err = extract(&tar_with("out/evil")[..], &target, &Actor::default()).unwrap_err();
        assert!(matches!(err, FilesError::EscapingEntry { .. }), "{err}");
        assert!(!dir.path().join("evil").exists());
    }

    #[test]
    fn round_trip_keeps_modes_and_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir_all(src.join("sub")).unwrap();
        std::fs::write(src.join("sub/run.sh"), "echo").unwrap();
        super::super::tree::chmod(&src.join("sub/run.sh"), 0o751).unwrap();
        std::os::unix::fs::symlink("sub/run.sh", src.join("link")).unwrap();
        let mut bytes = Vec::new();
        archive(&src, &mut bytes).unwrap();
        let dst = dir.path().join("dst");
        extract(&bytes[..], &dst, &Actor::default()).unwrap();
        let info = super::super::tree::stat(&dst.join("sub/run.sh")).unwrap();
        assert_eq!(info.mode, 0o751);
        assert_eq!(
            std::fs::read_link(dst.join("link")).unwrap(),
            Path::new("sub/run.sh")
        );
    }
}
