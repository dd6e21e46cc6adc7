//! The guest's filesystem from the host: [`Files`], from `Sandbox::fs()`.
//!
//! - `mod.rs`: the handle, reads and writes (streamed in [`CHUNK`]s).
//! - `tree`: metadata and tree operations, and `watch`.
//! - `transfer`: whole directories as tar streams (`upload_dir`,
//!   `download_dir`), built and extracted on the host.
//! - `archive`: the tar code and the channel bridges it runs behind.
//! - `copy`: `copy_in` and `copy_out`, a file or a directory, whichever
//!   the source is.
//! - [`host_tar`]: host directories packed into and unpacked from tar
//!   streams, for programs that carry the stream themselves.
//! - `changes`: what a run created, modified and deleted under named roots
//!   ([`ChangeTracker`], [`Changes`]), and downloading those files.
//! - `metadata`: [`Metadata`], [`WatchEvent`], [`WriteOptions`].
//! - `error`: [`FsError`], host-side failures.
//!
//! Memory is bounded whatever the size: a write reads one chunk from its
//! source when the transport can take it, and a read hands chunks over as
//! they arrive.

mod archive;
mod changes;
mod copy;
mod error;
pub mod host_tar;
mod metadata;
mod transfer;
mod tree;

use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::lifecycle::channel::AgentChannel;
use airlock_proto::v1::files_client::FilesClient;
use airlock_proto::v1::{
    write_file_request, FileChunk, ReadFileRequest, WriteFileEnd, WriteFileHeader, WriteFileRequest,
};
use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tonic::Streaming;

#[cfg(feature = "fuzzing")]
pub(crate) use archive::extract as extract_tar;
#[cfg(feature = "fuzzing")]
pub(crate) use changes::ChangesReader;
pub use changes::{Change, ChangeKind, ChangeTracker, Changes};
pub use error::FsError;
pub use metadata::{FileKind, Metadata, WatchEvent, WatchKind, WriteOptions};
pub use tree::Watch;

use airlock_proto::Feature;

use crate::error::{Error, Result};
use crate::features::AgentFeatures;
use crate::transport::CapMessages;

/// Bytes per message the host sends (the agent sends the same size).
pub const CHUNK: usize = 128 * 1024;

/// The guest's filesystem. Cheap to clone; usable from any task.
#[derive(Debug, Clone)]
pub struct Files {
    client: FilesClient<AgentChannel>,
    features: AgentFeatures,
}

const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Files>();
};

/// A guest path as the protocol carries it.
fn guest(path: &Path) -> Result<String> {
    path.to_str()
        .map(str::to_owned)
        .ok_or_else(|| FsError::NonUtf8Path(path.to_owned()).into())
}

impl Files {
    pub(crate) fn new(channel: AgentChannel, features: AgentFeatures) -> Self {
        Files {
            client: FilesClient::new(channel).capped(),
            features,
        }
    }

    /// A client, once the agent is known to speak `Files`.
    fn client(&self) -> Result<FilesClient<AgentChannel>> {
        self.features.require(Feature::Files)?;
        Ok(self.client.clone())
    }

    /// Streams a guest file's contents.
    pub async fn read(&self, path: impl AsRef<Path>) -> Result<ReadStream> {
        self.read_range(path, 0, None).await
    }

    /// Streams `length` bytes (`None`: to the end) from `offset`.
    pub async fn read_range(
        &self,
        path: impl AsRef<Path>,
        offset: u64,
        length: Option<u64>,
    ) -> Result<ReadStream> {
        let request = ReadFileRequest {
            path: guest(path.as_ref())?,
            offset,
            length: length.unwrap_or(0),
        };
        let inner = self
            .client()?
            .read_file(request)
            .await
            .map_err(|s| Error::agent("Files.ReadFile", s))?
            .into_inner();
        Ok(ReadStream::new("Files.ReadFile", inner))
    }

    /// A whole guest file in memory (for small files; see [`Files::read`]).
    pub async fn read_to_vec(&self, path: impl AsRef<Path>) -> Result<Vec<u8>> {
        let mut stream = self.read(path).await?;
        let mut out = Vec::new();
        while let Some(chunk) = stream.next().await {
            out.extend_from_slice(&chunk?);
        }
        Ok(out)
    }

    /// Copies a guest file to a host file (replaced) with the guest file's
    /// permission bits, through symlinks (the target's mode, not a link's
    /// 0777: see [`Files::stat_following`]); returns its size.
    pub async fn read_to_file(
        &self,
        path: impl AsRef<Path>,
        host_path: impl AsRef<Path>,
    ) -> Result<u64> {
        use std::os::unix::fs::PermissionsExt;
        let path = path.as_ref();
        let host_path = host_path.as_ref();
        let mode = self.stat_following(path).await?.mode & 0o7777;
        let mut stream = self.read(path).await?;
        let local = |e| Error::from(FsError::local("write", host_path, e));
        let mut file = tokio::fs::File::create(host_path).await.map_err(local)?;
        let mut size = 0;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            size += chunk.len() as u64;
            file.write_all(&chunk).await.map_err(local)?;
        }
        file.flush().await.map_err(local)?;
        // Set on the open file: a replaced file's old mode does not stay.
        file.set_permissions(std::fs::Permissions::from_mode(mode))
            .await
            .map_err(local)?;
        Ok(size)
    }

    /// Replaces a guest file with `data`, atomically.
    pub async fn write(&self, path: impl AsRef<Path>, data: impl Into<Bytes>) -> Result<u64> {
        self.write_with(path, std::io::Cursor::new(data.into()), WriteOptions::new())
            .await
    }

    /// Replaces a guest file with a host file's contents, atomically, with
    /// the host file's permission bits.
    pub async fn write_file(
        &self,
        path: impl AsRef<Path>,
        host_path: impl AsRef<Path>,
    ) -> Result<u64> {
        use std::os::unix::fs::PermissionsExt;
        let host_path = host_path.as_ref();
        let local = |e| Error::from(FsError::local("read", host_path, e));
        let file = tokio::fs::File::open(host_path).await.map_err(local)?;
        let mode = file.metadata().await.map_err(local)?.permissions().mode() & 0o7777;
        self.write_with(path, file, WriteOptions::new().mode(mode))
            .await
    }

    /// Writes a guest file from any async reader. Without
    /// [`WriteOptions::append`] the file appears whole or not at all: if the
    /// reader fails or this future is dropped, the guest removes what it
    /// received and the old file (if any) stays.
    pub async fn write_with(
        &self,
        path: impl AsRef<Path>,
        reader: impl AsyncRead + Send + Unpin + 'static,
        options: WriteOptions,
    ) -> Result<u64> {
        let header = WriteFileHeader {
            path: guest(path.as_ref())?,
            mode: options.mode.unwrap_or(0),
            user: options.user.unwrap_or_default(),
            create_parents: !options.no_parents,
            append: options.append,
        };
        let failure = Arc::new(Mutex::new(None));
        let messages = upload_stream(header, reader, Arc::clone(&failure));
        let answer = self.client()?.write_file(messages).await;
        let local = failure.lock().ok().and_then(|mut f| f.take());
        if let Some(e) = local {
            return Err(e);
        }
        Ok(answer
            .map_err(|s| Error::agent("Files.WriteFile", s))?
            .into_inner()
            .bytes_written)
    }
}

/// The request stream of a write: the header, the reader's bytes in
/// chunks, then `end`. A read error stops it before `end` (so the guest
/// keeps nothing) and is left in `failure`.
fn upload_stream(
    header: WriteFileHeader,
    reader: impl AsyncRead + Send + Unpin + 'static,
    failure: Arc<Mutex<Option<Error>>>,
) -> impl Stream<Item = WriteFileRequest> + Send + 'static {
    enum State<R> {
        Header(WriteFileHeader, R),
        Data(R),
        Done,
    }
    let message = |kind| WriteFileRequest { kind: Some(kind) };
    futures::stream::unfold(State::Header(header, reader), move |state| {
        let failure = Arc::clone(&failure);
        async move {
            match state {
                State::Header(h, r) => {
                    Some((message(write_file_request::Kind::Header(h)), State::Data(r)))
                }
                State::Data(mut r) => {
                    let mut buf = Vec::with_capacity(CHUNK);
                    match (&mut r).take(CHUNK as u64).read_to_end(&mut buf).await {
                        Ok(0) => Some((
                            message(write_file_request::Kind::End(WriteFileEnd {})),
                            State::Done,
                        )),
                        Ok(_) => Some((
                            message(write_file_request::Kind::Data(Bytes::from(buf))),
                            State::Data(r),
                        )),
                        Err(e) => {
                            if let Ok(mut slot) = failure.lock() {
                                *slot = Some(FsError::local("read", "(upload source)", e).into());
                            }
                            None
                        }
                    }
                }
                State::Done => None,
            }
        }
    })
}

/// A guest file's contents, or a tar stream from the guest, as a stream of
/// chunks.
#[derive(Debug)]
pub struct ReadStream {
    inner: Streaming<FileChunk>,
    /// The agent call it comes from, for errors.
    call: &'static str,
}

impl ReadStream {
    pub(crate) fn new(call: &'static str, inner: Streaming<FileChunk>) -> Self {
        ReadStream { inner, call }
    }
}

impl Stream for ReadStream {
    type Item = Result<Bytes>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let call = self.call;
        self.inner
            .poll_next_unpin(cx)
            .map(|item| item.map(|r| r.map(|c| c.data).map_err(|s| Error::agent(call, s))))
    }
}
