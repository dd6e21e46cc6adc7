//! One file written through our Files service's `Write` from a stream of
//! bytes (an upload's body or one multipart part), without holding the
//! file in memory: the bytes go to the service, in process, as the client
//! stream of messages its gRPC callers send (header, data of at most
//! [`BATCH`] bytes, then `end`), through a small channel, while the body
//! is read.

use bytes::{BufMut, Bytes, BytesMut};
use futures::{Stream, StreamExt};
use http_body::Frame;
use http_body_util::StreamBody;
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codec::BufferSettings;
use tonic::{Status, Streaming};

use airlock_api::limits;
use airlock_api::reason::invalid;
use airlock_api::v1::{self as api, files_server::Files, write_file_request::Part};

use crate::e2b::reply::BoxError;
use crate::e2b::target::SandboxCall;

/// Bytes per data message.
const BATCH: usize = 512 * 1024;

/// Messages in flight between the body and the service.
const DEPTH: usize = 4;

type Frames = mpsc::Sender<Result<Frame<Bytes>, BoxError>>;

/// Writes `data` to `path` (absolute) in the sandbox of `call`, owned by
/// `owner` (empty: root). A `data` that fails is a cut upload: nothing is
/// kept, and the answer is INVALID_ARGUMENT naming `body` with the reason.
pub async fn write<S, E>(
    call: &SandboxCall,
    path: String,
    owner: String,
    mut data: S,
) -> Result<api::WriteFileResponse, Status>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let (sender, receiver) = mpsc::channel(DEPTH);
    let body = StreamBody::new(ReceiverStream::new(receiver));
    let stream = Streaming::new_request(
        tonic_prost::ProstDecoder::<api::WriteFileRequest>::new(BufferSettings::default()),
        body,
        None,
        Some(limits::MAX_CHUNK_BYTES + 1024),
    );
    let header = api::WriteHeader {
        sandbox_id: call.id.clone(),
        path,
        mode: 0,
        user: owner,
        append: false,
        require_end: true,
    };
    let pump = async move {
        if !send(&sender, Part::Header(header)).await {
            return Ok(());
        }
        let mut buffer = BytesMut::new();
        while let Some(chunk) = data.next().await {
            match chunk {
                Ok(bytes) => {
                    buffer.extend_from_slice(&bytes);
                    while buffer.len() >= BATCH {
                        let piece = buffer.split_to(BATCH).freeze();
                        if !send(&sender, Part::Data(piece)).await {
                            return Ok(());
                        }
                    }
                }
                Err(error) => {
                    let message = error.to_string();
                    let _ = sender.send(Err(message.clone().into())).await;
                    return Err(message);
                }
            }
        }
        if !buffer.is_empty() && !send(&sender, Part::Data(buffer.freeze())).await {
            return Ok(());
        }
        send(&sender, Part::End(api::WriteEnd {})).await;
        Ok(())
    };
    let (written, pumped) = tokio::join!(call.services().write(call.request(stream)), pump);
    if let Err(message) = pumped {
        return Err(invalid("body", format!("the upload was cut: {message}")));
    }
    written.map(tonic::Response::into_inner)
}

/// Sends one message as a gRPC frame; false when the service stopped
/// reading (it answers why).
async fn send(sender: &Frames, part: Part) -> bool {
    let message = api::WriteFileRequest { part: Some(part) };
    let length = message.encoded_len();
    let mut frame = BytesMut::with_capacity(5 + length);
    frame.put_u8(0);
    frame.put_u32(length as u32);
    if message.encode(&mut frame).is_err() {
        return false;
    }
    sender.send(Ok(Frame::data(frame.freeze()))).await.is_ok()
}
