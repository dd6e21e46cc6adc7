//! The input side of an in-process `Processes.Start`: the service takes a
//! gRPC request stream (`tonic::Streaming`), so the front frames its
//! messages as gRPC does and hands them over through a channel.

use std::convert::Infallible;

use bytes::{BufMut, Bytes, BytesMut};
use http_body_util::StreamBody;
use hyper::body::Frame;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codec::Codec as _;
use tonic::Streaming;

use airlock_api::v1 as api;

type Item = Result<Frame<Bytes>, Infallible>;

/// A request stream whose first message is `first`; the rest come from the
/// sender, and the stream ends when it is dropped.
pub fn stream(first: &api::ProcessInput) -> (Streaming<api::ProcessInput>, mpsc::Sender<Item>) {
    let (sender, receiver) = mpsc::channel::<Item>(8);
    // The channel is new and has room: the first message always fits.
    let _ = sender.try_send(Ok(Frame::data(frame(first))));
    let body = StreamBody::new(ReceiverStream::new(receiver));
    let decoder =
        airlock_api::codec::Codec::<api::ProcessInput, api::ProcessInput>::default().decoder();
    (Streaming::new_request(decoder, body, None, None), sender)
}

/// One gRPC message frame: no compression, the length, the message.
fn frame(message: &api::ProcessInput) -> Bytes {
    let encoded = prost_encode(message);
    let mut out = BytesMut::with_capacity(5 + encoded.len());
    out.put_u8(0);
    out.put_u32(u32::try_from(encoded.len()).unwrap_or(u32::MAX));
    out.put_slice(&encoded);
    out.freeze()
}

fn prost_encode(message: &api::ProcessInput) -> Vec<u8> {
    airlock_e2b_wire::prost::Message::encode_to_vec(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_service_reads_the_first_message_back() {
        let first = api::ProcessInput {
            input: Some(api::process_input::Input::CloseStdin(true)),
        };
        let (mut streaming, sender) = stream(&first);
        drop(sender);
        assert_eq!(streaming.message().await.expect("decodes"), Some(first));
        assert_eq!(streaming.message().await.expect("ends"), None);
    }
}
