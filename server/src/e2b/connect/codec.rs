//! The two message codecs E2B's SDKs use: JSON (the proto3 JSON mapping,
//! `application/json`, `application/connect+json`) and binary protobuf
//! (`application/proto`, `application/connect+proto`).

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::error::ConnectError;

/// A message type both codecs can carry (every type of `airlock-e2b-wire`).
pub trait Wire:
    airlock_e2b_wire::prost::Message + Default + Serialize + DeserializeOwned + Send + 'static
{
}

impl<T> Wire for T where
    T: airlock_e2b_wire::prost::Message + Default + Serialize + DeserializeOwned + Send + 'static
{
}

/// How a call's messages are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    Json,
    Proto,
}

impl Codec {
    /// The codec named by a content type's subtype suffix (`json`, `proto`).
    pub fn from_name(name: &str) -> Option<Codec> {
        match name {
            "json" => Some(Codec::Json),
            "proto" => Some(Codec::Proto),
            _ => None,
        }
    }

    /// The content type of a unary call's body.
    pub fn unary_content_type(self) -> &'static str {
        match self {
            Codec::Json => "application/json",
            Codec::Proto => "application/proto",
        }
    }

    /// The content type of a streaming call's body.
    pub fn stream_content_type(self) -> &'static str {
        match self {
            Codec::Json => "application/connect+json",
            Codec::Proto => "application/connect+proto",
        }
    }

    /// `bytes` as a `M`; `Err` (`invalid_argument`) names the message type
    /// and what was wrong.
    pub fn decode<M: Wire>(self, bytes: &[u8]) -> Result<M, ConnectError> {
        let name = short_name::<M>();
        match self {
            // An empty JSON body is not an object; a client sending an
            // empty message sends `{}`, but be lenient as other servers are.
            Codec::Json if bytes.iter().all(u8::is_ascii_whitespace) => Ok(M::default()),
            Codec::Json => serde_json::from_slice(bytes)
                .map_err(|error| ConnectError::invalid(format!("{name}: malformed JSON: {error}"))),
            Codec::Proto => M::decode(bytes).map_err(|error| {
                ConnectError::invalid(format!("{name}: malformed protobuf: {error}"))
            }),
        }
    }

    /// `message` in this codec.
    pub fn encode<M: Wire>(self, message: &M) -> Result<Bytes, ConnectError> {
        match self {
            Codec::Json => serde_json::to_vec(message)
                .map(Bytes::from)
                .map_err(|error| {
                    ConnectError::internal(format!(
                        "{}: could not be encoded: {error}",
                        short_name::<M>()
                    ))
                }),
            Codec::Proto => Ok(Bytes::from(message.encode_to_vec())),
        }
    }
}

/// A message type's last path segment, for errors (`StartRequest`).
fn short_name<M>() -> &'static str {
    let full = std::any::type_name::<M>();
    full.rsplit("::").next().unwrap_or(full)
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_e2b_wire::process::{ProcessSelector, StartRequest};

    #[test]
    fn both_codecs_round_trip() {
        let message = ProcessSelector {
            selector: Some(airlock_e2b_wire::process::process_selector::Selector::Tag(
                "t".into(),
            )),
        };
        for codec in [Codec::Json, Codec::Proto] {
            let bytes = codec.encode(&message).expect("encodes");
            assert_eq!(codec.decode::<ProcessSelector>(&bytes), Ok(message.clone()));
        }
    }

    #[test]
    fn malformed_input_names_the_message_and_the_problem() {
        let error = Codec::Json
            .decode::<StartRequest>(b"{\"process\": 3}")
            .expect_err("refused");
        assert_eq!(error.code, super::super::Code::InvalidArgument);
        assert!(
            error.message.starts_with("StartRequest: malformed JSON"),
            "{error}"
        );
        let error = Codec::Proto
            .decode::<StartRequest>(&[0x0a, 0x05, 0x01])
            .expect_err("refused");
        assert!(
            error
                .message
                .starts_with("StartRequest: malformed protobuf"),
            "{error}"
        );
        assert_eq!(
            Codec::Json.decode::<StartRequest>(b""),
            Ok(StartRequest::default())
        );
    }
}
