//! Reading a Connect request's body: a unary call's one bounded message, a
//! server-streaming call's one enveloped message, a client stream's
//! messages as they come ([`Messages`]).

use std::marker::PhantomData;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Body as HttpBody;

use super::code::Code;
use super::codec::{Codec, Wire};
use super::envelope::{Decoder, FLAG_END_STREAM};
use super::error::ConnectError;
use super::MAX_MESSAGE_BYTES;

/// A request body this module reads (hyper's `Incoming`, or a test's).
pub trait RequestBody:
    HttpBody<Data = Bytes, Error: std::fmt::Display> + Send + Unpin + 'static
{
}

impl<B> RequestBody for B where
    B: HttpBody<Data = Bytes, Error: std::fmt::Display> + Send + Unpin + 'static
{
}

fn too_big(limit: usize) -> ConnectError {
    ConnectError::new(
        Code::ResourceExhausted,
        format!("the request's message is past this server's bound of {limit} bytes"),
    )
}

fn broken(error: impl std::fmt::Display) -> ConnectError {
    ConnectError::new(
        Code::Canceled,
        format!("the request's body could not be read: {error}"),
    )
}

/// The whole body, refused past `limit` bytes before more is buffered.
async fn whole(mut body: impl RequestBody, limit: usize) -> Result<Bytes, ConnectError> {
    if body.size_hint().lower() > limit as u64 {
        return Err(too_big(limit));
    }
    let mut out = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(broken)?;
        if let Ok(data) = frame.into_data() {
            if out.len() + data.len() > limit {
                return Err(too_big(limit));
            }
            out.extend_from_slice(&data);
        }
    }
    Ok(out.freeze())
}

/// A unary call's message.
pub async fn unary<M: Wire>(body: impl RequestBody, codec: Codec) -> Result<M, ConnectError> {
    let bytes = whole(body, MAX_MESSAGE_BYTES).await?;
    codec.decode(&bytes)
}

/// A server-streaming call's one request message.
pub async fn one<M: Wire>(body: impl RequestBody, codec: Codec) -> Result<M, ConnectError> {
    let mut messages = Messages::<M, _>::new(body, codec);
    match messages.next().await {
        Some(message) => message,
        None => Err(ConnectError::invalid(
            "the request stream ended without its message",
        )),
    }
}

/// A client stream's messages, decoded as they arrive.
#[derive(Debug)]
pub struct Messages<M, B> {
    body: B,
    codec: Codec,
    decoder: Decoder,
    done: bool,
    message: PhantomData<fn() -> M>,
}

impl<M: Wire, B: RequestBody> Messages<M, B> {
    pub fn new(body: B, codec: Codec) -> Self {
        Messages {
            body,
            codec,
            decoder: Decoder::new(MAX_MESSAGE_BYTES),
            done: false,
            message: PhantomData,
        }
    }

    /// The next message; `None` at the end of the stream (the body's end,
    /// or an end-of-stream envelope). A malformed envelope or message ends
    /// the stream with its error.
    pub async fn next(&mut self) -> Option<Result<M, ConnectError>> {
        if self.done {
            return None;
        }
        loop {
            match self.decoder.next_envelope() {
                Err(error) => return self.fail(error),
                Ok(Some(envelope)) if envelope.flags & FLAG_END_STREAM != 0 => {
                    self.done = true;
                    return None;
                }
                Ok(Some(envelope)) => {
                    return match self.codec.decode(&envelope.message) {
                        Ok(message) => Some(Ok(message)),
                        Err(error) => self.fail(error),
                    }
                }
                Ok(None) => {}
            }
            match self.body.frame().await {
                None if self.decoder.has_partial() => {
                    return self.fail(ConnectError::invalid(
                        "the request stream ended inside an envelope",
                    ))
                }
                None => {
                    self.done = true;
                    return None;
                }
                Some(Err(error)) => return self.fail(broken(error)),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.decoder.push(&data);
                    }
                }
            }
        }
    }

    fn fail(&mut self, error: ConnectError) -> Option<Result<M, ConnectError>> {
        self.done = true;
        Some(Err(error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::e2b::connect::envelope::encode;
    use airlock_e2b_wire::process::{ProcessSelector, SendInputRequest};
    use http_body_util::Full;

    #[tokio::test]
    async fn a_unary_body_past_the_bound_is_refused() {
        let body = Full::new(Bytes::from(vec![b' '; MAX_MESSAGE_BYTES + 1]));
        let error = unary::<SendInputRequest>(body, Codec::Json)
            .await
            .expect_err("too big");
        assert_eq!(error.code, Code::ResourceExhausted);
        assert!(error.message.contains(&MAX_MESSAGE_BYTES.to_string()));
    }

    #[tokio::test]
    async fn a_client_stream_reads_each_message_then_ends() {
        let mut stream = Vec::new();
        stream.extend_from_slice(&encode(0, br#"{"pid": 1}"#));
        stream.extend_from_slice(&encode(0, br#"{"tag": "x"}"#));
        stream.extend_from_slice(&encode(FLAG_END_STREAM, b"{}"));
        let mut messages =
            Messages::<ProcessSelector, _>::new(Full::new(Bytes::from(stream)), Codec::Json);
        assert!(matches!(messages.next().await, Some(Ok(_))));
        assert!(matches!(messages.next().await, Some(Ok(_))));
        assert!(messages.next().await.is_none());
    }

    #[tokio::test]
    async fn a_malformed_message_ends_the_stream_with_its_error() {
        let mut stream = Vec::new();
        stream.extend_from_slice(&encode(0, b"{nope"));
        stream.extend_from_slice(&[0, 0]);
        let mut messages =
            Messages::<ProcessSelector, _>::new(Full::new(Bytes::from(stream)), Codec::Json);
        let error = messages
            .next()
            .await
            .expect("an item")
            .expect_err("malformed");
        assert_eq!(error.code, Code::InvalidArgument);
        assert!(messages.next().await.is_none());
        let cut = Full::new(Bytes::from(vec![0u8, 0, 0]));
        let error = one::<ProcessSelector>(cut, Codec::Json)
            .await
            .expect_err("cut short");
        assert!(error.message.contains("inside an envelope"), "{error}");
    }
}
