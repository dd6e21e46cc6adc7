//! A template build's context as a client sends it: tar chunks after the
//! header, then `end`, counted against the server's bound and unpacked
//! into a fresh directory that holds only what is safely inside it.
//!
//! What the unpacking refuses (with the entry's name), beyond what the
//! library's own host tar extraction does: entries other than files,
//! directories, symlinks and hard links (devices, FIFOs, GNU sparse files
//! whose size is not what they send), an entry that would replace a
//! symlink, a hard link to outside, and, once everything is unpacked, a
//! symlink that leads out of the directory (an absolute target, or `..`
//! past its top): the build reads the context on the host, and `COPY`
//! follows a symlink it names. Permission bits are kept without setuid,
//! setgid or sticky; owners and extended attributes are not.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tonic::Status;

use airlock_api::limits;
use airlock_api::reason::{self, invalid};
use airlock_api::v1::{self as api, build_template_request::Part, ErrorReason};

/// Chunks in flight between the stream and the unpacking.
const QUEUE: usize = 4;

/// Why a context was refused.
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    #[error("context: entry {entry:?} leads outside the context")]
    Escaping { entry: String },
    #[error("context: entry {entry:?} is a {kind}; a context holds files, directories and links")]
    Kind { entry: String, kind: String },
    #[error("context: not a tar stream")]
    BadTar(#[source] std::io::Error),
    #[error("context: cannot unpack {}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl ContextError {
    fn status(&self) -> Status {
        match self {
            ContextError::Io { .. } => {
                reason::status(ErrorReason::Internal, airlock::error_chain(self))
            }
            // The message already begins with the field.
            _ => {
                let message = airlock::error_chain(self);
                let problem = message.strip_prefix("context: ").unwrap_or(&message);
                invalid("context", problem)
            }
        }
    }
}

/// A received context, removed when dropped.
#[derive(Debug)]
pub struct Context {
    dir: tempfile::TempDir,
    /// Bytes of the tar stream.
    pub bytes: u64,
}

impl Context {
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// `RESOURCE_EXHAUSTED` for a context past `bound` bytes.
pub fn too_large(bound: u64) -> Status {
    reason::status(
        ErrorReason::QuotaExceeded,
        format!(
            "context: the build context is larger than this server takes ({} MiB); \
             leave out what the template file does not COPY",
            bound >> 20
        ),
    )
}

/// Reads the rest of a build's stream (context chunks, then `end`) into a
/// fresh directory under `within`, at most `bound` bytes of tar.
pub async fn receive<S>(mut stream: S, within: &Path, bound: u64) -> Result<Context, Status>
where
    S: Stream<Item = Result<api::BuildTemplateRequest, Status>> + Unpin,
{
    let dir = tempfile::Builder::new()
        .prefix("context-")
        .tempdir_in(within)
        .map_err(|e| {
            reason::status(
                ErrorReason::Internal,
                format!("cannot make a directory in {}: {e}", within.display()),
            )
        })?;
    let target = dir.path().to_owned();
    let (tx, rx) = mpsc::channel::<Bytes>(QUEUE);
    let unpacking = tokio::task::spawn_blocking(move || unpack(ChannelReader::new(rx), &target));
    let mut bytes = 0u64;
    let mut ended = false;
    let mut failure = None;
    while let Some(message) = stream.next().await {
        let part = match message {
            Ok(message) => message.part,
            Err(status) => {
                failure = Some(status);
                break;
            }
        };
        match part {
            Some(Part::Context(chunk)) => {
                if chunk.len() > limits::MAX_CHUNK_BYTES {
                    failure = Some(invalid(
                        "context",
                        format!("more than {} bytes in one message", limits::MAX_CHUNK_BYTES),
                    ));
                    break;
                }
                bytes += chunk.len() as u64;
                if bytes > bound {
                    failure = Some(too_large(bound));
                    break;
                }
                if tx.send(chunk).await.is_err() {
                    break; // the unpacking stopped; its error says why
                }
            }
            Some(Part::End(_)) => {
                ended = true;
                break;
            }
            Some(Part::Header(_)) => {
                failure = Some(invalid("header", "sent twice; a build has one header"));
                break;
            }
            None => {
                failure = Some(invalid("part", "a message with nothing in it"));
                break;
            }
        }
    }
    drop(tx);
    let unpacked = unpacking.await.map_err(|e| {
        reason::status(
            ErrorReason::Internal,
            format!("the context's unpacking: {e}"),
        )
    })?;
    if let Some(status) = failure {
        return Err(status);
    }
    unpacked.map_err(|error| error.status())?;
    if !ended {
        return Err(invalid(
            "end",
            "the stream ended before its `end`: the context was cut short",
        ));
    }
    check_symlinks(dir.path(), dir.path()).map_err(|error| error.status())?;
    Ok(Context { dir, bytes })
}

/// A blocking `Read` over chunks arriving on a channel.
struct ChannelReader {
    rx: mpsc::Receiver<Bytes>,
    current: Bytes,
}

impl ChannelReader {
    fn new(rx: mpsc::Receiver<Bytes>) -> Self {
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

/// Unpacks a tar stream into `target`, entry by entry, refusing what a
/// context may not hold.
fn unpack(reader: impl Read, target: &Path) -> Result<u64, ContextError> {
    use tar::EntryType;
    let mut archive = tar::Archive::new(reader);
    archive.set_preserve_permissions(false);
    archive.set_preserve_ownerships(false);
    archive.set_unpack_xattrs(false);
    archive.set_overwrite(true);
    let mut count = 0;
    for entry in archive.entries().map_err(ContextError::BadTar)? {
        let mut entry = entry.map_err(ContextError::BadTar)?;
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let escaping = || ContextError::Escaping {
            entry: name.clone(),
        };
        let kind = entry.header().entry_type();
        match kind {
            EntryType::Regular
            | EntryType::Continuous
            | EntryType::Directory
            | EntryType::Symlink
            | EntryType::Link => {}
            EntryType::XGlobalHeader => continue,
            other => {
                return Err(ContextError::Kind {
                    entry: name,
                    kind: describe(other),
                })
            }
        }
        let relative = entry.path().map_err(ContextError::BadTar)?.into_owned();
        let dest = inside(target, &relative).ok_or_else(escaping)?;
        if dest == target {
            continue;
        }
        if through_symlink(target, &dest)
            || std::fs::symlink_metadata(&dest).is_ok_and(|m| m.file_type().is_symlink())
        {
            return Err(escaping());
        }
        match kind {
            EntryType::Link => {
                let link = entry
                    .link_name()
                    .map_err(ContextError::BadTar)?
                    .ok_or_else(escaping)?;
                let source = inside(target, &link).ok_or_else(escaping)?;
                let is_file = std::fs::symlink_metadata(&source).is_ok_and(|m| m.is_file());
                if through_symlink(target, &source) || !is_file {
                    return Err(escaping());
                }
            }
            EntryType::Symlink => {
                let link = entry
                    .link_name()
                    .map_err(ContextError::BadTar)?
                    .ok_or_else(escaping)?;
                if link.has_root() {
                    return Err(escaping());
                }
            }
            _ => {}
        }
        entry.unpack_in(target).map_err(|source| ContextError::Io {
            path: dest.clone(),
            source,
        })?;
        count += 1;
    }
    Ok(count)
}

fn describe(kind: tar::EntryType) -> String {
    use tar::EntryType;
    match kind {
        EntryType::Char => "character device".into(),
        EntryType::Block => "block device".into(),
        EntryType::Fifo => "FIFO".into(),
        EntryType::GNUSparse => "GNU sparse file".into(),
        other => format!("tar entry of type {:?}", other.as_byte() as char),
    }
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

/// Refuses a symlink under `dir` that leads outside `root`: one whose
/// target resolves elsewhere, or (dangling) whose target's words climb
/// past `root`.
fn check_symlinks(root: &Path, dir: &Path) -> Result<(), ContextError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| ContextError::Io { path, source }
    };
    let real_root = std::fs::canonicalize(root).map_err(io(root))?;
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        let path = entry.path();
        let kind = entry.file_type().map_err(io(&path))?;
        if kind.is_dir() {
            check_symlinks(root, &path)?;
        } else if kind.is_symlink() {
            let name = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .display()
                .to_string();
            let inside_root = match std::fs::canonicalize(&path) {
                Ok(real) => real.starts_with(&real_root),
                Err(_) => {
                    let target = std::fs::read_link(&path).map_err(io(&path))?;
                    let from = path.parent().unwrap_or(root);
                    lexically_inside(root, &from.join(target))
                }
            };
            if !inside_root {
                return Err(ContextError::Escaping { entry: name });
            }
        }
    }
    Ok(())
}

/// Whether `path`, its `..` taken as words, stays under `root`.
fn lexically_inside(root: &Path, path: &Path) -> bool {
    let Ok(rest) = path.strip_prefix(root) else {
        return false;
    };
    let mut depth = 0usize;
    for part in rest.components() {
        match part {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir => match depth.checked_sub(1) {
                Some(up) => depth = up,
                None => return false,
            },
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    true
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use airlock_api::reason::{field_of, reason_of};

    fn header(name: &str, kind: tar::EntryType, size: u64) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(0o644);
        h.set_size(size);
        let raw = &mut h.as_old_mut().name;
        raw[..name.len()].copy_from_slice(name.as_bytes());
        h.set_cksum();
        h
    }

    fn file(builder: &mut tar::Builder<Vec<u8>>, name: &str, data: &[u8]) {
        let h = header(name, tar::EntryType::Regular, data.len() as u64);
        builder.append(&h, data).unwrap();
    }

    fn link(builder: &mut tar::Builder<Vec<u8>>, name: &str, target: &str) {
        let mut h = header(name, tar::EntryType::Symlink, 0);
        h.set_link_name(target).unwrap();
        h.set_cksum();
        builder.append(&h, &b""[..]).unwrap();
    }

    fn messages(tar: Vec<u8>, end: bool) -> Vec<Result<api::BuildTemplateRequest, Status>> {
        let mut out: Vec<_> = tar
            .chunks(1000)
            .map(|chunk| {
                Ok(api::BuildTemplateRequest {
                    part: Some(Part::Context(Bytes::copy_from_slice(chunk))),
                })
            })
            .collect();
        if end {
            out.push(Ok(api::BuildTemplateRequest {
                part: Some(Part::End(api::BuildTemplateEnd {})),
            }));
        }
        out
    }

    /// What `receive` makes of `tar` and its `end`, with the directory it
    /// was made in.
    async fn take(tar: Vec<u8>, bound: u64) -> (tempfile::TempDir, Result<Context, Status>) {
        let within = tempfile::tempdir().unwrap();
        let taken = receive(
            futures::stream::iter(messages(tar, true)),
            within.path(),
            bound,
        )
        .await;
        (within, taken)
    }

    #[tokio::test]
    async fn files_directories_and_inner_links_arrive() {
        let mut b = tar::Builder::new(Vec::new());
        file(&mut b, "app/main.py", b"print(1)\n");
        link(&mut b, "app/link.py", "main.py");
        link(&mut b, "up", "app/../app");
        let (_within, context) = take(b.into_inner().unwrap(), 1 << 20).await;
        let context = context.unwrap();
        let read = std::fs::read(context.path().join("app/link.py")).unwrap();
        assert_eq!(read, b"print(1)\n");
        assert!(context.bytes > 0);
    }

    #[tokio::test]
    async fn an_empty_context_is_an_empty_directory() {
        let within = tempfile::tempdir().unwrap();
        let context = receive(
            futures::stream::iter(messages(Vec::new(), true)),
            within.path(),
            10,
        )
        .await
        .unwrap();
        assert_eq!(std::fs::read_dir(context.path()).unwrap().count(), 0);
    }

    #[tokio::test]
    async fn links_out_of_the_context_are_refused_by_name() {
        for (name, target) in [
            ("abs", "/etc/passwd"),
            ("up", "../../etc/passwd"),
            ("dangling", "../nowhere"),
        ] {
            let mut b = tar::Builder::new(Vec::new());
            link(&mut b, name, target);
            let refused = take(b.into_inner().unwrap(), 1 << 20).await.1.unwrap_err();
            assert_eq!(field_of(&refused), Some("context"), "{refused:?}");
            assert!(refused.message().contains(name), "{refused:?}");
        }
        // A link made to look inside, then a file written through it.
        let mut b = tar::Builder::new(Vec::new());
        link(&mut b, "out", "/tmp");
        file(&mut b, "out/evil", b"x");
        let refused = take(b.into_inner().unwrap(), 1 << 20).await.1.unwrap_err();
        assert_eq!(field_of(&refused), Some("context"), "{refused:?}");
    }

    #[tokio::test]
    async fn devices_fifos_and_escaping_names_are_refused() {
        for kind in [tar::EntryType::Char, tar::EntryType::Fifo] {
            let mut b = tar::Builder::new(Vec::new());
            b.append(&header("dev", kind, 0), &b""[..]).unwrap();
            let refused = take(b.into_inner().unwrap(), 1 << 20).await.1.unwrap_err();
            assert!(refused.message().contains("\"dev\""), "{refused:?}");
        }
        let mut b = tar::Builder::new(Vec::new());
        file(&mut b, "../evil", b"x");
        let refused = take(b.into_inner().unwrap(), 1 << 20).await.1.unwrap_err();
        assert!(refused.message().contains("leads outside"), "{refused:?}");
    }

    #[tokio::test]
    async fn a_context_past_the_bound_or_cut_short_is_refused() {
        let mut b = tar::Builder::new(Vec::new());
        file(&mut b, "big", &vec![7u8; 8192]);
        let tar = b.into_inner().unwrap();
        let refused = take(tar.clone(), 4096).await.1.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert_eq!(reason_of(&refused), Some(ErrorReason::QuotaExceeded));
        assert!(refused.message().starts_with("context:"), "{refused:?}");
        let within = tempfile::tempdir().unwrap();
        let cut = receive(
            futures::stream::iter(messages(tar, false)),
            within.path(),
            1 << 20,
        )
        .await
        .unwrap_err();
        assert_eq!(field_of(&cut), Some("end"), "{cut:?}");
        assert_eq!(std::fs::read_dir(within.path()).unwrap().count(), 0);
    }

    #[tokio::test]
    async fn setuid_bits_are_dropped() {
        use std::os::unix::fs::PermissionsExt;
        let mut b = tar::Builder::new(Vec::new());
        let mut h = header("tool", tar::EntryType::Regular, 2);
        h.set_mode(0o4755);
        h.set_cksum();
        b.append(&h, &b"#!"[..]).unwrap();
        let (_within, context) = take(b.into_inner().unwrap(), 1 << 20).await;
        let context = context.unwrap();
        let mode = std::fs::metadata(context.path().join("tool"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o755);
    }
}
