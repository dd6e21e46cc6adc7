//! Host directories as tar streams, for a program that carries them itself
//! (a client of the server's API, which streams tar bytes rather than
//! naming host paths): [`pack`] a directory into chunks, [`unpack`] chunks
//! into a directory. Both run the `tar` crate on the blocking pool behind
//! bounded channels, and unpacking refuses entries that would land outside
//! the target directory, exactly as [`Files::download_dir`](super::Files::download_dir)
//! does.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::archive::{self, ChannelReader, ChannelWriter};
use super::FsError;

/// Chunks in flight.
const QUEUE: usize = 4;

/// The host directory `dir` as a tar stream (paths relative to it,
/// symlinks kept), in chunks; a failure to read the tree is the stream's
/// last item.
pub fn pack(dir: PathBuf) -> impl Stream<Item = Result<Bytes, FsError>> + Send + 'static {
    let (tx, rx) = mpsc::channel(QUEUE);
    let builder =
        tokio::task::spawn_blocking(move || archive::archive(&dir, ChannelWriter::new(tx)));
    let chunks = ReceiverStream::new(rx).map(Ok);
    let end = futures::stream::once(async move {
        match builder.await {
            Ok(Ok(())) => None,
            Ok(Err(error)) => Some(Err(error)),
            Err(joined) => Some(Err(FsError::Worker(joined))),
        }
    })
    .filter_map(futures::future::ready);
    chunks.chain(end)
}

/// Extracts the tar stream `chunks` into the host directory `dir` (created
/// if missing), refusing escaping entries; returns the number of entries.
/// A failed item of the stream stops it and is the error.
pub async fn unpack<S, E>(mut chunks: S, dir: &Path) -> Result<u64, FsError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let target = dir.to_owned();
    let (tx, rx) = mpsc::channel(QUEUE);
    let extractor =
        tokio::task::spawn_blocking(move || archive::extract(ChannelReader::new(rx), &target));
    let mut failure = None;
    while let Some(chunk) = chunks.next().await {
        match chunk {
            Ok(chunk) => {
                if tx.send(chunk).await.is_err() {
                    break; // the extractor stopped; its error says why
                }
            }
            Err(error) => {
                failure = Some(FsError::Stream(error.to_string()));
                break;
            }
        }
    }
    drop(tx);
    let extracted = extractor.await.map_err(FsError::Worker)?;
    if let Some(error) = failure {
        return Err(error);
    }
    extracted
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_tree_packs_and_unpacks_with_its_modes_and_symlinks() {
        use std::os::unix::fs::PermissionsExt;
        let from = tempfile::tempdir().unwrap();
        std::fs::create_dir(from.path().join("sub")).unwrap();
        std::fs::write(from.path().join("sub/a.sh"), b"echo hi").unwrap();
        std::fs::set_permissions(
            from.path().join("sub/a.sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        std::os::unix::fs::symlink("sub/a.sh", from.path().join("link")).unwrap();
        let to = tempfile::tempdir().unwrap();
        let packed = Box::pin(pack(from.path().to_owned()));
        let entries = unpack(packed, &to.path().join("out")).await.unwrap();
        assert!(entries >= 3, "{entries}");
        let out = to.path().join("out");
        assert_eq!(std::fs::read(out.join("sub/a.sh")).unwrap(), b"echo hi");
        let mode = std::fs::metadata(out.join("sub/a.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        assert_eq!(
            std::fs::read_link(out.join("link")).unwrap(),
            Path::new("sub/a.sh")
        );
    }

    #[tokio::test]
    async fn packing_a_file_is_refused_and_an_escaping_entry_is_too() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let mut packed = Box::pin(pack(file.path().to_owned()));
        let last = packed.next().await.unwrap();
        assert!(matches!(last, Err(FsError::NotADirectory(_))), "{last:?}");

        let mut header = tar::Header::new_gnu();
        header.set_size(1);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        let name = b"../escape";
        header.as_old_mut().name[..name.len()].copy_from_slice(name);
        header.set_cksum();
        let mut bytes = header.as_bytes().to_vec();
        bytes.extend_from_slice(b"x");
        bytes.resize(1024 + 1024, 0);
        let to = tempfile::tempdir().unwrap();
        let chunks = futures::stream::iter([Ok::<_, String>(Bytes::from(bytes))]);
        let refused = unpack(chunks, to.path()).await.unwrap_err();
        assert!(
            matches!(refused, FsError::EscapingEntry { .. }),
            "{refused}"
        );
    }
}
