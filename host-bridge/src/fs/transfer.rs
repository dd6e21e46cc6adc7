//! Whole directories between host and guest as tar streams. The host side
//! of each runs the `tar` crate on the blocking pool behind a bounded
//! channel; the agent does the same on its side.

use std::path::Path;

use airlock_proto::v1::{upload_tar_request, PathRequest, UploadTarHeader, UploadTarRequest};
use bytes::Bytes;
use futures::StreamExt;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::archive::{self, ChannelReader, ChannelWriter};
use super::{guest, Files, FsError, ReadStream, CHUNK};
use crate::error::{Error, Result};

/// Chunks in flight per direction.
const QUEUE: usize = 4;

impl Files {
    /// Copies the host directory `host_dir` into the guest directory
    /// `guest_dir` (created if missing), keeping modes and symlinks;
    /// returns the number of entries. Not atomic: entries already
    /// extracted stay if the transfer fails.
    pub async fn upload_dir(
        &self,
        host_dir: impl AsRef<Path>,
        guest_dir: impl AsRef<Path>,
    ) -> Result<u64> {
        let header = UploadTarHeader {
            path: guest(guest_dir.as_ref())?,
            user: String::new(),
        };
        let mut client = self.client()?;
        let host_dir = host_dir.as_ref().to_owned();
        let (tx, rx) = mpsc::channel(QUEUE);
        let builder = tokio::task::spawn_blocking(move || {
            archive::archive(&host_dir, ChannelWriter::new(tx))
        });
        let first = UploadTarRequest {
            kind: Some(upload_tar_request::Kind::Header(header)),
        };
        let data = ReceiverStream::new(rx).map(|data| UploadTarRequest {
            kind: Some(upload_tar_request::Kind::Data(data)),
        });
        let answer = client
            .upload_tar(futures::stream::iter([first]).chain(data))
            .await;
        builder
            .await
            .map_err(|e| Error::from(FsError::Worker(e)))??;
        Ok(answer
            .map_err(|s| Error::agent("Files.UploadTar", s))?
            .into_inner()
            .entries)
    }

    /// Extracts a tar stream read from `reader` (an existing archive, say)
    /// into the guest directory `guest_dir`, created if missing; returns
    /// the number of entries. The agent refuses entries that would land
    /// outside `guest_dir` (INVALID_ARGUMENT, naming the entry).
    pub async fn upload_tar(
        &self,
        reader: impl AsyncRead + Send + Unpin + 'static,
        guest_dir: impl AsRef<Path>,
    ) -> Result<u64> {
        let header = UploadTarHeader {
            path: guest(guest_dir.as_ref())?,
            user: String::new(),
        };
        let first = UploadTarRequest {
            kind: Some(upload_tar_request::Kind::Header(header)),
        };
        let data = futures::stream::unfold(Some(reader), |reader| async move {
            let mut reader = reader?;
            let mut buf = Vec::with_capacity(CHUNK);
            match (&mut reader).take(CHUNK as u64).read_to_end(&mut buf).await {
                Ok(0) => None,
                Ok(_) => Some((Ok(Bytes::from(buf)), Some(reader))),
                Err(e) => Some((Err(e), None)),
            }
        });
        let failure = std::sync::Arc::new(std::sync::Mutex::new(None));
        let slot = std::sync::Arc::clone(&failure);
        let data = data
            .take_while(move |item| {
                let ok = item.is_ok();
                if let (Err(e), Ok(mut slot)) = (item, slot.lock()) {
                    *slot = Some(std::io::Error::new(e.kind(), e.to_string()));
                }
                futures::future::ready(ok)
            })
            .filter_map(|item| futures::future::ready(item.ok()))
            .map(|data| UploadTarRequest {
                kind: Some(upload_tar_request::Kind::Data(data)),
            });
        let answer = self
            .client()?
            .upload_tar(futures::stream::iter([first]).chain(data))
            .await;
        if let Some(e) = failure.lock().ok().and_then(|mut f| f.take()) {
            return Err(FsError::local("read", "(tar source)", e).into());
        }
        Ok(answer
            .map_err(|s| Error::agent("Files.UploadTar", s))?
            .into_inner()
            .entries)
    }

    /// Copies the guest directory `guest_dir` into the host directory
    /// `host_dir` (created if missing), keeping modes and symlinks and
    /// refusing entries that would land outside it; returns the number of
    /// entries.
    pub async fn download_dir(
        &self,
        guest_dir: impl AsRef<Path>,
        host_dir: impl AsRef<Path>,
    ) -> Result<u64> {
        let path = guest(guest_dir.as_ref())?;
        let stream = self
            .client()?
            .download_tar(PathRequest { path })
            .await
            .map_err(|s| Error::agent("Files.DownloadTar", s))?
            .into_inner();
        extract_stream("Files.DownloadTar", stream, host_dir.as_ref()).await
    }

    /// The guest file or directory `guest_path` as a tar stream (modes and
    /// symlinks kept), for a caller that passes it on rather than
    /// extracting it on this host.
    pub async fn download_tar(&self, guest_path: impl AsRef<Path>) -> Result<ReadStream> {
        let path = guest(guest_path.as_ref())?;
        let stream = self
            .client()?
            .download_tar(PathRequest { path })
            .await
            .map_err(|s| Error::agent("Files.DownloadTar", s))?
            .into_inner();
        Ok(ReadStream::new("Files.DownloadTar", stream))
    }
}

/// Extracts the tar stream of `call` into `host_dir` (created if missing)
/// on the blocking pool, refusing escaping entries; returns the number of
/// entries.
pub(super) async fn extract_stream(
    call: &'static str,
    mut stream: tonic::Streaming<airlock_proto::v1::FileChunk>,
    host_dir: &Path,
) -> Result<u64> {
    let host_dir = host_dir.to_owned();
    let (tx, rx) = mpsc::channel(QUEUE);
    let extractor =
        tokio::task::spawn_blocking(move || archive::extract(ChannelReader::new(rx), &host_dir));
    let mut failure = None;
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(chunk) => {
                if tx.send(chunk.data).await.is_err() {
                    break; // the extractor stopped; its error says why
                }
            }
            Err(s) => {
                failure = Some(Error::agent(call, s));
                break;
            }
        }
    }
    drop(tx);
    let extracted = extractor
        .await
        .map_err(|e| Error::from(FsError::Worker(e)))?;
    if let Some(e) = failure {
        return Err(e);
    }
    Ok(extracted?)
}
