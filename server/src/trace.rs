//! Spans for the calls the server answers, for whatever subscriber the
//! binary installs (the CLI's JSON log, its OTLP exporter).
//!
//! - [`TraceLayer`]: one `rpc` span per gRPC call of the API's listeners,
//!   named as OpenTelemetry names a gRPC server span
//!   (`otel.name = "airlock.api.v1.Sandboxes/Create"`, `otel.kind =
//!   "server"`, `rpc.system`, `rpc.service`, `rpc.method`). The handler
//!   runs in it, so what it starts (a sandbox's start and its parts) nests
//!   under it; the response's body keeps it open, so a stream's span lasts
//!   as long as the stream. `rpc.grpc.status_code` is recorded from the
//!   response's headers (a trailers-only answer) or its trailers (1,
//!   CANCELLED, when the client reset the stream before them), and
//!   `sandbox` by the handler that finds or makes the call's sandbox
//!   ([`record_sandbox`]).
//! - [`http_span`] and [`record_http_status`]: one span per HTTP request of
//!   the E2B front and of the ingress, closed when the response's head is
//!   ready.
//!
//! The fields borrow from the request: no allocation unless a subscriber
//! wants the span.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tower::{Layer, Service};
use tracing::field::Empty;
use tracing::Span;

/// The gRPC codes OpenTelemetry counts as a server's error (the others
/// are the caller's: a refusal, a missing sandbox).
const SERVER_ERRORS: [i64; 6] = [2, 4, 12, 13, 14, 15];

/// Records the sandbox a call is about on the current span (the call's
/// `rpc` span, when a handler calls it; nothing on any other span).
pub fn record_sandbox(id: &str) {
    Span::current().record("sandbox", id);
}

/// The span's name, the service and the method of the gRPC call of
/// `path` (`/airlock.api.v1.Sandboxes/Create`).
fn rpc_names(path: &str) -> (&str, &str, &str) {
    let name = path.strip_prefix('/').unwrap_or(path);
    let (service, method) = name.split_once('/').unwrap_or((name, ""));
    (name, service, method)
}

/// A span for the gRPC call of `path`.
fn rpc_span(path: &str) -> Span {
    let (name, service, method) = rpc_names(path);
    tracing::info_span!(
        "rpc",
        otel.name = name,
        otel.kind = "server",
        otel.status_code = Empty,
        rpc.system = "grpc",
        rpc.service = service,
        rpc.method = method,
        rpc.grpc.status_code = Empty,
        sandbox = Empty,
    )
}

/// Records the gRPC status in `headers` on `span`, if there is one;
/// whether there was.
fn record_grpc_status(span: &Span, headers: &HeaderMap) -> bool {
    let Some(value) = headers.get("grpc-status") else {
        return false;
    };
    let Some(code) = std::str::from_utf8(value.as_bytes())
        .ok()
        .and_then(|text| text.parse::<i64>().ok())
    else {
        return false;
    };
    span.record("rpc.grpc.status_code", code);
    if SERVER_ERRORS.contains(&code) {
        span.record("otel.status_code", "error");
    }
    true
}

/// The layer that puts each call in its `rpc` span.
#[derive(Debug, Clone, Copy, Default)]
pub struct TraceLayer;

impl<S> Layer<S> for TraceLayer {
    type Service = Traced<S>;

    fn layer(&self, inner: S) -> Traced<S> {
        Traced { inner }
    }
}

/// A service whose calls run in their `rpc` span.
#[derive(Debug, Clone)]
pub struct Traced<S> {
    inner: S,
}

impl<S, B, R> Service<http::Request<B>> for Traced<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>>,
{
    type Response = http::Response<TracedBody<R>>;
    type Error = S::Error;
    type Future = TracedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let span = rpc_span(request.uri().path());
        let inner = span.in_scope(|| self.inner.call(request));
        TracedFuture {
            inner,
            span: Some(span),
        }
    }
}

pin_project! {
    /// The answer's future, polled in the call's span.
    pub struct TracedFuture<F> {
        #[pin]
        inner: F,
        span: Option<Span>,
    }
}

impl<F, B, E> Future for TracedFuture<F>
where
    F: Future<Output = Result<http::Response<B>, E>>,
{
    type Output = Result<http::Response<TracedBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let polled = match this.span {
            Some(span) => span.in_scope(|| this.inner.poll(cx)),
            None => this.inner.poll(cx),
        };
        let response = ready!(polled)?;
        let span = this.span.take();
        // A trailers-only answer: its status is known now.
        let status = span
            .as_ref()
            .is_some_and(|span| record_grpc_status(span, response.headers()));
        Poll::Ready(Ok(response.map(|inner| TracedBody {
            inner,
            call: CallEnd { span, status },
        })))
    }
}

pin_project! {
    /// The answer's body: polled in the call's span, which it keeps open
    /// until the body ends; records the status of its trailers.
    pub struct TracedBody<B> {
        #[pin]
        inner: B,
        call: CallEnd,
    }
}

/// The call's span while its answer is sent, and whether its status was
/// seen. A body dropped before its status (the client reset the stream:
/// went away, or read what it wanted, as a program's exit event, and hung
/// up before the trailers) leaves the call CANCELLED, as gRPC has a call
/// its client cancels.
#[derive(Debug)]
struct CallEnd {
    span: Option<Span>,
    status: bool,
}

/// gRPC's CANCELLED.
const CANCELLED: i64 = 1;

impl Drop for CallEnd {
    fn drop(&mut self) {
        if let (Some(span), false) = (&self.span, self.status) {
            span.record("rpc.grpc.status_code", CANCELLED);
        }
    }
}

impl<B: Body> Body for TracedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let call = this.call;
        let frame = match &call.span {
            Some(span) => ready!(span.in_scope(|| this.inner.poll_frame(cx))),
            None => ready!(this.inner.poll_frame(cx)),
        };
        match &frame {
            Some(Ok(frame)) => {
                if let (Some(trailers), Some(span)) = (frame.trailers_ref(), call.span.as_ref()) {
                    call.status |= record_grpc_status(span, trailers);
                }
            }
            // The end: the call's span closes (unless a clone lives on).
            None | Some(Err(_)) => call.span = None,
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A span for one HTTP request of `front` (`"e2b"`, `"ingress"`).
pub fn http_span<B>(front: &'static str, request: &http::Request<B>) -> Span {
    tracing::info_span!(
        "http",
        otel.name = front,
        otel.kind = "server",
        otel.status_code = Empty,
        http.request.method = request.method().as_str(),
        url.path = request.uri().path(),
        http.response.status_code = Empty,
        sandbox = Empty,
    )
}

/// Records the status of the answer to `span`'s request.
pub fn record_http_status(span: &Span, status: http::StatusCode) {
    span.record("http.response.status_code", status.as_u16());
    if status.is_server_error() {
        span.record("otel.status_code", "error");
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn a_call_is_named_by_its_service_and_method() {
        assert_eq!(
            rpc_names("/airlock.api.v1.Sandboxes/Create"),
            (
                "airlock.api.v1.Sandboxes/Create",
                "airlock.api.v1.Sandboxes",
                "Create"
            )
        );
        assert_eq!(rpc_names("/"), ("", "", ""));
        assert_eq!(rpc_names("odd"), ("odd", "odd", ""));
    }

    #[test]
    fn a_status_is_read_from_headers_or_trailers_when_there_is_one() {
        let span = Span::none();
        let mut headers = HeaderMap::new();
        assert!(!record_grpc_status(&span, &headers), "no status yet");
        headers.insert("grpc-status", HeaderValue::from_static("0"));
        assert!(record_grpc_status(&span, &headers));
        headers.insert("grpc-status", HeaderValue::from_static("five"));
        assert!(!record_grpc_status(&span, &headers), "not a code");
    }
}
