//! `airlock.api.v1.Files`: the guest's files, streamed both ways in chunks
//! with no limit on a file's size, and change trackers kept per sandbox.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use futures::{Stream, StreamExt, TryStreamExt};
use tokio::io::AsyncRead;
use tonic::{Request, Response, Status, Streaming};

use airlock::fs::{ChangeTracker, ReadStream, WriteOptions};
use airlock_api::limits;
use airlock_api::reason::{self, invalid};
use airlock_api::v1::{self as api, files_server, ErrorReason};

use super::Services;
use crate::convert;
use crate::principal::Principal;
use crate::status::error_status;
use crate::validate;

/// Trackers one sandbox may have at once.
const MAX_TRACKERS: usize = 16;
/// Where a tracker looks when the request names no roots.
const DEFAULT_ROOTS: [&str; 2] = ["/root", "/tmp"];

type Chunks = Pin<Box<dyn Stream<Item = Result<api::FileChunk, Status>> + Send>>;

/// Change trackers by id, each with its sandbox.
#[derive(Debug, Default)]
pub struct Trackers {
    by_id: Mutex<HashMap<String, (String, ChangeTracker)>>,
}

impl Trackers {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, (String, ChangeTracker)>> {
        self.by_id.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn add(&self, sandbox: &str, tracker: ChangeTracker) -> Result<String, Status> {
        let mut trackers = self.lock();
        if trackers.values().filter(|(s, _)| s == sandbox).count() >= MAX_TRACKERS {
            return Err(reason::status(
                ErrorReason::GuestExhausted,
                format!("sandbox {sandbox} has {MAX_TRACKERS} change trackers; stop one first"),
            ));
        }
        let id = format!("tracker-{:016x}", random_u64());
        trackers.insert(id.clone(), (sandbox.to_owned(), tracker));
        Ok(id)
    }

    fn get(&self, sandbox: &str, id: &str) -> Result<ChangeTracker, Status> {
        self.lock()
            .get(id)
            .filter(|(s, _)| s == sandbox)
            .map(|(_, tracker)| tracker.clone())
            .ok_or_else(|| no_tracker(id))
    }

    fn take(&self, sandbox: &str, id: &str) -> Result<ChangeTracker, Status> {
        let mut trackers = self.lock();
        match trackers.get(id) {
            Some((s, _)) if s == sandbox => Ok(trackers
                .remove(id)
                .map(|(_, tracker)| tracker)
                .ok_or_else(|| no_tracker(id))?),
            _ => Err(no_tracker(id)),
        }
    }

    /// Forgets a sandbox's trackers (it was killed).
    pub fn forget_sandbox(&self, sandbox: &str) {
        self.lock().retain(|_, (s, _)| s != sandbox);
    }
}

fn no_tracker(id: &str) -> Status {
    reason::status(ErrorReason::NotFound, format!("no change tracker {id}"))
}

fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}

/// A guest stream as the API's chunks.
fn chunks(stream: ReadStream) -> Chunks {
    Box::pin(stream.map(|chunk| {
        chunk
            .map(|data| api::FileChunk { data })
            .map_err(|error| error_status(&error))
    }))
}

/// The data messages of a client stream (after its header) as a reader;
/// a message that is not data, or too large, fails the read.
fn reader<T, F>(stream: Streaming<T>, data: F) -> impl AsyncRead + Send + Unpin + 'static
where
    T: Send + 'static,
    F: Fn(T) -> Option<Bytes> + Send + 'static,
{
    let bytes = stream
        .map_err(|status| std::io::Error::other(status.message().to_owned()))
        .and_then(move |message| {
            let chunk = match data(message) {
                Some(chunk) if chunk.len() <= limits::MAX_CHUNK_BYTES => Ok(chunk),
                Some(_) => Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("a chunk of more than {} bytes", limits::MAX_CHUNK_BYTES),
                )),
                None => Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "a second header",
                )),
            };
            futures::future::ready(chunk)
        });
    tokio_util::io::StreamReader::new(Box::pin(bytes))
}

/// A write's data messages (after its header) as a reader. It ends at
/// `end`, reading nothing after it, or at the end of the stream, which
/// with `require_end` is a cut upload: a read error, so the library sends
/// the agent no `end` and the guest keeps nothing (with `append`, what was
/// added stays). Another header, an empty message, or a chunk too large
/// fails the read.
fn write_data(
    stream: Streaming<api::WriteFileRequest>,
    require_end: bool,
) -> impl AsyncRead + Send + Unpin + 'static {
    use api::write_file_request::Part;
    let invalid_data = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    let chunks = futures::stream::unfold(Some(stream), move |stream| async move {
        let mut stream = stream?;
        let chunk = match stream.message().await {
            Ok(Some(api::WriteFileRequest {
                part: Some(Part::Data(data)),
            })) if data.len() <= limits::MAX_CHUNK_BYTES => Ok(data),
            Ok(Some(api::WriteFileRequest {
                part: Some(Part::Data(_)),
            })) => Err(invalid_data(format!(
                "a chunk of more than {} bytes",
                limits::MAX_CHUNK_BYTES
            ))),
            Ok(Some(api::WriteFileRequest {
                part: Some(Part::End(_)),
            })) => return None,
            Ok(Some(api::WriteFileRequest {
                part: Some(Part::Header(_)),
            })) => Err(invalid_data("a second header".to_owned())),
            Ok(Some(api::WriteFileRequest { part: None })) => {
                Err(invalid_data("a message with no part".to_owned()))
            }
            Ok(None) if require_end => Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the write ended without `end` (a cut upload); nothing is kept",
            )),
            Ok(None) => return None,
            Err(status) => Err(std::io::Error::other(status.message().to_owned())),
        };
        // After a failure the stream is not read again.
        let rest = chunk.is_ok().then_some(stream);
        Some((chunk, rest))
    });
    tokio_util::io::StreamReader::new(Box::pin(chunks))
}

#[tonic::async_trait]
impl files_server::Files for Services {
    type ReadStream = Chunks;

    async fn read(
        &self,
        request: Request<api::ReadFileRequest>,
    ) -> Result<Response<Self::ReadStream>, Status> {
        let principal = Principal::of(&request)?;
        let call = self.state.admit(&principal)?;
        let request = request.into_inner();
        validate::guest_path("path", &request.path)?;
        let (_, handle) = self
            .state
            .live_sandbox(&principal, &request.sandbox_id)
            .await?;
        let length = (request.length > 0).then_some(request.length);
        let stream = handle
            .fs()
            .read_range(&request.path, request.offset, length)
            .await
            .map_err(|error| error_status(&error))?;
        // The call's place is held while the stream lasts.
        let stream = chunks(stream).inspect(move |_| {
            let _held = &call;
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn write(
        &self,
        request: Request<Streaming<api::WriteFileRequest>>,
    ) -> Result<Response<api::WriteFileResponse>, Status> {
        use api::write_file_request::Part;
        let principal = Principal::of(&request)?;
        let _call = self.state.admit(&principal)?;
        let mut stream = request.into_inner();
        let header = match stream.message().await? {
            Some(api::WriteFileRequest {
                part: Some(Part::Header(header)),
            }) => header,
            _ => return Err(invalid("header", "a write begins with its header")),
        };
        validate::guest_path("header.path", &header.path)?;
        let (_, handle) = self
            .state
            .live_sandbox(&principal, &header.sandbox_id)
            .await?;
        let mut options = WriteOptions::new();
        if header.mode != 0 {
            options = options.mode(validate::within("header.mode", header.mode, 0, 0o7777)?);
        }
        if !header.user.is_empty() {
            options = options.user(header.user.clone());
        }
        if header.append {
            options = options.append();
        }
        let data = write_data(stream, header.require_end);
        let files = handle.fs();
        let written = files
            .write_with(&header.path, data, options)
            .await
            .map_err(|error| error_status(&error))?;
        let info = files
            .stat(&header.path)
            .await
            .map_err(|error| error_status(&error))?;
        Ok(Response::new(api::WriteFileResponse {
            file: Some(convert::file_info(&info)),
            bytes_written: written,
        }))
    }

    async fn list(
        &self,
        request: Request<api::ListFilesRequest>,
    ) -> Result<Response<api::ListFilesResponse>, Status> {
        let principal = Principal::of(&request)?;
        let _call = self.state.admit(&principal)?;
        let request = request.into_inner();
        validate::guest_path("path", &request.path)?;
        let depth = match request.depth {
            0 => 1,
            depth => validate::within("depth", depth, 1, limits::MAX_LIST_DEPTH)?,
        };
        let (_, handle) = self
            .state
            .live_sandbox(&principal, &request.sandbox_id)
            .await?;
        let entries = handle
            .fs()
            .list(&request.path, depth)
            .await
            .map_err(|error| error_status(&error))?
            .iter()
            .map(convert::file_info)
            .collect();
        Ok(Response::new(api::ListFilesResponse { entries }))
    }

    async fn stat(
        &self,
        request: Request<api::StatRequest>,
    ) -> Result<Response<api::FileInfo>, Status> {
        let principal = Principal::of(&request)?;
        let _call = self.state.admit(&principal)?;
        let request = request.into_inner();
        validate::guest_path("path", &request.path)?;
        let (_, handle) = self
            .state
            .live_sandbox(&principal, &request.sandbox_id)
            .await?;
        let info = handle
            .fs()
            .stat(&request.path)
            .await
            .map_err(|error| error_status(&error))?;
        Ok(Response::new(convert::file_info(&info)))
    }

    async fn exists(
        &self,
        request: Request<api::ExistsRequest>,
    ) -> Result<Response<api::ExistsResponse>, Status> {
        let principal = Principal::of(&request)?;
        let _call = self.state.admit(&principal)?;
        let request = request.into_inner();
        validate::guest_path("path", &request.path)?;
        let (_, handle) = self
            .state
            .live_sandbox(&principal, &request.sandbox_id)
            .await?;
        let exists = match handle.fs().stat(&request.path).await {
            Ok(_) => true,
            Err(error) if error.kind() == airlock::ErrorKind::NotFound => false,
            Err(error) => return Err(error_status(&error)),
        };
        Ok(Response::new(api::ExistsResponse { exists }))
    }

    async fn make_dir(
        &self,
        request: Request<api::MakeDirRequest>,
    ) -> Result<Response<api::MakeDirResponse>, Status> {
        let principal = Principal::of(&request)?;
        let _call = self.state.admit(&principal)?;
        let request = request.into_inner();
        validate::guest_path("path", &request.path)?;
        let (_, handle) = self
            .state
            .live_sandbox(&principal, &request.sandbox_id)
            .await?;
        let files = handle.fs();
        let created = match files.stat(&request.path).await {
            Ok(info) if info.is_dir() => false,
            Ok(_) => {
                return Err(reason::status(
                    ErrorReason::GuestRefused,
                    format!("{} exists and is not a directory", request.path),
                ))
            }
            Err(error) if error.kind() == airlock::ErrorKind::NotFound => {
                files
                    .mkdir(&request.path, true)
                    .await
                    .map_err(|error| error_status(&error))?;
                true
            }
            Err(error) => return Err(error_status(&error)),
        };
        Ok(Response::new(api::MakeDirResponse { created }))
    }

    async fn rename(
        &self,
        request: Request<api::RenameRequest>,
    ) -> Result<Response<api::FileInfo>, Status> {
        let principal = Principal::of(&request)?;
        let _call = self.state.admit(&principal)?;
        let request = request.into_inner();
        validate::guest_path("from", &request.from)?;
        validate::guest_path("to", &request.to)?;
        let (_, handle) = self
            .state
            .live_sandbox(&principal, &request.sandbox_id)
            .await?;
        let files = handle.fs();
        files
            .rename(&request.from, &request.to)
            .await
            .map_err(|error| error_status(&error))?;
        let info = files
            .stat(&request.to)
            .await
            .map_err(|error| error_status(&error))?;
        Ok(Response::new(convert::file_info(&info)))
    }

    async fn remove(
        &self,
        request: Request<api::RemoveRequest>,
    ) -> Result<Response<api::RemoveResponse>, Status> {
        let principal = Principal::of(&request)?;
        let _call = self.state.admit(&principal)?;
        let request = request.into_inner();
        validate::guest_path("path", &request.path)?;
        if request.path == "/" {
            return Err(invalid("path", "refusing to remove the guest's root"));
        }
        let (_, handle) = self
            .state
            .live_sandbox(&principal, &request.sandbox_id)
            .await?;
        handle
            .fs()
            .remove(&request.path, true)
            .await
            .map_err(|error| error_status(&error))?;
        Ok(Response::new(api::RemoveResponse {}))
    }

    type WatchStream = Pin<Box<dyn Stream<Item = Result<api::WatchEvent, Status>> + Send>>;

    async fn watch(
        &self,
        request: Request<api::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let principal = Principal::of(&request)?;
        let call = self.state.admit(&principal)?;
        let request = request.into_inner();
        validate::guest_path("path", &request.path)?;
        let (_, handle) = self
            .state
            .live_sandbox(&principal, &request.sandbox_id)
            .await?;
        let watch = handle
            .fs()
            .watch(&request.path, request.recursive)
            .await
            .map_err(|error| error_status(&error))?;
        let events = futures::stream::unfold((watch, call), |(mut watch, call)| async move {
            let next = watch.next().await?;
            let item = next
                .map(|event| convert::watch_event(&event))
                .map_err(|error| error_status(&error));
            Some((item, (watch, call)))
        });
        Ok(Response::new(Box::pin(events)))
    }

    async fn upload_tar(
        &self,
        request: Request<Streaming<api::UploadTarRequest>>,
    ) -> Result<Response<api::UploadTarResponse>, Status> {
        use api::upload_tar_request::Part;
        let principal = Principal::of(&request)?;
        let _call = self.state.admit(&principal)?;
        let mut stream = request.into_inner();
        let header = match stream.message().await? {
            Some(api::UploadTarRequest {
                part: Some(Part::Header(header)),
            }) => header,
            _ => return Err(invalid("header", "an upload begins with its header")),
        };
        validate::guest_path("header.path", &header.path)?;
        let (_, handle) = self
            .state
            .live_sandbox(&principal, &header.sandbox_id)
            .await?;
        let counted = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let count = std::sync::Arc::clone(&counted);
        let data = reader(
            stream,
            move |message: api::UploadTarRequest| match message.part {
                Some(Part::Data(data)) => {
                    count.fetch_add(data.len() as u64, std::sync::atomic::Ordering::Relaxed);
                    Some(data)
                }
                _ => None,
            },
        );
        handle
            .fs()
            .upload_tar(data, &header.path)
            .await
            .map_err(|error| error_status(&error))?;
        Ok(Response::new(api::UploadTarResponse {
            bytes: counted.load(std::sync::atomic::Ordering::Relaxed),
        }))
    }

    type DownloadTarStream = Chunks;

    async fn download_tar(
        &self,
        request: Request<api::DownloadTarRequest>,
    ) -> Result<Response<Self::DownloadTarStream>, Status> {
        let principal = Principal::of(&request)?;
        let call = self.state.admit(&principal)?;
        let request = request.into_inner();
        validate::guest_path("path", &request.path)?;
        let (_, handle) = self
            .state
            .live_sandbox(&principal, &request.sandbox_id)
            .await?;
        let stream = handle
            .fs()
            .download_tar(&request.path)
            .await
            .map_err(|error| error_status(&error))?;
        let stream = chunks(stream).inspect(move |_| {
            let _held = &call;
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn track_changes(
        &self,
        request: Request<api::TrackChangesRequest>,
    ) -> Result<Response<api::TrackChangesResponse>, Status> {
        let principal = Principal::of(&request)?;
        let _call = self.state.admit(&principal)?;
        let request = request.into_inner();
        validate::count("roots", &request.roots, limits::MAX_TRACK_ROOTS)?;
        for root in &request.roots {
            validate::guest_path("roots", root)?;
        }
        let roots: Vec<String> = match request.roots.is_empty() {
            true => DEFAULT_ROOTS.iter().map(|r| (*r).to_owned()).collect(),
            false => request.roots,
        };
        let (_, handle) = self
            .state
            .live_sandbox(&principal, &request.sandbox_id)
            .await?;
        let tracker = handle
            .fs()
            .track_changes(&roots)
            .await
            .map_err(|error| error_status(&error))?;
        let tracker_id = self.state.trackers.add(&request.sandbox_id, tracker)?;
        Ok(Response::new(api::TrackChangesResponse { tracker_id }))
    }

    async fn list_changes(
        &self,
        request: Request<api::ListChangesRequest>,
    ) -> Result<Response<api::ListChangesResponse>, Status> {
        let principal = Principal::of(&request)?;
        let _call = self.state.admit(&principal)?;
        let request = request.into_inner();
        self.state
            .live_sandbox(&principal, &request.sandbox_id)
            .await?;
        let tracker = self
            .state
            .trackers
            .get(&request.sandbox_id, &request.tracker_id)?;
        let changes = tracker
            .changes()
            .await
            .map_err(|error| error_status(&error))?;
        Ok(Response::new(api::ListChangesResponse {
            changes: changes.changes.iter().map(convert::change).collect(),
            truncated: changes.truncated,
        }))
    }

    type DownloadChangesStream = Chunks;

    async fn download_changes(
        &self,
        request: Request<api::DownloadChangesRequest>,
    ) -> Result<Response<Self::DownloadChangesStream>, Status> {
        let principal = Principal::of(&request)?;
        let call = self.state.admit(&principal)?;
        let request = request.into_inner();
        let (_, handle) = self
            .state
            .live_sandbox(&principal, &request.sandbox_id)
            .await?;
        let tracker = self
            .state
            .trackers
            .get(&request.sandbox_id, &request.tracker_id)?;
        let changes = tracker
            .changes()
            .await
            .map_err(|error| error_status(&error))?;
        let paths: Vec<_> = changes.present().map(|c| c.path.clone()).collect();
        if paths.is_empty() {
            // A tar of nothing: its two zero blocks.
            let empty = api::FileChunk {
                data: Bytes::from_static(&[0; 1024]),
            };
            return Ok(Response::new(Box::pin(futures::stream::iter([Ok(empty)]))));
        }
        let stream = handle
            .fs()
            .download_paths_tar(paths)
            .await
            .map_err(|error| error_status(&error))?;
        let stream = chunks(stream).inspect(move |_| {
            let _held = &call;
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn stop_tracking(
        &self,
        request: Request<api::StopTrackingRequest>,
    ) -> Result<Response<api::StopTrackingResponse>, Status> {
        let principal = Principal::of(&request)?;
        let request = request.into_inner();
        self.state.sandbox(&principal, &request.sandbox_id).await?;
        let tracker = self
            .state
            .trackers
            .take(&request.sandbox_id, &request.tracker_id)?;
        if let Err(error) = tracker.finish(0).await {
            tracing::debug!(error = %airlock::error_chain(&error), "releasing a snapshot");
        }
        Ok(Response::new(api::StopTrackingResponse {}))
    }
}
