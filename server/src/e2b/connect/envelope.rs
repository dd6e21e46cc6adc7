//! The framing of Connect's streaming calls: each message in an envelope of
//! one flags byte and a 4-byte big-endian length, then the message; flag
//! 0x01 marks a compressed message, 0x02 the end of the stream (a JSON
//! message carrying the error, if any, and trailers).

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::code::Code;
use super::error::ConnectError;

/// The envelope's header size.
pub const HEADER_BYTES: usize = 5;
/// Flag: the message is compressed.
pub const FLAG_COMPRESSED: u8 = 0x01;
/// Flag: the end-of-stream message.
pub const FLAG_END_STREAM: u8 = 0x02;

/// One envelope's message.
pub fn encode(flags: u8, message: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(HEADER_BYTES + message.len());
    out.put_u8(flags);
    // Messages are bounded well below 4 GiB (`MAX_MESSAGE_BYTES`).
    out.put_u32(u32::try_from(message.len()).unwrap_or(u32::MAX));
    out.put_slice(message);
    out.freeze()
}

/// The end-of-stream envelope: `{}` for success, `{"error": {...}}` for a
/// failure.
pub fn end_stream(error: Option<&ConnectError>) -> Bytes {
    let body = match error {
        None => serde_json::json!({}),
        Some(error) => serde_json::json!({ "error": error.to_json() }),
    };
    encode(
        FLAG_END_STREAM,
        &serde_json::to_vec(&body).unwrap_or_default(),
    )
}

/// One decoded envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    pub flags: u8,
    pub message: Bytes,
}

/// Envelopes from a byte stream, as the bytes come: feed it with
/// [`Decoder::push`], take whole envelopes with [`Decoder::next_envelope`].
#[derive(Debug)]
pub struct Decoder {
    buffer: BytesMut,
    max_message: usize,
}

impl Decoder {
    /// A decoder refusing messages longer than `max_message` bytes.
    pub fn new(max_message: usize) -> Self {
        Decoder {
            buffer: BytesMut::new(),
            max_message,
        }
    }

    /// More bytes of the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// The next whole envelope, `None` until one has arrived whole. `Err`
    /// for a message past the bound (`resource_exhausted`, before its
    /// bytes are buffered) or a compressed one (this server offers no
    /// compression).
    pub fn next_envelope(&mut self) -> Result<Option<Envelope>, ConnectError> {
        if self.buffer.len() < HEADER_BYTES {
            return Ok(None);
        }
        let flags = self.buffer[0];
        let length = u32::from_be_bytes([
            self.buffer[1],
            self.buffer[2],
            self.buffer[3],
            self.buffer[4],
        ]) as usize;
        if length > self.max_message {
            return Err(ConnectError::new(
                Code::ResourceExhausted,
                format!(
                    "a message of {length} bytes is past this server's bound of {} bytes",
                    self.max_message
                ),
            ));
        }
        if flags & FLAG_COMPRESSED != 0 {
            return Err(ConnectError::unimplemented(
                "a compressed message: this server accepts only uncompressed messages (identity)",
            ));
        }
        if self.buffer.len() < HEADER_BYTES + length {
            return Ok(None);
        }
        self.buffer.advance(HEADER_BYTES);
        let message = self.buffer.split_to(length).freeze();
        Ok(Some(Envelope { flags, message }))
    }

    /// Whether bytes of an unfinished envelope are left.
    pub fn has_partial(&self) -> bool {
        !self.buffer.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_decode_whole_whatever_the_chunks() {
        let mut stream = Vec::new();
        stream.extend_from_slice(&encode(0, b"{\"a\":1}"));
        stream.extend_from_slice(&encode(0, b""));
        stream.extend_from_slice(&end_stream(None));
        let mut decoder = Decoder::new(1024);
        let mut got = Vec::new();
        for byte in &stream {
            decoder.push(std::slice::from_ref(byte));
            while let Some(envelope) = decoder.next_envelope().expect("well framed") {
                got.push(envelope);
            }
        }
        assert!(!decoder.has_partial());
        assert_eq!(got.len(), 3);
        assert_eq!(&got[0].message[..], b"{\"a\":1}");
        assert_eq!(got[1].message.len(), 0);
        assert_eq!(got[2].flags, FLAG_END_STREAM);
        assert_eq!(&got[2].message[..], b"{}");
    }

    #[test]
    fn an_oversized_or_compressed_message_is_refused() {
        let mut decoder = Decoder::new(4);
        decoder.push(&[0, 0, 0, 0, 5]);
        let error = decoder.next_envelope().expect_err("past the bound");
        assert_eq!(error.code, Code::ResourceExhausted);
        assert!(error.message.contains("bound of 4 bytes"), "{error}");
        let mut decoder = Decoder::new(4);
        decoder.push(&encode(FLAG_COMPRESSED, b"x"));
        assert_eq!(
            decoder.next_envelope().expect_err("compressed").code,
            Code::Unimplemented
        );
    }

    #[test]
    fn the_end_of_a_failed_stream_carries_the_error() {
        let end = end_stream(Some(&ConnectError::not_found("no process 3")));
        assert_eq!(end[0], FLAG_END_STREAM);
        let body: serde_json::Value = serde_json::from_slice(&end[5..]).expect("json");
        assert_eq!(
            body,
            serde_json::json!({"error": {"code": "not_found", "message": "no process 3"}})
        );
    }
}
