//! Whole directories between host and guest as tar streams. The host side
//! of each runs the `tar` crate on the blocking pool behind a bounded
//! channel; the agent does the same on its side.

use std::path::Path;

use airlock_proto::v1::{upload_tar_request, PathRequest, UploadTarHeader, UploadTarRequest};
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::archive::{self, ChannelReader, ChannelWriter};
use super::{guest, Files, FsError};
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
            .map_err(|e| Error::from(FsError::Worker(e.to_string())))??;
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
        let mut stream = self
            .client()?
            .download_tar(PathRequest { path })
            .await
            .map_err(|s| Error::agent("Files.DownloadTar", s))?
            .into_inner();
        let host_dir = host_dir.as_ref().to_owned();
        let (tx, rx) = mpsc::channel(QUEUE);
        let extractor = tokio::task::spawn_blocking(move || {
            archive::extract(ChannelReader::new(rx), &host_dir)
        });
        let mut failure = None;
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(chunk) => {
                    if tx.send(chunk.data).await.is_err() {
                        break; // the extractor stopped; its error says why
                    }
                }
                Err(s) => {
                    failure = Some(Error::agent("Files.DownloadTar", s));
                    break;
                }
            }
        }
        drop(tx);
        let extracted = extractor
            .await
            .map_err(|e| Error::from(FsError::Worker(e.to_string())))?;
        if let Some(e) = failure {
            return Err(e);
        }
        Ok(extracted?)
    }
}
