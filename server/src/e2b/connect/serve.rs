//! Serving one Connect call: [`unary`], [`server_stream`] and
//! [`client_stream`] read the request as its method's kind has it, run the
//! handler within the client's deadline, and answer in the protocol's
//! shape (a bare message or error for unary calls; enveloped messages and
//! an end-of-stream message, always with HTTP 200, for streams).

use std::future::Future;
use std::time::Duration;

use futures::StreamExt;
use http::{header, HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use tokio::time::Instant;

use super::call::{Call, Kind, Refusal};
use super::code::Code;
use super::codec::{Codec, Wire};
use super::envelope;
use super::error::ConnectError;
use super::read::{self, Messages, RequestBody};
use crate::e2b::reply::{full, Body, BoxError};

/// A stream of a server-streaming call's messages.
pub type Replies<M> = futures::stream::BoxStream<'static, Result<M, ConnectError>>;

/// A unary call: one `Req` in, `handler`'s `Resp` (or error) out.
pub async fn unary<B, Req, Resp, F, Fut>(request: Request<B>, handler: F) -> Response<Body>
where
    B: RequestBody,
    Req: Wire,
    Resp: Wire,
    F: FnOnce(Req) -> Fut,
    Fut: Future<Output = Result<Resp, ConnectError>>,
{
    let (parts, body) = request.into_parts();
    let call = match Call::of(&parts.method, &parts.headers, Kind::Unary) {
        Ok(call) => call,
        Err(refusal) => return refused(refusal, Kind::Unary),
    };
    let answer = within(call.timeout, async {
        let message = read::unary::<Req>(body, call.codec).await?;
        handler(message).await
    })
    .await;
    match answer.and_then(|message| call.codec.encode(&message)) {
        Ok(bytes) => with_type(StatusCode::OK, full(bytes), call.codec.unary_content_type()),
        Err(error) => error.unary_response(),
    }
}

/// A server-streaming call: one `Req` in, the messages of the stream
/// `handler` opens out, then the end of the stream (with the error that
/// ended it, if one did).
pub async fn server_stream<B, Req, Resp, F, Fut>(request: Request<B>, handler: F) -> Response<Body>
where
    B: RequestBody,
    Req: Wire,
    Resp: Wire,
    F: FnOnce(Req) -> Fut,
    Fut: Future<Output = Result<Replies<Resp>, ConnectError>>,
{
    let (parts, body) = request.into_parts();
    let call = match Call::of(&parts.method, &parts.headers, Kind::Streaming) {
        Ok(call) => call,
        Err(refusal) => return refused(refusal, Kind::Streaming),
    };
    let deadline = call.timeout.map(|timeout| Instant::now() + timeout);
    let opened = within(call.timeout, async {
        let message = read::one::<Req>(body, call.codec).await?;
        handler(message).await
    })
    .await;
    let replies = match opened {
        Ok(replies) => replies,
        Err(error) => futures::stream::iter([Err(error)]).boxed(),
    };
    streaming_response(call.codec, replies, deadline)
}

/// A client-streaming call: `handler` reads the request's messages
/// ([`Messages`]) and answers one `Resp`, which goes out enveloped, then
/// the end of the stream.
pub async fn client_stream<B, Req, Resp, F, Fut>(request: Request<B>, handler: F) -> Response<Body>
where
    B: RequestBody,
    Req: Wire,
    Resp: Wire,
    F: FnOnce(Messages<Req, B>) -> Fut,
    Fut: Future<Output = Result<Resp, ConnectError>>,
{
    let (parts, body) = request.into_parts();
    let call = match Call::of(&parts.method, &parts.headers, Kind::Streaming) {
        Ok(call) => call,
        Err(refusal) => return refused(refusal, Kind::Streaming),
    };
    let answer = within(call.timeout, handler(Messages::new(body, call.codec))).await;
    let replies = futures::stream::iter([answer]).boxed();
    streaming_response(call.codec, replies, None)
}

/// `future`, failed with `deadline_exceeded` past `timeout`.
async fn within<T>(
    timeout: Option<Duration>,
    future: impl Future<Output = Result<T, ConnectError>>,
) -> Result<T, ConnectError> {
    match timeout {
        None => future.await,
        Some(timeout) => tokio::time::timeout(timeout, future)
            .await
            .unwrap_or_else(|_| Err(deadline_exceeded(timeout))),
    }
}

fn deadline_exceeded(timeout: Duration) -> ConnectError {
    ConnectError::new(
        Code::DeadlineExceeded,
        format!(
            "the call's deadline ({} ms, connect-timeout-ms) passed",
            timeout.as_millis()
        ),
    )
}

/// What a stream's body goes through: messages, then the end.
enum State<M> {
    Open(Replies<M>),
    Done,
}

/// HTTP 200 with `replies` enveloped, ended by the end-of-stream message
/// (the first error ends the stream); `deadline_exceeded` past `deadline`.
fn streaming_response<M: Wire>(
    codec: Codec,
    replies: Replies<M>,
    deadline: Option<Instant>,
) -> Response<Body> {
    let frames = futures::stream::unfold(State::Open(replies), move |state| async move {
        let State::Open(mut replies) = state else {
            return None;
        };
        let next = match deadline {
            None => replies.next().await,
            Some(deadline) => match tokio::time::timeout_at(deadline, replies.next()).await {
                Ok(next) => next,
                Err(_) => Some(Err(ConnectError::new(
                    Code::DeadlineExceeded,
                    "the call's deadline (connect-timeout-ms) passed",
                ))),
            },
        };
        let (bytes, state) = match next {
            None => (envelope::end_stream(None), State::Done),
            Some(Err(error)) => (envelope::end_stream(Some(&error)), State::Done),
            Some(Ok(message)) => match codec.encode(&message) {
                Ok(bytes) => (envelope::encode(0, &bytes), State::Open(replies)),
                Err(error) => (envelope::end_stream(Some(&error)), State::Done),
            },
        };
        Some((Ok::<_, BoxError>(Frame::data(bytes)), state))
    });
    let body = StreamBody::new(frames).boxed_unsync();
    with_type(StatusCode::OK, body, codec.stream_content_type())
}

/// The answer to a request that is not a call of its method's kind.
fn refused(refusal: Refusal, kind: Kind) -> Response<Body> {
    match refusal {
        Refusal::Method(method) => {
            let mut response =
                ConnectError::unimplemented(format!("{method}: Connect calls are POST requests"))
                    .unary_response();
            *response.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
            response
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("POST"));
            response
        }
        Refusal::ContentType(content_type) => {
            let wanted = match kind {
                Kind::Unary => "application/json or application/proto",
                Kind::Streaming => "application/connect+json or application/connect+proto",
            };
            let mut response = ConnectError::invalid(format!(
                "content-type {content_type:?}: this method takes {wanted}"
            ))
            .unary_response();
            *response.status_mut() = StatusCode::UNSUPPORTED_MEDIA_TYPE;
            response
        }
        Refusal::Header(error) => match kind {
            Kind::Unary => error.unary_response(),
            Kind::Streaming => {
                let body = full(envelope::end_stream(Some(&error)));
                with_type(StatusCode::OK, body, "application/connect+json")
            }
        },
    }
}

fn with_type(status: StatusCode, body: Body, content_type: &'static str) -> Response<Body> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_e2b_wire::process::{ListRequest, ListResponse, ProcessInfo, ProcessSelector};
    use bytes::Bytes;
    use http_body_util::Full;

    /// Bytes of a whole response body.
    async fn body_bytes(response: Response<Body>) -> Bytes {
        response
            .into_body()
            .collect()
            .await
            .map(|collected| collected.to_bytes())
            .unwrap_or_default()
    }

    fn request(content_type: &str, body: impl Into<Bytes>) -> Request<Full<Bytes>> {
        Request::post("/process.Process/List")
            .header("content-type", content_type)
            .body(Full::new(body.into()))
            .expect("a request")
    }

    fn listing(pid: u32) -> ListResponse {
        ListResponse {
            processes: vec![ProcessInfo {
                pid,
                ..Default::default()
            }],
        }
    }

    #[tokio::test]
    async fn a_unary_call_answers_in_its_codec() {
        let response = unary(request("application/json", "{}"), |_: ListRequest| async {
            Ok(listing(7))
        })
        .await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            &body_bytes(response).await[..],
            br#"{"processes":[{"pid":7}]}"#
        );
        let response = unary(request("application/proto", ""), |_: ListRequest| async {
            Ok(listing(7))
        })
        .await;
        let bytes = body_bytes(response).await;
        assert_eq!(
            <ListResponse as airlock_e2b_wire::prost::Message>::decode(&bytes[..]).expect("proto"),
            listing(7)
        );
    }

    #[tokio::test]
    async fn unary_errors_have_the_codes_status_and_shape() {
        let response = unary(
            request("application/json", "{\"x"),
            |_: ListRequest| async { Ok(listing(1)) },
        )
        .await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let body: serde_json::Value =
            serde_json::from_slice(&body_bytes(response).await).expect("json");
        assert_eq!(body["code"], "invalid_argument");
        assert!(body["message"]
            .as_str()
            .is_some_and(|m| m.contains("ListRequest: malformed JSON")));
        let response = unary(request("text/plain", "{}"), |_: ListRequest| async {
            Ok(listing(1))
        })
        .await;
        assert_eq!(response.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
        let response = unary(request("application/json", "{}"), |_: ListRequest| async {
            Err::<ListResponse, _>(ConnectError::not_found("no process 3"))
        })
        .await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn a_unary_call_past_its_deadline_is_deadline_exceeded() {
        let mut request = request("application/json", "{}");
        request
            .headers_mut()
            .insert("connect-timeout-ms", HeaderValue::from_static("20"));
        let response = unary(request, |_: ListRequest| async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok(listing(1))
        })
        .await;
        assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    }

    fn envelopes(bytes: &[u8]) -> Vec<envelope::Envelope> {
        let mut decoder = envelope::Decoder::new(1 << 20);
        decoder.push(bytes);
        std::iter::from_fn(|| decoder.next_envelope().expect("framed")).collect()
    }

    #[tokio::test]
    async fn a_server_stream_sends_each_message_then_the_end() {
        let body = envelope::encode(0, br#"{"pid": 3}"#);
        let response = server_stream(
            request("application/connect+json", body),
            |selector: ProcessSelector| async move {
                let pid = match selector.selector {
                    Some(airlock_e2b_wire::process::process_selector::Selector::Pid(pid)) => pid,
                    _ => 0,
                };
                let items = vec![
                    Ok(listing(pid)),
                    Ok(listing(pid + 1)),
                    Err(ConnectError::internal("it broke")),
                    Ok(listing(99)),
                ];
                Ok(futures::stream::iter(items).boxed())
            },
        )
        .await;
        assert_eq!(response.status(), StatusCode::OK);
        let got = envelopes(&body_bytes(response).await);
        assert_eq!(got.len(), 3, "the error ends the stream");
        assert_eq!(&got[0].message[..], br#"{"processes":[{"pid":3}]}"#);
        assert_eq!(got[2].flags, envelope::FLAG_END_STREAM);
        let end: serde_json::Value = serde_json::from_slice(&got[2].message).expect("json");
        assert_eq!(end["error"]["code"], "internal");
    }

    #[tokio::test]
    async fn a_client_stream_reads_all_then_answers_once() {
        let mut body = Vec::new();
        for pid in [1, 2, 3] {
            body.extend_from_slice(&envelope::encode(
                0,
                format!("{{\"pid\":{pid}}}").as_bytes(),
            ));
        }
        let response = client_stream(
            request("application/connect+json", body),
            |mut messages: Messages<ProcessSelector, _>| async move {
                let mut count = 0;
                while let Some(message) = messages.next().await {
                    message?;
                    count += 1;
                }
                Ok(listing(count))
            },
        )
        .await;
        let got = envelopes(&body_bytes(response).await);
        assert_eq!(got.len(), 2);
        assert_eq!(&got[0].message[..], br#"{"processes":[{"pid":3}]}"#);
        assert_eq!(&got[1].message[..], b"{}");
    }
}
