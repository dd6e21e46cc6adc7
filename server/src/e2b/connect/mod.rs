//! The Connect protocol (connectrpc.com/docs/protocol), server side, as
//! envd's services speak it to E2B's SDKs: unary calls (a bare JSON or
//! protobuf body each way), server-streaming and client-streaming calls
//! (5-byte envelopes, an end-of-stream message with the error), deadlines
//! from `connect-timeout-ms`, over HTTP/1.1 or HTTP/2 alike.
//!
//! A service's handler is one call per method:
//!
//! ```ignore
//! "/process.Process/List" => connect::unary(request, |req: ListRequest| async move {
//!     Ok::<ListResponse, ConnectError>(...)
//! }).await,
//! "/process.Process/Start" => connect::server_stream(request, |req: StartRequest| async move {
//!     Ok(stream_of_start_responses.boxed())  // a `Replies<StartResponse>`
//! }).await,
//! "/process.Process/StreamInput" => connect::client_stream(request, |mut messages| async move {
//!     while let Some(message) = messages.next().await { let message = message?; ... }
//!     Ok(StreamInputResponse {})
//! }).await,
//! ```
//!
//! Errors are [`ConnectError`]s; a `tonic::Status` of our services becomes
//! one with `ConnectError::from` (the same code and message). Messages are
//! bounded by [`MAX_MESSAGE_BYTES`] (`resource_exhausted` naming the
//! bound); a malformed message is `invalid_argument` naming its type and
//! what was wrong. No compression is offered (the SDKs send none).

mod call;
mod code;
mod codec;
pub(super) mod envelope;
mod error;
mod read;
mod serve;

pub use code::Code;
pub use error::ConnectError;
pub use read::{Messages, RequestBody};
pub use serve::{client_stream, server_stream, unary, Replies};

/// The largest message a call may send (one message: a stream's messages
/// are bounded each).
pub const MAX_MESSAGE_BYTES: usize = 4 << 20;
