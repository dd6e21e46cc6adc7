//! The driver's wire format (see `driver.py` and docs/protocol.md): frames
//! of a 4-byte big-endian length and UTF-8 JSON, the messages they carry,
//! and MIME bundles turned into the protocol's [`RichOutput`].
//!
//! The driver runs user code in its own process, so everything it sends is
//! treated as untrusted: a frame past [`MAX_FRAME`] or a message that does
//! not parse is a [`CodeError::Driver`], and a bundle is held to the
//! contract's output limit here whatever the driver did.

use airlock_proto::contract::code::MAX_OUTPUT_BYTES;
use airlock_proto::v1::{MimeData, RichOutput};
use base64::Engine;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::CodeError;

/// The largest frame the agent reads: a whole output in base64 with room
/// for its JSON.
pub const MAX_FRAME: usize = 2 * MAX_OUTPUT_BYTES + (1 << 20);

/// A message from the driver.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum DriverMessage {
    /// The interpreter is up.
    Ready {
        /// `python` or `bash`.
        language: String,
        /// Its version.
        language_version: String,
    },
    /// The interpreter cannot run here (bash missing); the driver exits.
    Unavailable {
        /// Why.
        message: String,
    },
    /// Text the driver captured itself (its fds are read by the agent).
    Stream {
        /// `stdout` or `stderr`.
        name: String,
        /// The text.
        text: String,
    },
    /// The value of the cell's last expression.
    ExecuteResult {
        /// The MIME bundle.
        data: Map<String, Value>,
    },
    /// A rich output shown during the cell.
    DisplayData {
        /// The MIME bundle.
        data: Map<String, Value>,
    },
    /// The cell raised.
    Error {
        /// The exception's class name.
        ename: String,
        /// Its `str()`.
        evalue: String,
        /// The formatted traceback.
        #[serde(default)]
        traceback: Vec<String>,
    },
    /// The cell's end.
    ExecuteReply {
        /// `ok` or `error`.
        status: String,
        /// The cell's number.
        execution_count: u32,
        /// The interpreter was replaced during the cell (bash's `exit`).
        #[serde(default)]
        restarted: bool,
    },
    /// Anything newer than this agent: ignored.
    #[serde(other)]
    Unknown,
}

/// A request to the driver.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum DriverRequest {
    /// Run a cell.
    ExecuteRequest {
        /// Its source.
        code: String,
    },
}

/// Writes one frame.
pub async fn write_frame(
    out: &mut (impl AsyncWrite + Unpin),
    request: &DriverRequest,
) -> Result<(), CodeError> {
    let body = serde_json::to_vec(request).map_err(|e| CodeError::Driver(e.to_string()))?;
    let length = u32::try_from(body.len())
        .map_err(|_| CodeError::Driver(format!("a cell of {} bytes", body.len())))?;
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&length.to_be_bytes());
    frame.extend_from_slice(&body);
    out.write_all(&frame).await.map_err(CodeError::DriverIo)
}

/// Reads one frame; `None` at a clean end of stream.
pub async fn read_frame(
    input: &mut (impl AsyncRead + Unpin),
) -> Result<Option<DriverMessage>, CodeError> {
    let mut header = [0u8; 4];
    match input.read_exact(&mut header).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(CodeError::DriverIo(e)),
    }
    let length = u32::from_be_bytes(header) as usize;
    if length > MAX_FRAME {
        return Err(CodeError::Driver(format!(
            "a message of {length} bytes, more than {MAX_FRAME}"
        )));
    }
    let mut body = vec![0u8; length];
    input
        .read_exact(&mut body)
        .await
        .map_err(CodeError::DriverIo)?;
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| CodeError::Driver(format!("a message that does not parse: {e}")))
}

/// Whether Jupyter carries `mime` as base64 (binary images, PDF).
pub fn is_binary(mime: &str) -> bool {
    (mime.starts_with("image/") && mime != "image/svg+xml") || mime == "application/pdf"
}

/// Whether `mime` holds a JSON value.
pub fn is_json(mime: &str) -> bool {
    mime == "application/json" || mime.ends_with("+json")
}

/// A driver's MIME bundle as the protocol carries it: text/plain first,
/// JSON as JSON text, binary types decoded from base64, everything within
/// the contract's output limit (representations past it are left out).
pub fn rich_output(data: Map<String, Value>) -> RichOutput {
    let mut items: Vec<MimeData> = Vec::with_capacity(data.len());
    for (mime, value) in data {
        let bytes = match representation(&mime, value) {
            Some(bytes) => bytes,
            None => {
                tracing::debug!(mime, "representation left out: malformed");
                continue;
            }
        };
        items.push(MimeData {
            mime_type: mime,
            data: bytes,
        });
    }
    // Stable: text/plain first, the rest in the map's (sorted) order.
    items.sort_by_key(|item| item.mime_type != "text/plain");
    let mut used = 0usize;
    items.retain(|item| {
        if used + item.data.len() > MAX_OUTPUT_BYTES {
            tracing::debug!(mime = item.mime_type, "representation left out: too big");
            return false;
        }
        used += item.data.len();
        true
    });
    RichOutput { data: items }
}

fn representation(mime: &str, value: Value) -> Option<Bytes> {
    if is_json(mime) {
        return serde_json::to_vec(&value).ok().map(Bytes::from);
    }
    match value {
        Value::String(text) if is_binary(mime) => {
            let compact: String = text.split_whitespace().collect();
            base64::engine::general_purpose::STANDARD
                .decode(compact)
                .ok()
                .map(Bytes::from)
        }
        Value::String(text) => Some(Bytes::from(text)),
        // A list of lines, as notebooks store text.
        Value::Array(lines) if !is_binary(mime) => {
            let mut text = String::new();
            for line in lines {
                text.push_str(line.as_str()?);
            }
            Some(Bytes::from(text))
        }
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bundle(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn messages_parse_and_unknown_types_are_ignored() {
        let ready: DriverMessage = serde_json::from_value(
            json!({"type": "ready", "language": "python", "language_version": "3.11.2"}),
        )
        .unwrap();
        assert!(matches!(ready, DriverMessage::Ready { .. }));
        let reply: DriverMessage = serde_json::from_value(
            json!({"type": "execute_reply", "status": "ok", "execution_count": 3}),
        )
        .unwrap();
        assert_eq!(
            reply,
            DriverMessage::ExecuteReply {
                status: "ok".into(),
                execution_count: 3,
                restarted: false,
            }
        );
        let later: DriverMessage =
            serde_json::from_value(json!({"type": "comm_open", "x": 1})).unwrap();
        assert_eq!(later, DriverMessage::Unknown);
        let request = serde_json::to_value(DriverRequest::ExecuteRequest { code: "1".into() });
        assert_eq!(
            request.unwrap(),
            json!({"type": "execute_request", "code": "1"})
        );
    }

    #[test]
    fn bundles_decode_base64_keep_json_and_put_text_first() {
        let out = rich_output(bundle(json!({
            "text/html": "<b>x</b>",
            "image/png": "iVBORw0KGgo=",
            "application/json": {"a": [1, 2]},
            "text/plain": "{'a': [1, 2]}",
        })));
        let types: Vec<_> = out.data.iter().map(|d| d.mime_type.as_str()).collect();
        assert_eq!(
            types,
            ["text/plain", "application/json", "image/png", "text/html"]
        );
        assert_eq!(&out.data[1].data[..], br#"{"a":[1,2]}"#);
        assert_eq!(&out.data[2].data[..], b"\x89PNG\r\n\x1a\n");
        assert_eq!(&out.data[3].data[..], b"<b>x</b>");
    }

    #[test]
    fn malformed_and_oversized_representations_are_left_out() {
        let big = "x".repeat(MAX_OUTPUT_BYTES);
        let out = rich_output(bundle(json!({
            "text/plain": "small",
            "image/png": "not base64!",
            "text/html": big,
            "image/svg+xml": "<svg/>",
        })));
        let types: Vec<_> = out.data.iter().map(|d| d.mime_type.as_str()).collect();
        assert_eq!(types, ["text/plain", "image/svg+xml"]);
    }

    #[tokio::test]
    async fn frames_round_trip_and_big_ones_are_refused() {
        let (mut a, mut b) = tokio::io::duplex(1 << 16);
        write_frame(
            &mut a,
            &DriverRequest::ExecuteRequest {
                code: "x = 1".into(),
            },
        )
        .await
        .unwrap();
        let mut header = [0u8; 4];
        b.read_exact(&mut header).await.unwrap();
        let mut body = vec![0; u32::from_be_bytes(header) as usize];
        b.read_exact(&mut body).await.unwrap();
        assert_eq!(body, br#"{"type":"execute_request","code":"x = 1"}"#);

        let message = br#"{"type":"stream","name":"stdout","text":"hi"}"#;
        a.write_all(&(message.len() as u32).to_be_bytes())
            .await
            .unwrap();
        a.write_all(message).await.unwrap();
        let read = read_frame(&mut b).await.unwrap();
        assert!(
            matches!(read, Some(DriverMessage::Stream { .. })),
            "{read:?}"
        );

        a.write_all(&(MAX_FRAME as u32 + 1).to_be_bytes())
            .await
            .unwrap();
        let refused = read_frame(&mut b).await.unwrap_err();
        assert!(refused.to_string().contains("bytes"), "{refused}");
        drop(a);
        assert!(read_frame(&mut b).await.unwrap().is_none());
    }
}
