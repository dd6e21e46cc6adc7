//! [`AgentChannel`]: the gRPC channel every call to the agent goes through.
//!
//! It wraps tonic's [`Channel`] (one HTTP/2 connection carrying any number
//! of concurrent calls, redialled through the hybrid-vsock handshake when
//! it breaks) with two things the sandbox's life needs:
//!
//! - admission: a call on a paused sandbox resumes it, waits or fails
//!   ([`PausedCalls`]); a call on an ended one fails at once with the
//!   reason;
//! - accounting: a call is in flight from the request until its response
//!   body (a stream of output, say) is dropped, which is what the idle
//!   timeout measures.
//!
//! A call that breaks because the VM ended reports the end's reason rather
//! than a transport error.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tonic::body::Body;
use tonic::transport::Channel;
use tonic::Status;
use tower::{Service, ServiceExt};

use super::vm::{CallEpoch, CallGuard, VmShared};
use super::PausedCalls;
use super::Unavailable;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The channel to one sandbox's agent.
#[derive(Debug, Clone)]
pub(crate) struct AgentChannel {
    inner: Channel,
    vm: Arc<VmShared>,
    paused_calls: PausedCalls,
}

impl AgentChannel {
    pub fn new(inner: Channel, vm: Arc<VmShared>, paused_calls: PausedCalls) -> Self {
        AgentChannel {
            inner,
            vm,
            paused_calls,
        }
    }
}

impl AgentChannel {
    /// The same channel, with `policy` for calls made while paused.
    pub fn with_paused_calls(&self, policy: PausedCalls) -> Self {
        AgentChannel {
            paused_calls: policy,
            ..self.clone()
        }
    }
}

impl Service<http::Request<Body>> for AgentChannel {
    type Response = http::Response<TrackedBody>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // Readiness is awaited per call in `call`, after admission.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let inner = self.inner.clone();
        let vm = Arc::clone(&self.vm);
        let policy = self.paused_calls;
        Box::pin(async move {
            // Counted before admission, so an idle pause cannot slip in
            // between the two.
            let guard = vm.begin_call();
            vm.admit(policy).await?;
            let epoch = vm.epoch();
            match inner.oneshot(request).await {
                Ok(response) => Ok(response.map(|body| TrackedBody {
                    inner: body,
                    guard,
                    epoch,
                })),
                Err(error) => match vm.why_broken(epoch) {
                    Some(why) => Err(why.into()),
                    None => Err(error.into()),
                },
            }
        })
    }
}

/// A response body that keeps its call counted as in flight until dropped,
/// and names the VM's end when the stream breaks because of it.
#[derive(Debug)]
pub(crate) struct TrackedBody {
    inner: Body,
    guard: CallGuard,
    /// Where the VM's life was when the call began.
    epoch: CallEpoch,
}

impl HttpBody for TrackedBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Err(status))) => {
                let status = match self.guard.vm().why_broken(self.epoch) {
                    Some(why) => unavailable_status(why),
                    None => status,
                };
                Poll::Ready(Some(Err(status)))
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A broken stream's status, naming what broke it; the code stays
/// `UNAVAILABLE`, which output streams re-attach on.
fn unavailable_status(unavailable: Unavailable) -> Status {
    let mut status = Status::unavailable(unavailable.to_string());
    status.set_source(Arc::new(unavailable));
    status
}
