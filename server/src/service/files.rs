//! `airlock.api.v1.Files`: the guest's files, streamed both ways in chunks
//! with no limit on a file's size, and change trackers kept per sandbox.

use std::pin::Pin;
use std::sync::{Mutex, PoisonError};

use bytes::Bytes;
use futures::{Stream, StreamExt, TryStreamExt};
use tokio::io::AsyncRead;
use tonic::{Request, Response, Status, Streaming};

use airlock::fs::{ReadStream, WriteOptions};
use airlock_api::limits;
use airlock_api::reason::{self, invalid};
use airlock_api::v1::{self as api, files_server, ErrorReason};

use super::Services;
use crate::convert;
use crate::state::State;
use crate::status::error_status;
use crate::validate;

/// Where a tracker looks when the request names no roots.
const DEFAULT_ROOTS: [&str; 2] = ["/root", "/tmp"];

type Chunks = Pin<Box<dyn Stream<Item = Result<api::FileChunk, Status>> + Send>>;

/// A guest stream as the API's chunks.
fn chunks(stream: ReadStream) -> Chunks {
    Box::pin(stream.map(|chunk| {
        chunk
            .map(|data| api::FileChunk { data })
            .map_err(|error| error_status(&error))
    }))
}

/// Where a client stream's reader leaves the refusal that stopped it, so
/// the call answers that (INVALID_ARGUMENT naming the field) rather than
/// the library's read error.
#[derive(Debug, Clone, Default)]
struct Refusal(std::sync::Arc<Mutex<Option<Status>>>);

impl Refusal {
    /// Keeps `status` and gives the reader its error.
    fn refuse(&self, status: Status) -> std::io::Error {
        let error = std::io::Error::new(std::io::ErrorKind::InvalidData, status.message());
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(status);
        error
    }

    /// The status for a call whose library call failed with `error`: the
    /// refusal if the stream was refused, else the error's.
    fn or(&self, error: &airlock::Error) -> Status {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .unwrap_or_else(|| error_status(error))
    }
}

/// The refusal for a client stream that failed to deliver a message: one
/// that does not decode or is too large names `data`; a client gone keeps
/// its status.
fn stream_failure(status: Status) -> Status {
    match status.code() {
        tonic::Code::OutOfRange | tonic::Code::InvalidArgument | tonic::Code::Internal => {
            invalid("data", status.message())
        }
        _ => status,
    }
}

fn oversized() -> Status {
    invalid(
        "data",
        format!("more than {} bytes in one message", limits::MAX_CHUNK_BYTES),
    )
}

/// The data messages of a client stream (after its header) as a reader;
/// a message that is not data, or too large, fails the read, its refusal
/// kept in `refusal`.
fn reader<T, F>(
    stream: Streaming<T>,
    data: F,
    refusal: Refusal,
) -> impl AsyncRead + Send + Unpin + 'static
where
    T: Send + 'static,
    F: Fn(T) -> Option<Bytes> + Send + 'static,
{
    let failed = refusal.clone();
    let bytes = stream
        .map_err(move |status| failed.refuse(stream_failure(status)))
        .and_then(move |message| {
            let chunk = match data(message) {
                Some(chunk) if chunk.len() <= limits::MAX_CHUNK_BYTES => Ok(chunk),
                Some(_) => Err(refusal.refuse(oversized())),
                None => {
                    Err(refusal.refuse(invalid("header", "only the first message may be a header")))
                }
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
/// fails the read; each failure's status is kept in `refusal`.
fn write_data(
    stream: Streaming<api::WriteFileRequest>,
    require_end: bool,
    refusal: Refusal,
) -> impl AsyncRead + Send + Unpin + 'static {
    use api::write_file_request::Part;
    let chunks = futures::stream::unfold(Some(stream), move |stream| {
        let refusal = refusal.clone();
        async move {
            let mut stream = stream?;
            let chunk = match stream.message().await {
                Ok(Some(api::WriteFileRequest {
                    part: Some(Part::Data(data)),
                })) if data.len() <= limits::MAX_CHUNK_BYTES => Ok(data),
                Ok(Some(api::WriteFileRequest {
                    part: Some(Part::Data(_)),
                })) => Err(refusal.refuse(oversized())),
                Ok(Some(api::WriteFileRequest {
                    part: Some(Part::End(_)),
                })) => return None,
                Ok(Some(api::WriteFileRequest {
                    part: Some(Part::Header(_)),
                })) => {
                    Err(refusal.refuse(invalid("header", "only the first message may be a header")))
                }
                Ok(Some(api::WriteFileRequest { part: None })) => {
                    Err(refusal.refuse(invalid("part", "a message with no part")))
                }
                Ok(None) if require_end => Err(refusal.refuse(invalid(
                    "end",
                    "the write ended without `end` (a cut upload); nothing is kept",
                ))),
                Ok(None) => return None,
                Err(status) => Err(refusal.refuse(stream_failure(status))),
            };
            // After a failure the stream is not read again.
            let rest = chunk.is_ok().then_some(stream);
            Some((chunk, rest))
        }
    });
    tokio_util::io::StreamReader::new(Box::pin(chunks))
}

/// Counts a call of the service by its outcome, when the server counts.
async fn counted<T>(
    state: &State,
    call: impl std::future::Future<Output = Result<T, Status>>,
) -> Result<T, Status> {
    let result = call.await;
    if let Some(metrics) = &state.metrics {
        metrics.file_call(&result);
    }
    result
}

#[tonic::async_trait]
impl files_server::Files for Services {
    type ReadStream = Chunks;

    async fn read(
        &self,
        request: Request<api::ReadFileRequest>,
    ) -> Result<Response<Self::ReadStream>, Status> {
        counted(&self.state, async move {
            let call = self.admit(&request)?;
            let request = request.into_inner();
            validate::guest_path("path", &request.path)?;
            let (_, handle) = call.sandbox(&request.sandbox_id).await?;
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
            Ok(Response::new(Box::pin(stream) as Chunks))
        })
        .await
    }

    async fn write(
        &self,
        request: Request<Streaming<api::WriteFileRequest>>,
    ) -> Result<Response<api::WriteFileResponse>, Status> {
        counted(&self.state, async move {
            use api::write_file_request::Part;
            let call = self.admit(&request)?;
            let mut stream = request.into_inner();
            let header = match stream.message().await? {
                Some(api::WriteFileRequest {
                    part: Some(Part::Header(header)),
                }) => header,
                _ => return Err(invalid("header", "a write begins with its header")),
            };
            validate::guest_path("header.path", &header.path)?;
            let (_, handle) = call.sandbox(&header.sandbox_id).await?;
            let mut options = WriteOptions::new();
            if header.mode != 0 {
                options = options.mode(validate::within(
                    "header.mode",
                    header.mode,
                    0,
                    limits::MAX_FILE_MODE,
                )?);
            }
            if !header.user.is_empty() {
                validate::user("header.user", &header.user)?;
                options = options.user(header.user.clone());
            }
            if header.append {
                options = options.append();
            }
            let refusal = Refusal::default();
            let data = write_data(stream, header.require_end, refusal.clone());
            let files = handle.fs();
            let written = files
                .write_with(&header.path, data, options)
                .await
                .map_err(|error| refusal.or(&error))?;
            let info = files
                .stat(&header.path)
                .await
                .map_err(|error| error_status(&error))?;
            Ok(Response::new(api::WriteFileResponse {
                file: Some(convert::file_info(&info)),
                bytes_written: written,
            }))
        })
        .await
    }

    async fn list(
        &self,
        request: Request<api::ListFilesRequest>,
    ) -> Result<Response<api::ListFilesResponse>, Status> {
        counted(&self.state, async move {
            let call = self.admit(&request)?;
            let request = request.into_inner();
            validate::guest_path("path", &request.path)?;
            let depth = match request.depth {
                0 => 1,
                depth => validate::within("depth", depth, 1, limits::MAX_LIST_DEPTH)?,
            };
            let (_, handle) = call.sandbox(&request.sandbox_id).await?;
            let entries = handle
                .fs()
                .list(&request.path, depth)
                .await
                .map_err(|error| error_status(&error))?
                .iter()
                .map(convert::file_info)
                .collect();
            Ok(Response::new(api::ListFilesResponse { entries }))
        })
        .await
    }

    async fn stat(
        &self,
        request: Request<api::StatRequest>,
    ) -> Result<Response<api::FileInfo>, Status> {
        counted(&self.state, async move {
            let call = self.admit(&request)?;
            let request = request.into_inner();
            validate::guest_path("path", &request.path)?;
            let (_, handle) = call.sandbox(&request.sandbox_id).await?;
            let info = handle
                .fs()
                .stat(&request.path)
                .await
                .map_err(|error| error_status(&error))?;
            Ok(Response::new(convert::file_info(&info)))
        })
        .await
    }

    async fn exists(
        &self,
        request: Request<api::ExistsRequest>,
    ) -> Result<Response<api::ExistsResponse>, Status> {
        counted(&self.state, async move {
            let call = self.admit(&request)?;
            let request = request.into_inner();
            validate::guest_path("path", &request.path)?;
            let (_, handle) = call.sandbox(&request.sandbox_id).await?;
            let exists = match handle.fs().stat(&request.path).await {
                Ok(_) => true,
                Err(error) if error.kind() == airlock::ErrorKind::NotFound => false,
                Err(error) => return Err(error_status(&error)),
            };
            Ok(Response::new(api::ExistsResponse { exists }))
        })
        .await
    }

    async fn make_dir(
        &self,
        request: Request<api::MakeDirRequest>,
    ) -> Result<Response<api::MakeDirResponse>, Status> {
        counted(&self.state, async move {
            let call = self.admit(&request)?;
            let request = request.into_inner();
            validate::guest_path("path", &request.path)?;
            let (_, handle) = call.sandbox(&request.sandbox_id).await?;
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
        })
        .await
    }

    async fn rename(
        &self,
        request: Request<api::RenameRequest>,
    ) -> Result<Response<api::FileInfo>, Status> {
        counted(&self.state, async move {
            let call = self.admit(&request)?;
            let request = request.into_inner();
            validate::guest_path("from", &request.from)?;
            validate::guest_path("to", &request.to)?;
            let (_, handle) = call.sandbox(&request.sandbox_id).await?;
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
        })
        .await
    }

    async fn remove(
        &self,
        request: Request<api::RemoveRequest>,
    ) -> Result<Response<api::RemoveResponse>, Status> {
        counted(&self.state, async move {
            let call = self.admit(&request)?;
            let request = request.into_inner();
            validate::guest_path("path", &request.path)?;
            if request.path == "/" {
                return Err(invalid("path", "refusing to remove the guest's root"));
            }
            let (_, handle) = call.sandbox(&request.sandbox_id).await?;
            handle
                .fs()
                .remove(&request.path, true)
                .await
                .map_err(|error| error_status(&error))?;
            Ok(Response::new(api::RemoveResponse {}))
        })
        .await
    }

    type WatchStream = Pin<Box<dyn Stream<Item = Result<api::WatchEvent, Status>> + Send>>;

    async fn watch(
        &self,
        request: Request<api::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        counted(&self.state, async move {
            let call = self.admit(&request)?;
            let request = request.into_inner();
            validate::guest_path("path", &request.path)?;
            let (_, handle) = call.sandbox(&request.sandbox_id).await?;
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
            Ok(Response::new(Box::pin(events) as Self::WatchStream))
        })
        .await
    }

    async fn upload_tar(
        &self,
        request: Request<Streaming<api::UploadTarRequest>>,
    ) -> Result<Response<api::UploadTarResponse>, Status> {
        counted(&self.state, async move {
            use api::upload_tar_request::Part;
            let call = self.admit(&request)?;
            let mut stream = request.into_inner();
            let header = match stream.message().await? {
                Some(api::UploadTarRequest {
                    part: Some(Part::Header(header)),
                }) => header,
                _ => return Err(invalid("header", "an upload begins with its header")),
            };
            validate::guest_path("header.path", &header.path)?;
            let (_, handle) = call.sandbox(&header.sandbox_id).await?;
            let counted = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
            let count = std::sync::Arc::clone(&counted);
            let refusal = Refusal::default();
            let data = reader(
                stream,
                move |message: api::UploadTarRequest| match message.part {
                    Some(Part::Data(data)) => {
                        count.fetch_add(data.len() as u64, std::sync::atomic::Ordering::Relaxed);
                        Some(data)
                    }
                    _ => None,
                },
                refusal.clone(),
            );
            handle
                .fs()
                .upload_tar(data, &header.path)
                .await
                .map_err(|error| refusal.or(&error))?;
            Ok(Response::new(api::UploadTarResponse {
                bytes: counted.load(std::sync::atomic::Ordering::Relaxed),
            }))
        })
        .await
    }

    type DownloadTarStream = Chunks;

    async fn download_tar(
        &self,
        request: Request<api::DownloadTarRequest>,
    ) -> Result<Response<Self::DownloadTarStream>, Status> {
        counted(&self.state, async move {
            let call = self.admit(&request)?;
            let request = request.into_inner();
            validate::guest_path("path", &request.path)?;
            let (_, handle) = call.sandbox(&request.sandbox_id).await?;
            let stream = handle
                .fs()
                .download_tar(&request.path)
                .await
                .map_err(|error| error_status(&error))?;
            let stream = chunks(stream).inspect(move |_| {
                let _held = &call;
            });
            Ok(Response::new(Box::pin(stream) as Chunks))
        })
        .await
    }

    async fn track_changes(
        &self,
        request: Request<api::TrackChangesRequest>,
    ) -> Result<Response<api::TrackChangesResponse>, Status> {
        counted(&self.state, async move {
            let call = self.admit(&request)?;
            let request = request.into_inner();
            validate::count("roots", &request.roots, limits::MAX_TRACK_ROOTS)?;
            for root in &request.roots {
                validate::guest_path("roots", root)?;
            }
            let roots: Vec<String> = match request.roots.is_empty() {
                true => DEFAULT_ROOTS.iter().map(|r| (*r).to_owned()).collect(),
                false => request.roots,
            };
            let (_, handle) = call.sandbox(&request.sandbox_id).await?;
            let tracker = handle
                .fs()
                .track_changes(&roots)
                .await
                .map_err(|error| error_status(&error))?;
            let tracker_id = self.state.trackers.add(&request.sandbox_id, tracker)?;
            Ok(Response::new(api::TrackChangesResponse { tracker_id }))
        })
        .await
    }

    async fn list_changes(
        &self,
        request: Request<api::ListChangesRequest>,
    ) -> Result<Response<api::ListChangesResponse>, Status> {
        counted(&self.state, async move {
            let call = self.admit(&request)?;
            let request = request.into_inner();
            call.sandbox(&request.sandbox_id).await?;
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
        })
        .await
    }

    type DownloadChangesStream = Chunks;

    async fn download_changes(
        &self,
        request: Request<api::DownloadChangesRequest>,
    ) -> Result<Response<Self::DownloadChangesStream>, Status> {
        counted(&self.state, async move {
            let call = self.admit(&request)?;
            let request = request.into_inner();
            let (_, handle) = call.sandbox(&request.sandbox_id).await?;
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
                return Ok(Response::new(
                    Box::pin(futures::stream::iter([Ok(empty)])) as Chunks
                ));
            }
            let stream = handle
                .fs()
                .download_paths_tar(paths)
                .await
                .map_err(|error| error_status(&error))?;
            let stream = chunks(stream).inspect(move |_| {
                let _held = &call;
            });
            Ok(Response::new(Box::pin(stream) as Chunks))
        })
        .await
    }

    async fn stop_tracking(
        &self,
        request: Request<api::StopTrackingRequest>,
    ) -> Result<Response<api::StopTrackingResponse>, Status> {
        counted(&self.state, async move {
            let call = self.call(&request)?;
            let request = request.into_inner();
            call.any_sandbox(&request.sandbox_id).await?;
            let tracker = self
                .state
                .trackers
                .take(&request.sandbox_id, &request.tracker_id)?;
            if let Err(error) = tracker.finish(0).await {
                tracing::debug!(error = %airlock::error_chain(&error), "releasing a snapshot");
            }
            Ok(Response::new(api::StopTrackingResponse {}))
        })
        .await
    }
}
