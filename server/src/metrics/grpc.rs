//! [`StatusLayer`]: counts the error statuses the API's listeners answer,
//! by reason, wherever the status was made (a handler, the key check, tonic
//! itself). A status is in the response's headers when the call failed
//! before answering (gRPC's trailers-only answer) or in its trailers when a
//! stream ended with it; the layer looks at both, with no allocation: a
//! header lookup per call and a check of each frame for trailers.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tower::{Layer, Service};

use airlock_api::reason::REASON_KEY;

use super::names::reason_index_of;
use super::Metrics;

/// The layer; without metrics it passes everything through.
#[derive(Debug, Clone, Default)]
pub struct StatusLayer {
    metrics: Option<Arc<Metrics>>,
}

impl StatusLayer {
    pub fn new(metrics: Option<Arc<Metrics>>) -> Self {
        StatusLayer { metrics }
    }
}

impl<S> Layer<S> for StatusLayer {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// A service whose error statuses are counted.
#[derive(Debug, Clone)]
pub struct Counted<S> {
    inner: S,
    metrics: Option<Arc<Metrics>>,
}

/// Counts the status in `headers`, if any; whether there was one.
fn count(metrics: &Metrics, headers: &HeaderMap) -> bool {
    let Some(code) = headers.get("grpc-status") else {
        return false;
    };
    if code.as_bytes() != b"0" {
        let reason = headers
            .get(REASON_KEY)
            .and_then(|value| value.to_str().ok());
        metrics.error(reason_index_of(reason));
    }
    true
}

impl<S, Request, B> Service<Request> for Counted<S>
where
    S: Service<Request, Response = http::Response<B>>,
{
    type Response = http::Response<CountedBody<B>>;
    type Error = S::Error;
    type Future = CountedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        CountedFuture {
            inner: self.inner.call(request),
            metrics: self.metrics.clone(),
        }
    }
}

pin_project! {
    /// The answer's future: looks at its headers.
    pub struct CountedFuture<F> {
        #[pin]
        inner: F,
        metrics: Option<Arc<Metrics>>,
    }
}

impl<F, B, E> Future for CountedFuture<F>
where
    F: Future<Output = Result<http::Response<B>, E>>,
{
    type Output = Result<http::Response<CountedBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = ready!(this.inner.poll(cx))?;
        let mut metrics = this.metrics.take();
        // A trailers-only answer: its status is counted now, the body's
        // trailers are not looked at.
        if metrics
            .as_deref()
            .is_some_and(|metrics| count(metrics, response.headers()))
        {
            metrics = None;
        }
        Poll::Ready(Ok(response.map(|inner| CountedBody { inner, metrics })))
    }
}

pin_project! {
    /// The answer's body: counts the status of its trailers.
    pub struct CountedBody<B> {
        #[pin]
        inner: B,
        metrics: Option<Arc<Metrics>>,
    }
}

impl<B: Body> Body for CountedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let frame = ready!(this.inner.poll_frame(cx));
        if let Some(Ok(frame)) = &frame {
            if let Some(trailers) = frame.trailers_ref() {
                if let Some(metrics) = this.metrics.take() {
                    count(&metrics, trailers);
                }
            }
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn only_a_status_that_is_not_ok_counts_by_its_reason() {
        let metrics = Metrics::new();
        let mut headers = HeaderMap::new();
        assert!(!count(&metrics, &headers), "no status: a body follows");
        headers.insert("grpc-status", HeaderValue::from_static("0"));
        assert!(count(&metrics, &headers));
        headers.insert("grpc-status", HeaderValue::from_static("5"));
        headers.insert(REASON_KEY, HeaderValue::from_static("SANDBOX_NOT_FOUND"));
        assert!(count(&metrics, &headers));
        headers.remove(REASON_KEY);
        headers.insert("grpc-status", HeaderValue::from_static("12"));
        assert!(count(&metrics, &headers));
        assert_eq!(metrics.errors[4].get(), 1, "SANDBOX_NOT_FOUND");
        assert_eq!(metrics.errors[0].get(), 1, "UNSPECIFIED");
        let counted: u64 = metrics.errors.iter().map(|c| c.get()).sum();
        assert_eq!(counted, 2);
    }
}
