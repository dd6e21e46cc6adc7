//! The ingress listener: each connection served with hyper (HTTP/1.1 with
//! keep-alive and upgrades, HTTP/2 where TLS offers it), each request
//! routed, checked and carried by [`handle`], in its `http` span (see
//! `crate::trace`).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use airlock::{Refusal, Verdict};
use http::{header, HeaderValue, Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::sync::oneshot;
use tokio::task::JoinSet;
use tracing::Instrument;

use super::proxy::{self, Origin};
use super::refuse::{self, Body};
use super::route::{self, Route};
use super::{bounds, token, Ingress};
use crate::listen::TcpEndpoint;
use crate::registry::Entry;
use crate::state::State;
use crate::trace;

/// Serves `endpoint` until `stop`, then ends every connection.
pub async fn serve(
    state: Arc<State>,
    ingress: Arc<Ingress>,
    endpoint: TcpEndpoint,
    stop: oneshot::Receiver<()>,
) {
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
        let (state, ingress) = (Arc::clone(&state), Arc::clone(&ingress));
        connections.spawn(async move {
            let service = service_fn(move |request| {
                let (state, ingress) = (Arc::clone(&state), Arc::clone(&ingress));
                let span = trace::http_span("ingress", &request);
                async move {
                    let response = handle(&state, &ingress, client, request)
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
                tracing::debug!(%client, %error, "ingress: a connection ended");
            }
        });
    }
    connections.abort_all();
    while connections.join_next().await.is_some() {}
}

/// One request: route, sandbox, token, connection, then the guest's
/// answer (or the refusal, recorded in the sandbox's audit log).
async fn handle(
    state: &State,
    ingress: &Ingress,
    client: SocketAddr,
    request: Request<Incoming>,
) -> Response<Body> {
    let response = answer(state, ingress, client, request).await;
    if let Some(metrics) = &state.metrics {
        metrics.ingress_answered(response.status());
    }
    response
}

/// The answer to one request: a client refused too often is refused at
/// once.
async fn answer(
    state: &State,
    ingress: &Ingress,
    client: SocketAddr,
    request: Request<Incoming>,
) -> Response<Body> {
    if let Some(retry) = ingress.probes.blocked_for(client.ip()) {
        return refuse::too_many_refusals(client.ip(), retry);
    }
    match route_and_carry(state, ingress, client, request).await {
        Ok(response) => response,
        Err(refused) => {
            ingress.probes.failed(client.ip());
            refused
        }
    }
}

/// Route, sandbox, token, connection, then the guest's answer; `Err` is a
/// refusal that counts against the client's address (no such route or
/// sandbox, a missing, wrong or doubled token, a doubled Host).
async fn route_and_carry(
    state: &State,
    ingress: &Ingress,
    client: SocketAddr,
    request: Request<Incoming>,
) -> Result<Response<Body>, Response<Body>> {
    if request.headers().get_all(header::HOST).iter().count() > 1 {
        return Err(refuse::bad_request(
            "more than one Host header: send one".to_owned(),
        ));
    }
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
    let Some(route) = route::parse(host.as_deref(), request.uri().path(), &ingress.domain) else {
        return Err(refuse::not_found(format!(
            "not a sandbox's address: open PORT-SANDBOX_ID.{} or /_sandbox/SANDBOX_ID/PORT/ \
             (`airlock sandbox expose SANDBOX_ID PORT` prints it)",
            ingress.domain
        )));
    };
    carry(state, ingress, client, request, route, host).await
}

/// A request another front routed to `route` (the E2B front's sandbox
/// ports other than envd's and the interpreter's), carried as the
/// ingress's own: the same refusal count per address, token rules, audit
/// and forwarding.
pub(crate) async fn handle_routed(
    state: &State,
    ingress: &Ingress,
    client: SocketAddr,
    request: Request<Incoming>,
    route: Route,
    host: Option<String>,
) -> Response<Body> {
    if let Some(retry) = ingress.probes.blocked_for(client.ip()) {
        return refuse::too_many_refusals(client.ip(), retry);
    }
    match carry(state, ingress, client, request, route, host).await {
        Ok(response) => response,
        Err(refused) => {
            ingress.probes.failed(client.ip());
            refused
        }
    }
}

/// Sandbox, token, connection, then the guest's answer, for a request
/// already routed; `Err` as for [`route_and_carry`].
async fn carry(
    state: &State,
    ingress: &Ingress,
    client: SocketAddr,
    request: Request<Incoming>,
    route: Route,
    host: Option<String>,
) -> Result<Response<Body>, Response<Body>> {
    let Some(entry) = state.registry.for_ingress(&route.sandbox) else {
        return Err(refuse::not_found(format!("no sandbox {}", route.sandbox)));
    };
    let id = entry.record.id.clone();
    let port = route.port;
    let record = |handle: Option<&airlock::Sandbox>, verdict: Verdict| {
        if let Some(handle) = handle.or(entry.handle.as_deref()) {
            handle.record_ingress(Some(client.ip()), port, verdict);
        }
    };

    // The token, unless the port is public.
    let query = request.uri().query().map(str::to_owned);
    if !entry.record.public_ports.contains(&port) {
        let presented = match token::presented(request.headers(), query.as_deref()) {
            Ok(presented) => presented,
            Err(ambiguous) => {
                record(None, Verdict::Refused(Refusal::WrongToken));
                return Err(refuse::bad_request(format!(
                    "sandbox {id} port {port}: {ambiguous}: send the traffic token once"
                )));
            }
        };
        let accepted = presented
            .as_deref()
            .is_some_and(|p| token::matches(&entry.record.ingress_token, p));
        if !accepted {
            let refusal = if presented.is_none() {
                Refusal::NoToken
            } else {
                Refusal::WrongToken
            };
            record(None, Verdict::Refused(refusal));
            return Err(refuse::unauthorized(&id, port, presented.is_some()));
        }
        if let Some(query) = query.as_deref().filter(|q| token::query_token(q).is_some()) {
            return Ok(redirect_without_token(
                ingress,
                &route,
                request.uri().path(),
                query,
                &entry,
            ));
        }
    }

    let Some(permit) = ingress.admit(&id) else {
        record(
            None,
            Verdict::Refused(Refusal::TooManyConnections {
                limit: bounds::MAX_CONNECTIONS_PER_SANDBOX,
            }),
        );
        return Ok(refuse::unavailable(
            &id,
            format!(
                "{} connections are open, the most a sandbox may have; retry shortly",
                bounds::MAX_CONNECTIONS_PER_SANDBOX
            ),
        ));
    };

    // The sandbox's handle (restoring one saved to disk) and the guest
    // connection (resuming one paused); the time either took is reported.
    let started = Instant::now();
    let paused = entry.state().is_paused();
    let handle = match state.ingress_handle(&entry).await {
        Ok(handle) => handle,
        Err(status) => return Ok(refuse::unavailable(&id, status.message().to_owned())),
    };
    let guest = match handle.connect_port(port).await {
        Ok(guest) => guest,
        Err(airlock::Error::PortRefused { reason, .. }) => {
            record(Some(&handle), Verdict::Refused(Refusal::PortClosed));
            return Ok(refuse::bad_gateway(&id, port, &reason));
        }
        Err(error) => {
            let message = airlock::error_chain(&error);
            record(
                Some(&handle),
                Verdict::Refused(Refusal::Upstream {
                    message: message.clone(),
                }),
            );
            return Ok(refuse::bad_gateway(&id, port, &message));
        }
    };
    let resumed = paused.then(|| started.elapsed());
    record(Some(&handle), Verdict::Allowed);

    let mut request = request;
    token::strip(request.headers_mut());
    let path_and_query = request
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let guest_path = route::guest_path(&route, &path_and_query);
    let origin = Origin {
        host: host.unwrap_or_default(),
        client,
        tls: ingress.tls,
    };
    let mut response = match proxy::forward(guest, request, &guest_path, &origin, permit).await {
        Ok(response) => response,
        Err(error) => return Ok(refuse::bad_gateway(&id, port, &error.to_string())),
    };
    if let Some(resumed) = resumed {
        server_timing(&mut response, resumed);
    }
    Ok(response)
}

/// `Server-Timing: resume;dur=MS` for a request that resumed its sandbox.
fn server_timing(response: &mut Response<Body>, took: Duration) {
    let value = format!("resume;dur={:.1}", took.as_secs_f64() * 1000.0);
    if let Ok(value) = HeaderValue::from_str(&value) {
        response.headers_mut().append("server-timing", value);
    }
}

/// The answer to a request that carried the token in its query: a cookie
/// for this host (or this sandbox's path) and a redirect to the same
/// address without the token.
fn redirect_without_token(
    ingress: &Ingress,
    route: &Route,
    path: &str,
    query: &str,
    entry: &Entry,
) -> Response<Body> {
    let location = match token::query_without_token(query) {
        Some(rest) => format!("{path}?{rest}"),
        None => path.to_owned(),
    };
    let cookie_path = match &route.prefix {
        Some(prefix) => format!("{prefix}/"),
        None => "/".to_owned(),
    };
    refuse::token_redirect(
        &location,
        &entry.record.ingress_token,
        &cookie_path,
        ingress.tls,
    )
}
