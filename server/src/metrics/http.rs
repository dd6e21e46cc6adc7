//! [`MetricsEndpoint`]: the metrics listener. Plain HTTP/1.1, no key:
//! `GET /metrics` answers every metric in Prometheus' text format (0.0.4),
//! anything else 404. It tells counts, never a sandbox or a key; bind it
//! on loopback or a network only Prometheus reaches.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::encoding::prometheus_text;
use prometheus_client::registry::Registry;
use tokio::sync::{oneshot, Semaphore};
use tokio::task::JoinSet;

use super::error::MetricsBindError;

/// How long a client may take to send its request's head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once (Prometheus keeps one per target).
const MAX_CONNECTIONS: usize = 16;

/// The metrics listener's socket, bound (so a port 0 is known before the
/// server starts); cheap to clone.
#[derive(Debug, Clone)]
pub struct MetricsEndpoint {
    listener: Arc<std::net::TcpListener>,
    address: SocketAddr,
}

impl MetricsEndpoint {
    /// Binds `address` (port 0: any free port).
    pub fn bind(address: SocketAddr) -> Result<Self, MetricsBindError> {
        let failed = |source| MetricsBindError { address, source };
        let listener = std::net::TcpListener::bind(address).map_err(failed)?;
        listener.set_nonblocking(true).map_err(failed)?;
        let address = listener.local_addr().map_err(failed)?;
        Ok(MetricsEndpoint {
            listener: Arc::new(listener),
            address,
        })
    }

    /// The address it is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.address
    }

    fn tokio_listener(&self) -> std::io::Result<tokio::net::TcpListener> {
        tokio::net::TcpListener::from_std(self.listener.try_clone()?)
    }
}

/// The answer to one request.
fn answer(registry: &Registry, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    if request.method() != Method::GET || request.uri().path() != "/metrics" {
        return plain(StatusCode::NOT_FOUND, "not found: GET /metrics\n".into());
    }
    let mut text = String::with_capacity(16 * 1024);
    if let Err(error) = prometheus_text::encode(&mut text, registry) {
        return plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode the metrics: {error}\n"),
        );
    }
    let mut response = Response::new(Full::new(Bytes::from(text)));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(prometheus_text::CONTENT_TYPE),
    );
    response
}

fn plain(status: StatusCode, text: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(text)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// Serves `registry` on `endpoint` until `stop`.
pub(crate) async fn serve(
    endpoint: MetricsEndpoint,
    registry: Registry,
    stop: oneshot::Receiver<()>,
) -> Result<(), MetricsBindError> {
    let listener = endpoint
        .tokio_listener()
        .map_err(|source| MetricsBindError {
            address: endpoint.address,
            source,
        })?;
    let registry = Arc::new(registry);
    let places = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut connections = JoinSet::new();
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "metrics: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        while connections.try_join_next().is_some() {}
        let Ok(place) = Arc::clone(&places).try_acquire_owned() else {
            tracing::debug!(%peer, "metrics: too many connections; closing this one");
            continue;
        };
        let registry = Arc::clone(&registry);
        connections.spawn(async move {
            let service = service_fn(move |request: Request<Incoming>| {
                let response = answer(&registry, &request);
                async move { Ok::<_, Infallible>(response) }
            });
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(error) = served {
                tracing::debug!(%peer, %error, "metrics: a connection ended");
            }
            drop(place);
        });
    }
    connections.abort_all();
    while connections.join_next().await.is_some() {}
    Ok(())
}
