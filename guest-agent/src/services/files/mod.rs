//! The `Files` service: file contents, metadata, tree operations, directory
//! transfer and change notification in the guest.
//!
//! - [`io`]: `ReadFile` and `WriteFile` (atomic: temporary file, fsync, rename).
//! - [`tree`]: `Stat`, `ListDir`, `MakeDir`, `Remove`, `Rename`, `Chmod`,
//!   `Chown`, `Symlink`, `Copy`.
//! - [`archive`]: `UploadTar`, `DownloadTar` and `DownloadPaths`.
//! - [`changes`]: `SnapshotTree` and `TreeChanges`, with the snapshots the
//!   service keeps between them.
//! - [`watch`]: `Watch` over inotify.
//! - [`access`]: absolute paths and the optional `user` a call runs as.
//! - [`error`]: [`FilesError`] and its gRPC codes.
//!
//! Every stream goes through a bounded channel, so memory use does not grow
//! with file size. Blocking filesystem work runs on tokio's blocking pool.

pub mod access;
pub mod archive;
pub mod changes;
pub mod error;
pub mod io;
pub mod tree;
pub mod watch;

use std::pin::Pin;

use std::sync::Arc;

use airlock_proto::contract::changes::{MAX_CHANGES, MAX_ENTRIES};
use airlock_proto::v1::{
    files_server, upload_tar_request, ChmodRequest, ChownRequest, CopyRequest,
    DownloadPathsRequest, Empty, FileChunk, FileInfo, ListDirRequest, MakeDirRequest, PathRequest,
    ReadFileRequest, RemoveRequest, RenameRequest, SnapshotTreeRequest, SnapshotTreeResponse,
    SymlinkRequest, TreeChangesChunk, TreeChangesRequest, TreeChangesSummary, UploadTarRequest,
    UploadTarResponse, WatchEvent, WatchRequest, WriteFileRequest, WriteFileResponse,
};
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use self::access::{absolute, Actor};
pub use self::error::FilesError;

/// A stream of messages to the client.
pub type Outgoing<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// Changes per `TreeChanges` message.
const CHANGES_PER_CHUNK: usize = 512;

/// The `Files` gRPC service. Each call stands alone, but for the snapshots
/// `SnapshotTree` leaves for `TreeChanges`.
#[derive(Debug, Default, Clone)]
pub struct FilesService {
    snapshots: Arc<changes::SnapshotStore>,
}

impl FilesService {
    /// A new service.
    pub fn new() -> Self {
        FilesService::default()
    }
}

/// A request's limit: 0 or past the maximum is the maximum.
fn limit(asked: u64, max: u64) -> u64 {
    if asked == 0 {
        max
    } else {
        asked.min(max)
    }
}

/// Runs blocking filesystem work on the blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, FilesError> + Send + 'static,
) -> Result<T, Status> {
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result.map_err(Status::from),
        Err(e) => Err(Status::from(FilesError::Worker(e.to_string()))),
    }
}

fn outgoing<T: Send + 'static>(rx: mpsc::Receiver<Result<T, Status>>) -> Outgoing<T> {
    Box::pin(ReceiverStream::new(rx))
}

#[tonic::async_trait]
impl files_server::Files for FilesService {
    type ReadFileStream = Outgoing<FileChunk>;
    type ListDirStream = Outgoing<FileInfo>;
    type DownloadTarStream = Outgoing<FileChunk>;
    type WatchStream = Outgoing<WatchEvent>;
    type TreeChangesStream = Outgoing<TreeChangesChunk>;
    type DownloadPathsStream = Outgoing<FileChunk>;

    #[tracing::instrument(skip_all, fields(path = %request.get_ref().path))]
    async fn read_file(
        &self,
        request: Request<ReadFileRequest>,
    ) -> Result<Response<Self::ReadFileStream>, Status> {
        let r = request.into_inner();
        let rx = io::read(&r.path, r.offset, r.length).await?;
        Ok(Response::new(outgoing(rx)))
    }

    async fn write_file(
        &self,
        request: Request<Streaming<WriteFileRequest>>,
    ) -> Result<Response<WriteFileResponse>, Status> {
        let bytes_written = io::write(request.into_inner()).await?;
        Ok(Response::new(WriteFileResponse { bytes_written }))
    }

    async fn stat(&self, request: Request<PathRequest>) -> Result<Response<FileInfo>, Status> {
        let path = absolute(&request.into_inner().path)?;
        Ok(Response::new(blocking(move || tree::stat(&path)).await?))
    }

    async fn list_dir(
        &self,
        request: Request<ListDirRequest>,
    ) -> Result<Response<Self::ListDirStream>, Status> {
        let r = request.into_inner();
        let path = absolute(&r.path)?;
        let (tx, rx) = mpsc::channel(io::QUEUE * 16);
        // Fail the call itself when the directory is unusable; later
        // errors end the stream.
        let first = std::fs::metadata(&path).map_err(|e| FilesError::io("list", &path, e))?;
        if !first.is_dir() {
            return Err(FilesError::io(
                "list",
                &path,
                std::io::Error::from_raw_os_error(nix::libc::ENOTDIR),
            )
            .into());
        }
        tokio::task::spawn_blocking(move || {
            if let Err(e) = tree::list(&path, r.depth, &tx) {
                let _ = tx.blocking_send(Err(e.into()));
            }
        });
        Ok(Response::new(outgoing(rx)))
    }

    async fn make_dir(&self, request: Request<MakeDirRequest>) -> Result<Response<Empty>, Status> {
        let r = request.into_inner();
        let path = absolute(&r.path)?;
        let actor = Actor::resolve(&r.user)?;
        let mode = if r.mode == 0 { 0o755 } else { r.mode };
        blocking(move || {
            if r.parents {
                tree::make_dirs(&path, mode, &actor)
            } else {
                tree::make_dir(&path, mode, &actor)
            }
        })
        .await?;
        Ok(Response::new(Empty {}))
    }

    async fn remove(&self, request: Request<RemoveRequest>) -> Result<Response<Empty>, Status> {
        let r = request.into_inner();
        let path = absolute(&r.path)?;
        blocking(move || tree::remove(&path, r.recursive)).await?;
        Ok(Response::new(Empty {}))
    }

    async fn rename(&self, request: Request<RenameRequest>) -> Result<Response<Empty>, Status> {
        let r = request.into_inner();
        let (from, to) = (absolute(&r.from)?, absolute(&r.to)?);
        blocking(move || tree::rename(&from, &to)).await?;
        Ok(Response::new(Empty {}))
    }

    async fn chmod(&self, request: Request<ChmodRequest>) -> Result<Response<Empty>, Status> {
        let r = request.into_inner();
        let path = absolute(&r.path)?;
        blocking(move || tree::chmod(&path, r.mode)).await?;
        Ok(Response::new(Empty {}))
    }

    async fn chown(&self, request: Request<ChownRequest>) -> Result<Response<Empty>, Status> {
        let r = request.into_inner();
        let path = absolute(&r.path)?;
        let actor = Actor::resolve(&r.user)?;
        if actor.ids().is_none() {
            return Err(Status::invalid_argument("chown needs a user"));
        }
        blocking(move || actor.own(&path)).await?;
        Ok(Response::new(Empty {}))
    }

    async fn symlink(&self, request: Request<SymlinkRequest>) -> Result<Response<Empty>, Status> {
        let r = request.into_inner();
        let link = absolute(&r.link)?;
        blocking(move || tree::symlink(&r.target, &link)).await?;
        Ok(Response::new(Empty {}))
    }

    async fn copy(&self, request: Request<CopyRequest>) -> Result<Response<Empty>, Status> {
        let r = request.into_inner();
        let (from, to) = (absolute(&r.from)?, absolute(&r.to)?);
        blocking(move || tree::copy(&from, &to)).await?;
        Ok(Response::new(Empty {}))
    }

    async fn upload_tar(
        &self,
        request: Request<Streaming<UploadTarRequest>>,
    ) -> Result<Response<UploadTarResponse>, Status> {
        let mut stream = request.into_inner();
        let header = match stream.next().await {
            Some(Ok(UploadTarRequest {
                kind: Some(upload_tar_request::Kind::Header(h)),
            })) => h,
            Some(Err(status)) => return Err(status),
            _ => return Err(FilesError::MissingHeader.into()),
        };
        let target = absolute(&header.path)?;
        let actor = Actor::resolve(&header.user)?;
        let (tx, rx) = mpsc::channel(io::QUEUE);
        let extractor = tokio::task::spawn_blocking(move || {
            archive::extract(archive::ChannelReader::new(rx), &target, &actor)
        });
        let mut feed_error = None;
        while let Some(message) = stream.next().await {
            match message {
                Ok(UploadTarRequest {
                    kind: Some(upload_tar_request::Kind::Data(data)),
                }) => {
                    if tx.send(data).await.is_err() {
                        break; // the extractor stopped: its error says why
                    }
                }
                Ok(UploadTarRequest {
                    kind: Some(upload_tar_request::Kind::Header(_)),
                }) => {
                    feed_error = Some(FilesError::DuplicateHeader);
                    break;
                }
                Ok(UploadTarRequest { kind: None }) => {}
                Err(status) => {
                    feed_error = Some(FilesError::Stream(status.message().to_owned()));
                    break;
                }
            }
        }
        drop(tx);
        let extracted = extractor
            .await
            .map_err(|e| Status::from(FilesError::Worker(e.to_string())))?;
        if let Some(e) = feed_error {
            return Err(e.into());
        }
        Ok(Response::new(UploadTarResponse {
            entries: extracted?,
        }))
    }

    async fn download_tar(
        &self,
        request: Request<PathRequest>,
    ) -> Result<Response<Self::DownloadTarStream>, Status> {
        let path = absolute(&request.into_inner().path)?;
        let meta = std::fs::metadata(&path).map_err(|e| FilesError::io("archive", &path, e))?;
        if !meta.is_dir() {
            return Err(FilesError::io(
                "archive",
                &path,
                std::io::Error::from_raw_os_error(nix::libc::ENOTDIR),
            )
            .into());
        }
        let (tx, rx) = mpsc::channel(io::QUEUE);
        tokio::task::spawn_blocking(move || {
            let errors = tx.clone();
            let writer = archive::ChannelWriter::new(tx, |data| Ok(FileChunk { data }));
            if let Err(e) = archive::archive(&path, writer) {
                let _ = errors.blocking_send(Err(e.into()));
            }
        });
        Ok(Response::new(outgoing(rx)))
    }

    async fn watch(
        &self,
        request: Request<WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let r = request.into_inner();
        let path = absolute(&r.path)?;
        let rx = watch::start(&path, r.recursive)?;
        Ok(Response::new(outgoing(rx)))
    }

    async fn snapshot_tree(
        &self,
        request: Request<SnapshotTreeRequest>,
    ) -> Result<Response<SnapshotTreeResponse>, Status> {
        let r = request.into_inner();
        let roots = changes::roots(&r.roots)?;
        let max = limit(r.max_entries, MAX_ENTRIES);
        let snapshot = blocking(move || Ok(changes::snapshot(&roots, max))).await?;
        let (entries, truncated) = (snapshot.len() as u64, snapshot.truncated());
        let id = self.snapshots.insert(snapshot);
        tracing::info!(id, entries, truncated, "snapshot taken");
        Ok(Response::new(SnapshotTreeResponse {
            id,
            entries,
            truncated,
        }))
    }

    async fn tree_changes(
        &self,
        request: Request<TreeChangesRequest>,
    ) -> Result<Response<Self::TreeChangesStream>, Status> {
        let r = request.into_inner();
        let snapshot = self.snapshots.get(&r.snapshot_id)?;
        if r.release {
            self.snapshots.release(&r.snapshot_id);
        }
        let max_changes = limit(r.max_changes, MAX_CHANGES);
        let (tx, rx) = mpsc::channel(io::QUEUE);
        tokio::task::spawn_blocking(move || {
            let mut chunk = Vec::with_capacity(CHANGES_PER_CHUNK);
            let summary = changes::diff(&snapshot, MAX_ENTRIES, max_changes, |change| {
                chunk.push(change);
                if chunk.len() < CHANGES_PER_CHUNK {
                    return true;
                }
                let changes = std::mem::replace(&mut chunk, Vec::with_capacity(CHANGES_PER_CHUNK));
                let message = TreeChangesChunk {
                    changes,
                    summary: None,
                };
                tx.blocking_send(Ok(message)).is_ok()
            });
            tracing::info!(
                scanned = summary.scanned,
                reported = summary.reported,
                truncated = summary.truncated,
                "changes compared"
            );
            let last = TreeChangesChunk {
                changes: chunk,
                summary: Some(TreeChangesSummary {
                    truncated: summary.truncated,
                    scanned: summary.scanned,
                    reported: summary.reported,
                }),
            };
            let _ = tx.blocking_send(Ok(last));
        });
        Ok(Response::new(outgoing(rx)))
    }

    async fn download_paths(
        &self,
        request: Request<DownloadPathsRequest>,
    ) -> Result<Response<Self::DownloadPathsStream>, Status> {
        let r = request.into_inner();
        if r.paths.is_empty() || r.paths.len() as u64 > MAX_CHANGES {
            return Err(FilesError::PathCount(r.paths.len()).into());
        }
        let paths = r
            .paths
            .iter()
            .map(|p| absolute(p))
            .collect::<Result<Vec<_>, _>>()?;
        let (tx, rx) = mpsc::channel(io::QUEUE);
        tokio::task::spawn_blocking(move || {
            let errors = tx.clone();
            let writer = archive::ChannelWriter::new(tx, |data| Ok(FileChunk { data }));
            if let Err(e) = archive::archive_paths(&paths, writer) {
                let _ = errors.blocking_send(Err(e.into()));
            }
        });
        Ok(Response::new(outgoing(rx)))
    }
}
