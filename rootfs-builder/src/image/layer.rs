//! Applying one filesystem layer (a tar stream, maybe compressed) onto a
//! directory, as container runtimes do.
//!
//! OCI whiteouts say what a layer removes from the layers below it:
//! `DIR/.wh.NAME` deletes `DIR/NAME`, and `DIR/.wh..wh..opq` makes `DIR`
//! opaque (everything the lower layers put in it goes). Whiteouts refer to
//! the lower layers only, wherever they sit in the tar, so [`apply`] reads a
//! layer twice: pass one performs its whiteouts, pass two unpacks the rest.
//! An entry that replaces something of another kind (a file where a
//! directory was) removes what was there first.
//!
//! Paths are confined to the directory: `..` entries are skipped by `tar`,
//! and a whiteout whose parent resolves outside the directory (through a
//! symlink) is an error, never a deletion on the host.

use std::fs;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Component, Path, PathBuf};

/// The prefix of a whiteout file name.
pub const WHITEOUT_PREFIX: &str = ".wh.";
/// The name of an opaque-directory marker.
pub const OPAQUE_MARKER: &str = ".wh..wh..opq";

/// A layer that could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum LayerError {
    /// The layer could not be read or unpacked.
    #[error("cannot apply layer {layer}")]
    Io {
        /// The layer file.
        layer: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A whiteout points outside the root (through a symlink).
    #[error("layer {layer}: whiteout {entry} resolves outside the root filesystem")]
    Escape {
        /// The layer file.
        layer: PathBuf,
        /// The whiteout entry.
        entry: String,
    },
}

/// What applying a layer did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LayerStats {
    /// Entries unpacked.
    pub entries: u64,
    /// Bytes of file content unpacked.
    pub bytes: u64,
    /// Whiteouts performed (file and opaque).
    pub whiteouts: u64,
}

/// What a tar entry means for the layers below.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Whiteout {
    /// Remove this path (relative to the root).
    Remove(PathBuf),
    /// Empty this directory (relative to the root; empty path = the root).
    Opaque(PathBuf),
}

/// Classifies an entry path: `Ok(None)` for a normal entry, `Err(())` for a
/// path that leaves the root (`..`).
#[allow(clippy::result_unit_err)]
pub fn whiteout(path: &Path) -> Result<Option<Whiteout>, ()> {
    let normal = normalize(path).ok_or(())?;
    let Some(name) = normal.file_name().and_then(|n| n.to_str()) else {
        return Ok(None);
    };
    let parent = normal.parent().map(Path::to_owned).unwrap_or_default();
    if name == OPAQUE_MARKER {
        return Ok(Some(Whiteout::Opaque(parent)));
    }
    match name.strip_prefix(WHITEOUT_PREFIX) {
        Some(target) if !target.is_empty() && target != "." && target != ".." => {
            Ok(Some(Whiteout::Remove(parent.join(target))))
        }
        _ => Ok(None),
    }
}

/// A relative path without `.` and leading `/`; `None` if it has `..`.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::Normal(p) => out.push(p),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
            Component::ParentDir => return None,
        }
    }
    Some(out)
}

/// Opens a layer file, undoing gzip or zstd compression (found by magic
/// number, since `docker save` and OCI layouts label layers differently).
pub fn open(layer: &Path) -> io::Result<Box<dyn Read>> {
    let mut reader = BufReader::new(fs::File::open(layer)?);
    let head = reader.fill_buf()?;
    Ok(if head.starts_with(&[0x1f, 0x8b]) {
        Box::new(flate2::read::MultiGzDecoder::new(reader))
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Box::new(
            ruzstd::decoding::StreamingDecoder::new(reader)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?,
        )
    } else {
        Box::new(reader)
    })
}

/// Applies the layer file `layer` onto `root`.
pub fn apply(root: &Path, layer: &Path) -> Result<LayerStats, LayerError> {
    let fail = |source| LayerError::Io {
        layer: layer.to_owned(),
        source,
    };
    let canonical_root = root.canonicalize().map_err(fail)?;
    let preserve_owners = nix::unistd::geteuid().is_root();
    let mut stats = LayerStats::default();

    // Pass one: whiteouts.
    let mut archive = tar::Archive::new(open(layer).map_err(fail)?);
    for entry in archive.entries().map_err(fail)? {
        let entry = entry.map_err(fail)?;
        let path = entry.path().map_err(fail)?.into_owned();
        let Ok(Some(whiteout)) = whiteout(&path) else {
            continue;
        };
        let escape = || LayerError::Escape {
            layer: layer.to_owned(),
            entry: path.display().to_string(),
        };
        match whiteout {
            Whiteout::Remove(target) => {
                let Some(parent) =
                    inside(&canonical_root, target.parent()).map_err(|_| escape())?
                else {
                    continue;
                };
                let Some(name) = target.file_name() else {
                    continue;
                };
                remove_any(&parent.join(name)).map_err(fail)?;
            }
            Whiteout::Opaque(dir) => {
                let Some(dir) = inside(&canonical_root, Some(&dir)).map_err(|_| escape())? else {
                    continue;
                };
                if dir.is_dir() {
                    for child in fs::read_dir(&dir).map_err(fail)? {
                        remove_any(&child.map_err(fail)?.path()).map_err(fail)?;
                    }
                }
            }
        }
        stats.whiteouts += 1;
    }

    // Pass two: everything else.
    let mut archive = tar::Archive::new(open(layer).map_err(fail)?);
    archive.set_preserve_permissions(true);
    archive.set_preserve_mtime(true);
    archive.set_preserve_ownerships(preserve_owners);
    archive.set_unpack_xattrs(false);
    archive.set_overwrite(true);
    for entry in archive.entries().map_err(fail)? {
        let mut entry = entry.map_err(fail)?;
        let path = entry.path().map_err(fail)?.into_owned();
        match whiteout(&path) {
            Ok(None) => {}
            // Whiteouts were done; `..` paths are never unpacked.
            Ok(Some(_)) | Err(()) => continue,
        }
        if let Some(relative) = normalize(&path).filter(|p| !p.as_os_str().is_empty()) {
            let is_dir = entry.header().entry_type().is_dir();
            clear_for(&root.join(relative), is_dir).map_err(fail)?;
        }
        stats.bytes += entry.header().size().unwrap_or(0);
        if entry.unpack_in(root).map_err(fail)? {
            stats.entries += 1;
        }
    }
    Ok(stats)
}

/// `dir` resolved (through symlinks) if it exists and stays inside the root;
/// `Ok(None)` if it does not exist; `Err(())` if it escapes.
fn inside(canonical_root: &Path, dir: Option<&Path>) -> Result<Option<PathBuf>, ()> {
    let joined = canonical_root.join(dir.unwrap_or(Path::new("")));
    match joined.canonicalize() {
        Ok(real) if real.starts_with(canonical_root) => Ok(Some(real)),
        Ok(_) => Err(()),
        Err(_) => Ok(None),
    }
}

/// Removes whatever is at `path` (file, symlink or directory tree), without
/// following a final symlink. Nothing there is fine.
fn remove_any(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Makes room for an entry: a directory merges into a directory; anything
/// else replaces what is there.
fn clear_for(path: &Path, entry_is_dir: bool) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() && entry_is_dir => Ok(()),
        Ok(_) => remove_any(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        // A parent that is not a directory (yet): tar sorts it out.
        Err(e) if e.raw_os_error() == Some(nix::libc::ENOTDIR) => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;

    /// A layer built from `(path, Some(content))` files and `(path, None)`
    /// directories, gzip'd when asked.
    pub(crate) fn write_layer(path: &Path, entries: &[(&str, Option<&str>)], gzip: bool) {
        let file = fs::File::create(path).unwrap();
        let out: Box<dyn io::Write> = if gzip {
            Box::new(flate2::write::GzEncoder::new(
                file,
                flate2::Compression::fast(),
            ))
        } else {
            Box::new(file)
        };
        let mut builder = tar::Builder::new(out);
        for (name, content) in entries {
            let mut header = tar::Header::new_gnu();
            header.set_uid(0);
            header.set_gid(0);
            header.set_mtime(1_700_000_000);
            match content {
                Some(text) => {
                    header.set_entry_type(tar::EntryType::Regular);
                    header.set_size(text.len() as u64);
                    header.set_mode(0o644);
                    builder
                        .append_data(&mut header, name, text.as_bytes())
                        .unwrap();
                }
                None => {
                    header.set_entry_type(tar::EntryType::Directory);
                    header.set_size(0);
                    header.set_mode(0o755);
                    builder.append_data(&mut header, name, io::empty()).unwrap();
                }
            }
        }
        builder.into_inner().unwrap().flush().unwrap();
    }

    #[test]
    fn classifies_whiteouts() {
        assert_eq!(whiteout(Path::new("etc/passwd")), Ok(None));
        assert_eq!(
            whiteout(Path::new("./etc/.wh.motd")),
            Ok(Some(Whiteout::Remove("etc/motd".into())))
        );
        assert_eq!(
            whiteout(Path::new("/.wh.bin")),
            Ok(Some(Whiteout::Remove("bin".into())))
        );
        assert_eq!(
            whiteout(Path::new("var/cache/.wh..wh..opq")),
            Ok(Some(Whiteout::Opaque("var/cache".into())))
        );
        assert_eq!(
            whiteout(Path::new(".wh..wh..opq")),
            Ok(Some(Whiteout::Opaque(PathBuf::new())))
        );
        assert_eq!(whiteout(Path::new("a/.wh.")), Ok(None));
        assert_eq!(whiteout(Path::new("a/../../.wh.x")), Err(()));
    }

    #[test]
    fn layers_stack_and_whiteouts_remove_lower_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        fs::create_dir(&root).unwrap();
        let lower = dir.path().join("lower.tar");
        write_layer(
            &lower,
            &[
                ("etc", None),
                ("etc/keep", Some("keep")),
                ("etc/gone", Some("gone")),
                ("cache", None),
                ("cache/a", Some("a")),
                ("cache/sub", None),
                ("cache/sub/b", Some("b")),
                ("olddir", None),
                ("olddir/x", Some("x")),
            ],
            false,
        );
        let upper = dir.path().join("upper.tar.gz");
        // The new cache content comes BEFORE the opaque marker: the marker
        // still only hides the lower layer.
        write_layer(
            &upper,
            &[
                ("cache/new", Some("new")),
                ("cache/.wh..wh..opq", Some("")),
                ("etc/.wh.gone", Some("")),
                ("olddir", Some("now a file")),
                ("etc/keep", Some("changed")),
            ],
            true,
        );

        let first = apply(&root, &lower).unwrap();
        assert_eq!(first.whiteouts, 0);
        assert_eq!(first.entries, 9);
        let second = apply(&root, &upper).unwrap();
        assert_eq!(second.whiteouts, 2);

        assert_eq!(
            fs::read_to_string(root.join("etc/keep")).unwrap(),
            "changed"
        );
        assert!(!root.join("etc/gone").exists());
        assert!(!root.join("etc/.wh.gone").exists());
        assert_eq!(fs::read_to_string(root.join("cache/new")).unwrap(), "new");
        assert!(!root.join("cache/a").exists());
        assert!(!root.join("cache/sub").exists());
        assert!(!root.join("cache/.wh..wh..opq").exists());
        assert_eq!(
            fs::read_to_string(root.join("olddir")).unwrap(),
            "now a file"
        );
    }

    #[test]
    fn whiteouts_through_symlinks_out_of_the_root_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let outside = dir.path().join("outside");
        fs::create_dir_all(&root).unwrap();
        fs::create_dir_all(&outside).unwrap();
        fs::write(outside.join("precious"), "host file").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        let layer = dir.path().join("evil.tar");
        write_layer(&layer, &[("link/.wh.precious", Some(""))], false);
        let err = apply(&root, &layer).unwrap_err();
        assert!(matches!(err, LayerError::Escape { .. }), "{err}");
        assert!(outside.join("precious").exists());
    }
}
