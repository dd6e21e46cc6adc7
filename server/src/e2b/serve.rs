//! The front's listener: each connection served with hyper (HTTP/1.1 with
//! keep-alive, HTTP/2 where TLS offers it or the client speaks it first),
//! each request routed (`route`), authenticated (`auth`) and handed to the
//! control plane, envd or the code interpreter; any other port of a
//! sandbox goes through the ingress (`ingress`). Each request runs in its
//! `http` span (see `crate::trace`).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use http::{header, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::sync::oneshot;
use tokio::task::JoinSet;
use tracing::Instrument;

use super::reply::{self, Body};
use super::route::{self, Destination};
use super::target::SandboxCall;
use super::{auth, control, envd, ingress, interpreter, Front, ENVD_PORT, INTERPRETER_PORT};
use crate::ingress::bounds;
use crate::listen::TcpEndpoint;
use crate::principal::Principal;
use crate::trace;

/// Serves `endpoint` until `stop`, then ends every connection.
pub(crate) async fn serve(front: Arc<Front>, endpoint: TcpEndpoint, stop: oneshot::Receiver<()>) {
    let mut incoming = endpoint.accept();
    let mut connections = JoinSet::new();
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            _ = &mut stop => break,
            accepted = incoming.recv() => accepted,
        };
        let Some(Ok(connection)) = accepted else {
            match accepted {
                None => break,
                _ => continue,
            }
        };
        while connections.try_join_next().is_some() {}
        let Some(client) = connection.peer_addr() else {
            continue;
        };
        let front = Arc::clone(&front);
        connections.spawn(async move {
            let service = service_fn(move |request| {
                let front = Arc::clone(&front);
                let span = trace::http_span("e2b", &request);
                async move {
                    let response = handle(front, client, request)
                        .instrument(span.clone())
                        .await;
                    trace::record_http_status(&span, response.status());
                    Ok::<_, Infallible>(response)
                }
            });
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(bounds::HEADER_TIMEOUT)
                .max_buf_size(bounds::MAX_HEADER_BYTES)
                .keep_alive(true);
            builder
                .http2()
                .timer(TokioTimer::new())
                .max_header_list_size(bounds::MAX_HEADER_BYTES as u32)
                .keep_alive_interval(Some(bounds::HEADER_TIMEOUT));
            let served = builder
                .serve_connection_with_upgrades(TokioIo::new(connection), service)
                .await;
            if let Err(error) = served {
                tracing::debug!(%client, %error, "e2b: a connection ended");
            }
        });
    }
    connections.abort_all();
    while connections.join_next().await.is_some() {}
}

/// One request: its destination, who calls, then the handler's answer.
async fn handle(
    front: Arc<Front>,
    client: SocketAddr,
    request: Request<Incoming>,
) -> Response<Body> {
    let host = request
        .uri()
        .authority()
        .map(|a| a.as_str().to_owned())
        .or_else(|| {
            request
                .headers()
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(str::to_owned)
        });
    let destination = match route::destination(request.headers(), host.as_deref(), &front.domain) {
        Ok(destination) => destination,
        Err(message) => return reply::error_json(StatusCode::BAD_REQUEST, &message),
    };
    match destination {
        Destination::Control => match auth::api_key(&front, request.headers(), client.ip()) {
            Ok(principal) => control::handle(&front, principal, request).await,
            Err(refused) => refused.response(),
        },
        Destination::Sandbox { id, port } if port != ENVD_PORT && port != INTERPRETER_PORT => {
            ingress::forward(&front, client, request, id, port, host).await
        }
        Destination::Sandbox { id, port } => {
            let Some(entry) = front.state().registry.for_ingress(&id) else {
                return reply::error_json(
                    StatusCode::NOT_FOUND,
                    &format!("sandbox {id} not found"),
                );
            };
            // A signed `/files` URL (the SDKs' download_url / upload_url)
            // stands for the access token, for the one file it names.
            let signed = port == ENVD_PORT
                && envd::files::signature::allows(
                    request.method(),
                    request.uri(),
                    &entry.record.ingress_token,
                );
            if !signed {
                if let Err(refused) = auth::access(&front, request.headers(), client.ip(), &entry) {
                    return refused.response();
                }
            }
            let principal = match entry.record.owner.as_deref() {
                Some(key) => Principal::Key(key.into()),
                None => Principal::Owner,
            };
            let call = SandboxCall {
                front: Arc::clone(&front),
                id: entry.record.id.clone(),
                principal,
            };
            match port {
                ENVD_PORT => envd::handle(call, request).await,
                INTERPRETER_PORT => interpreter::handle(call, request).await,
                _ => ingress::forward(&front, client, request, id, port, host).await,
            }
        }
    }
}
