//! The HTTP/1.1 proxy for one guest connection to a host with secrets.
//!
//! hyper serves the guest's requests (keep-alive, a bound on the request
//! head, a timeout on reading each head that also closes a connection left
//! idle that long) and sends them on with hyper's client. Each request head
//! is checked and rewritten by [`prepare`](super::request); a refused
//! request is answered here (421, 403 or 400, whose reason phrase and short
//! text body say why in the gateway's one wording, `crate::told`)
//! and reported through [`HttpGate::on_refusal`]. Bodies stream through
//! both ways without being buffered whole.
//!
//! One upstream connection serves one guest connection: it is opened on the
//! first request that passes, reused for the next, and opened again if the
//! server closed it. When it cannot be opened or fails before a response,
//! the guest gets 502 with the reason.
//!
//! Not served: protocol upgrades (`Upgrade` is hop-by-hop and removed, so a
//! WebSocket handshake gets the server's non-upgrade answer) and HTTP/2
//! (ALPN offers the guest `http/1.1` only).

use std::convert::Infallible;
use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::ext::ReasonPhrase;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Mutex;
use tokio_rustls::TlsAcceptor;
use tracing::Instrument;

use super::ca::{CaError, SandboxCa};
use super::request::{prepare, strip_hop_by_hop, HttpRefusal};
use super::secret::normalize_host;
use super::set::Secrets;
use super::untrusted::{self, Untrusted};
use super::upstream::{Upstream, UpstreamError};
use crate::audit::Refusal;
use crate::told;

/// The smallest read buffer hyper accepts; a smaller `max_header_bytes`
/// still bounds the head, but not the buffer.
const MIN_BUF_BYTES: usize = 8192;

/// A body toward the guest: the upstream's, or one of ours.
type GateBody = BoxBody<Bytes, hyper::Error>;

/// Why a proxied guest connection ended in error.
#[derive(Debug, thiserror::Error)]
pub enum HttpGateError {
    /// No certificate could be made for the host.
    #[error("no certificate for the guest")]
    Ca(#[from] CaError),
    /// The TLS handshake with the guest failed.
    #[error("TLS handshake with the guest failed")]
    Handshake(#[source] io::Error),
    /// The guest did not finish its TLS handshake in time.
    #[error("the guest's TLS handshake timed out")]
    HandshakeTimeout,
    /// The guest's HTTP connection failed (a head too large or too slow,
    /// bytes that are not HTTP, a reset).
    #[error("guest HTTP connection failed")]
    Guest(#[source] hyper::Error),
    /// The upstream connection could not be opened.
    #[error("upstream connection failed")]
    Upstream(#[from] UpstreamError),
    /// The upstream failed before answering a request.
    #[error("upstream HTTP failed")]
    UpstreamHttp(#[source] hyper::Error),
}

/// What the proxy needs to serve one guest connection.
pub struct HttpGate {
    /// The host the connection is for; every request must name it.
    pub expected_host: String,
    /// The sandbox's secrets.
    pub secrets: Secrets,
    /// Where requests go on to.
    pub upstream: Upstream,
    /// The largest request head (start line and headers) read from the
    /// guest; a larger one gets 431 and the connection is closed.
    pub max_header_bytes: usize,
    /// How long the guest may take to send a request head, counted from
    /// when the proxy is ready for it (so also the keep-alive idle
    /// timeout), and to finish a TLS handshake.
    pub header_timeout: Duration,
    /// Told of every request refused.
    pub on_refusal: Arc<dyn Fn(HttpRefusal) + Send + Sync>,
    /// Told when TLS fails because a side does not trust a certificate:
    /// the upstream's (an unknown issuer), or the guest's refusal of the
    /// sandbox's.
    pub on_untrusted: Arc<dyn Fn(Untrusted) + Send + Sync>,
}

impl fmt::Debug for HttpGate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpGate")
            .field("expected_host", &self.expected_host)
            .field("secrets", &self.secrets)
            .field("upstream", &self.upstream)
            .field("max_header_bytes", &self.max_header_bytes)
            .field("header_timeout", &self.header_timeout)
            .finish_non_exhaustive()
    }
}

/// Serves HTTP/1.1 on the guest's connection until it closes, sending
/// every request that passes the checks on to `gate.upstream`.
pub async fn serve_http<S>(guest: S, gate: HttpGate) -> Result<(), HttpGateError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let span = tracing::debug_span!("http_gate", host = %gate.expected_host);
    let mut server = hyper::server::conn::http1::Builder::new();
    server
        .timer(TokioTimer::new())
        .keep_alive(true)
        .header_read_timeout(gate.header_timeout)
        .max_header_size(gate.max_header_bytes)
        .max_buf_size(gate.max_header_bytes.max(MIN_BUF_BYTES));
    let proxy = Arc::new(Proxy {
        expected_host: normalize_host(&gate.expected_host),
        gate,
        sender: Mutex::new(None),
    });
    let service = service_fn(move |request| {
        let proxy = Arc::clone(&proxy);
        async move { Ok::<_, Infallible>(proxy.handle(request).await) }
    });
    let served = server
        .serve_connection(TokioIo::new(guest), service)
        .instrument(span)
        .await;
    served.map_err(HttpGateError::Guest)
}

/// Ends the guest's TLS with a certificate for `host` from `ca`, then
/// [`serve_http`] on it. `guest` may be a
/// [`Prefixed`](crate::prefixed::Prefixed) stream replaying a
/// ClientHello already read.
pub async fn intercept_tls<S>(
    guest: S,
    host: &str,
    ca: &SandboxCa,
    gate: HttpGate,
) -> Result<(), HttpGateError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let config = ca.server_config_for(host)?;
    let handshake = TlsAcceptor::from(config).accept(guest);
    let tls = match tokio::time::timeout(gate.header_timeout, handshake).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(error)) => {
            if let Some(untrusted) = untrusted::of_guest_handshake(&error) {
                (gate.on_untrusted)(untrusted);
            }
            return Err(HttpGateError::Handshake(error));
        }
        Err(_) => return Err(HttpGateError::HandshakeTimeout),
    };
    tracing::debug!(host, "guest TLS intercepted");
    serve_http(tls, gate).await
}

/// The state of one guest connection.
struct Proxy {
    gate: HttpGate,
    expected_host: String,
    /// The upstream connection, once opened. Requests on one HTTP/1.1
    /// connection are served one after another, so this is never waited
    /// on by two.
    sender: Mutex<Option<SendRequest<Incoming>>>,
}

impl Proxy {
    async fn handle(&self, request: Request<Incoming>) -> Response<GateBody> {
        let (mut parts, body) = request.into_parts();
        if let Err(refusal) = prepare(&mut parts, &self.expected_host, &self.gate.secrets) {
            tracing::info!(%refusal, "request refused");
            let reason = told::sentence(&Refusal::from(refusal.clone()), &self.destination());
            let response = text_response(refusal.status(), &reason);
            (self.gate.on_refusal)(refusal);
            return response;
        }
        let method = parts.method.clone();
        match self.send(Request::from_parts(parts, body)).await {
            Ok(response) => {
                tracing::debug!(%method, status = %response.status(), "request forwarded");
                let (mut parts, body) = response.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                Response::from_parts(parts, body.boxed())
            }
            Err(error) => {
                tracing::warn!(%method, error = %airlock_report::chain(&error), "upstream failed");
                let untrusted = match &error {
                    HttpGateError::Upstream(upstream) => untrusted::of_upstream(upstream),
                    _ => None,
                };
                let refusal = match &untrusted {
                    Some(Untrusted::Upstream { detail }) => Refusal::UpstreamUntrusted {
                        detail: detail.clone(),
                    },
                    _ => Refusal::Upstream {
                        message: guest_reason(&error),
                    },
                };
                if let Some(untrusted) = untrusted {
                    (self.gate.on_untrusted)(untrusted);
                }
                let reason = told::sentence(&refusal, &self.destination());
                text_response(StatusCode::BAD_GATEWAY, &reason)
            }
        }
    }

    /// The host and port the connection is for, as the guest named them.
    fn destination(&self) -> String {
        format!(
            "{}:{}",
            self.expected_host,
            self.gate.upstream.addr().port()
        )
    }

    /// Sends on the open upstream connection, or a new one if there is
    /// none or it closed before taking the request.
    async fn send(&self, request: Request<Incoming>) -> Result<Response<Incoming>, HttpGateError> {
        let mut slot = self.sender.lock().await;
        let mut request = request;
        if let Some(sender) = slot.as_mut() {
            if sender.ready().await.is_ok() {
                match sender.try_send_request(request).await {
                    Ok(response) => return Ok(response),
                    Err(mut failed) => match failed.take_message() {
                        // Never written: it can go on a fresh connection.
                        Some(unsent) => request = unsent,
                        None => {
                            *slot = None;
                            return Err(HttpGateError::UpstreamHttp(failed.into_error()));
                        }
                    },
                }
            }
            tracing::debug!("upstream connection closed; opening another");
        }
        *slot = None;
        let mut sender = self.open().await?;
        let response = sender
            .send_request(request)
            .await
            .map_err(HttpGateError::UpstreamHttp)?;
        *slot = Some(sender);
        Ok(response)
    }

    async fn open(&self) -> Result<SendRequest<Incoming>, HttpGateError> {
        let io = self.gate.upstream.connect().await?;
        let (sender, connection) = hyper::client::conn::http1::Builder::new()
            .handshake(TokioIo::new(io))
            .await
            .map_err(HttpGateError::UpstreamHttp)?;
        tokio::spawn(
            async move {
                if let Err(error) = connection.await {
                    tracing::debug!(error = %airlock_report::chain(&error), "upstream connection ended");
                }
            }
            .in_current_span(),
        );
        tracing::debug!(upstream = ?self.gate.upstream, "upstream connection opened");
        Ok(sender)
    }
}

/// A short plain-text answer from the proxy itself: `reason` (a
/// [`told::sentence`]) as its reason phrase and in its body.
fn text_response(status: StatusCode, reason: &str) -> Response<GateBody> {
    let mut response = Response::new(
        Full::new(Bytes::from(told::body(status, reason)))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if let Ok(phrase) = ReasonPhrase::try_from(told::reason_phrase(reason).into_bytes()) {
        response.extensions_mut().insert(phrase);
    }
    response
}

/// Why the upstream failed, for the guest: what the OS or TLS said,
/// without the address the host resolved the name to.
fn guest_reason(error: &HttpGateError) -> String {
    match error {
        HttpGateError::Upstream(UpstreamError::Connect { source, .. }) => source.to_string(),
        HttpGateError::Upstream(UpstreamError::Handshake { source, .. }) => {
            format!("TLS handshake failed: {source}")
        }
        HttpGateError::Upstream(UpstreamError::Timeout { .. }) => "connecting timed out".to_owned(),
        other => airlock_report::chain(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secrets::test_servers::{
        echo_upstream, exchange, guest_client, EchoOptions, EchoUpstream, TestResult,
    };
    use crate::secrets::{upstream_client_config, Secret};
    use http_body_util::Full;
    use std::sync::Mutex as StdMutex;

    /// Long enough for loopback; a hang shows as a failure, not a stuck run.
    const PATIENCE: Duration = Duration::from_secs(20);

    const TLS: EchoOptions<'static> = EchoOptions {
        tls_name: Some("api.test"),
        keep_alive: true,
    };
    const PLAIN: EchoOptions<'static> = EchoOptions {
        tls_name: None,
        keep_alive: true,
    };

    /// Refusals reported to the embedder.
    type Reports = Arc<StdMutex<Vec<HttpRefusal>>>;

    fn secrets() -> TestResult<Secrets> {
        Ok(Secrets::new(vec![
            Secret::new("API_TOKEN", "sk-real-api-value")?.host("api.test"),
            Secret::new("OTHER_TOKEN", "sk-real-other-value")?.host("other.test"),
        ])?)
    }

    fn placeholder(secrets: &Secrets, name: &str) -> String {
        secrets
            .placeholders()
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, p)| p)
            .unwrap_or_default()
    }

    fn gate(host: &str, secrets: &Secrets, upstream: Upstream) -> (HttpGate, Reports) {
        let reports: Reports = Arc::default();
        let sink = Arc::clone(&reports);
        let gate = HttpGate {
            expected_host: host.to_owned(),
            secrets: secrets.clone(),
            upstream,
            max_header_bytes: 8192,
            header_timeout: Duration::from_secs(5),
            on_refusal: Arc::new(move |refusal| {
                if let Ok(mut reports) = sink.lock() {
                    reports.push(refusal);
                }
            }),
            on_untrusted: Arc::new(|_| {}),
        };
        (gate, reports)
    }

    fn reported(reports: &Reports) -> Vec<HttpRefusal> {
        reports.lock().map(|r| r.clone()).unwrap_or_default()
    }

    fn tls_upstream(server: &EchoUpstream) -> TestResult<Upstream> {
        let roots: Vec<_> = server.root.iter().cloned().collect();
        Ok(Upstream::Tls {
            addr: server.addr,
            server_name: "api.test".into(),
            config: upstream_client_config(&roots)?,
        })
    }

    /// A guest HTTPS client connected through `intercept_tls` for
    /// api.test, and the task serving it.
    async fn guest_through_tls(
        gate: HttpGate,
    ) -> TestResult<(
        hyper::client::conn::http1::SendRequest<Full<Bytes>>,
        tokio::task::JoinHandle<Result<(), HttpGateError>>,
    )> {
        let ca = SandboxCa::generate()?;
        let root = ca.cert_der().clone();
        let (guest, host_side) = tokio::io::duplex(64 << 10);
        let served =
            tokio::spawn(async move { intercept_tls(host_side, "api.test", &ca, gate).await });
        let client = guest_client(guest, Some(("api.test", &root))).await?;
        Ok((client, served))
    }

    fn get(target: &str, host: &str) -> http::request::Builder {
        Request::get(target).header("host", host)
    }

    #[tokio::test]
    async fn a_bound_placeholder_reaches_the_server_as_the_real_value() -> TestResult {
        let server = echo_upstream(TLS).await?;
        let secrets = secrets()?;
        let (gate, reports) = gate("api.test", &secrets, tls_upstream(&server)?);
        let (mut guest, _served) = guest_through_tls(gate).await?;
        let p = placeholder(&secrets, "API_TOKEN");

        for path in ["/v1/first", "/v1/second"] {
            let request = get(path, "api.test")
                .header("authorization", format!("Bearer {p}"))
                .body(Full::default())?;
            let (status, body) =
                tokio::time::timeout(PATIENCE, exchange(&mut guest, request)).await??;
            assert_eq!(status, StatusCode::OK);
            assert!(body.contains("auth=Bearer sk-real-api-value\n"), "{body}");
            assert!(body.contains(&format!("target={path}\n")), "{body}");
        }
        assert_eq!(server.requests(), 2);
        assert_eq!(server.connections(), 1, "one upstream connection, reused");
        assert!(reported(&reports).is_empty());
        Ok(())
    }

    #[tokio::test]
    async fn a_large_body_streams_through_unchanged_both_ways() -> TestResult {
        let server = echo_upstream(TLS).await?;
        let secrets = secrets()?;
        let (gate, _) = gate("api.test", &secrets, tls_upstream(&server)?);
        let (mut guest, _served) = guest_through_tls(gate).await?;
        let payload: Vec<u8> = (0..300_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        let request = Request::post("/upload")
            .header("host", "api.test")
            .body(Full::new(Bytes::from(payload.clone())))?;
        let (status, body) =
            tokio::time::timeout(PATIENCE, exchange(&mut guest, request)).await??;
        assert_eq!(status, StatusCode::OK);
        assert!(
            body.ends_with(std::str::from_utf8(&payload)?),
            "body cut or changed"
        );
        Ok(())
    }

    #[tokio::test]
    async fn another_hosts_placeholder_is_forbidden_and_never_sent() -> TestResult {
        let server = echo_upstream(TLS).await?;
        let secrets = secrets()?;
        let (gate, reports) = gate("api.test", &secrets, tls_upstream(&server)?);
        let (mut guest, _served) = guest_through_tls(gate).await?;
        let q = placeholder(&secrets, "OTHER_TOKEN");

        let request = get("/steal", "api.test")
            .header("authorization", format!("Bearer {q}"))
            .body(Full::default())?;
        let (status, body) =
            tokio::time::timeout(PATIENCE, exchange(&mut guest, request)).await??;
        assert_eq!(status, StatusCode::FORBIDDEN);
        let why = format!(
            "airlock: the placeholder of secret OTHER_TOKEN may not be sent to api.test:{}\n",
            server.addr.port()
        );
        assert!(body.starts_with(&why), "{body}");
        assert!(!body.contains("sk-real"), "{body}");
        assert_eq!(server.requests(), 0);
        assert_eq!(
            reported(&reports),
            [HttpRefusal::PlaceholderElsewhere {
                secret: "OTHER_TOKEN".into()
            }]
        );

        // The connection still serves the next, proper request.
        let request = get("/ok", "api.test").body(Full::default())?;
        let (status, _) = tokio::time::timeout(PATIENCE, exchange(&mut guest, request)).await??;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(server.requests(), 1);
        Ok(())
    }

    #[tokio::test]
    async fn a_request_for_another_host_is_misdirected() -> TestResult {
        let server = echo_upstream(TLS).await?;
        let secrets = secrets()?;
        let (gate, reports) = gate("api.test", &secrets, tls_upstream(&server)?);
        let (mut guest, _served) = guest_through_tls(gate).await?;

        let request = get("/", "other.test:443").body(Full::default())?;
        let (status, body) =
            tokio::time::timeout(PATIENCE, exchange(&mut guest, request)).await??;
        assert_eq!(status, StatusCode::MISDIRECTED_REQUEST);
        let why = format!(
            "airlock: HTTP host \"other.test\" is not api.test:{}, the name this connection was allowed for",
            server.addr.port()
        );
        assert!(body.starts_with(&why), "{body}");
        assert_eq!(server.requests(), 0);
        assert_eq!(
            reported(&reports),
            [HttpRefusal::HostMismatch {
                host: Some("other.test".into())
            }]
        );
        Ok(())
    }

    #[tokio::test]
    async fn an_oversized_header_is_answered_or_closed_never_hung() -> TestResult {
        let server = echo_upstream(TLS).await?;
        let secrets = secrets()?;
        let (gate, _) = gate("api.test", &secrets, tls_upstream(&server)?);
        let (mut guest, served) = guest_through_tls(gate).await?;

        let request = get("/", "api.test")
            .header("x-big", "x".repeat(20_000))
            .body(Full::default())?;
        let outcome = tokio::time::timeout(PATIENCE, exchange(&mut guest, request)).await?;
        if let Ok((status, _)) = outcome {
            assert_eq!(status, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        }
        let ended = tokio::time::timeout(PATIENCE, served).await??;
        assert!(matches!(ended, Err(HttpGateError::Guest(_))), "{ended:?}");
        assert_eq!(server.requests(), 0);
        Ok(())
    }

    #[tokio::test]
    async fn a_guest_that_never_finishes_its_head_is_dropped() -> TestResult {
        let server = echo_upstream(PLAIN).await?;
        let secrets = secrets()?;
        let (mut gate, _) = gate(
            "plain.test",
            &secrets,
            Upstream::Plain { addr: server.addr },
        );
        gate.header_timeout = Duration::from_millis(200);
        let (mut guest, host_side) = tokio::io::duplex(4096);
        let served = tokio::spawn(serve_http(host_side, gate));
        tokio::io::AsyncWriteExt::write_all(&mut guest, b"GET / HTTP/1.1\r\nHost: pla").await?;
        let ended = tokio::time::timeout(PATIENCE, served).await??;
        assert!(ended.is_err(), "{ended:?}");
        Ok(())
    }

    #[tokio::test]
    async fn a_guest_that_closes_after_its_answer_ends_the_connection() -> TestResult {
        let server = echo_upstream(PLAIN).await?;
        let secrets = secrets()?;
        let (gate, _) = gate(
            "plain.test",
            &secrets,
            Upstream::Plain { addr: server.addr },
        );
        let (mut guest, host_side) = tokio::io::duplex(64 << 10);
        let served = tokio::spawn(serve_http(host_side, gate));
        tokio::io::AsyncWriteExt::write_all(
            &mut guest,
            b"GET /once HTTP/1.1\r\nHost: plain.test\r\n\r\n",
        )
        .await?;
        let mut answer = [0u8; 12];
        tokio::io::AsyncReadExt::read_exact(&mut guest, &mut answer).await?;
        assert_eq!(&answer, b"HTTP/1.1 200");
        // The guest closes its sending side (as a program's close does).
        tokio::io::AsyncWriteExt::shutdown(&mut guest).await?;
        let ended = tokio::time::timeout(PATIENCE, served).await;
        assert!(ended.is_ok(), "the gate still serves a closed connection");
        Ok(())
    }

    #[tokio::test]
    async fn an_absolute_form_target_arrives_upstream_in_origin_form() -> TestResult {
        let server = echo_upstream(PLAIN).await?;
        let secrets = secrets()?;
        let (gate, _) = gate(
            "plain.test",
            &secrets,
            Upstream::Plain { addr: server.addr },
        );
        let (guest, host_side) = tokio::io::duplex(64 << 10);
        let _served = tokio::spawn(serve_http(host_side, gate));
        let mut guest = guest_client(guest, None).await?;

        let port = server.addr.port();
        let request = Request::get(format!("http://plain.test:{port}/x?y=1"))
            .header("proxy-connection", "keep-alive")
            .body(Full::default())?;
        let (status, body) =
            tokio::time::timeout(PATIENCE, exchange(&mut guest, request)).await??;
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains("target=/x?y=1\n"), "{body}");
        assert!(
            body.contains(&format!("host=plain.test:{port}\n")),
            "{body}"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_server_that_closes_after_each_response_gets_a_new_connection() -> TestResult {
        let server = echo_upstream(EchoOptions {
            tls_name: None,
            keep_alive: false,
        })
        .await?;
        let secrets = secrets()?;
        let (gate, _) = gate(
            "plain.test",
            &secrets,
            Upstream::Plain { addr: server.addr },
        );
        let (guest, host_side) = tokio::io::duplex(64 << 10);
        let _served = tokio::spawn(serve_http(host_side, gate));
        let mut guest = guest_client(guest, None).await?;

        for _ in 0..2 {
            let request = get("/again", "plain.test").body(Full::default())?;
            let (status, _) =
                tokio::time::timeout(PATIENCE, exchange(&mut guest, request)).await??;
            assert_eq!(status, StatusCode::OK);
        }
        assert_eq!(server.connections(), 2);
        Ok(())
    }

    #[tokio::test]
    async fn an_unreachable_upstream_is_a_bad_gateway() -> TestResult {
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await?
            .local_addr()?;
        let secrets = secrets()?;
        let (gate, _) = gate("plain.test", &secrets, Upstream::Plain { addr: closed });
        let (guest, host_side) = tokio::io::duplex(64 << 10);
        let _served = tokio::spawn(serve_http(host_side, gate));
        let mut guest = guest_client(guest, None).await?;
        let request = get("/", "plain.test").body(Full::default())?;
        let (status, body) =
            tokio::time::timeout(PATIENCE, exchange(&mut guest, request)).await??;
        assert_eq!(status, StatusCode::BAD_GATEWAY);
        let why = format!(
            "airlock: plain.test:{} could not be reached: Connection refused",
            closed.port()
        );
        assert!(body.starts_with(&why), "{body}");
        Ok(())
    }

    #[tokio::test]
    async fn an_upstream_certificate_outside_the_real_roots_is_a_bad_gateway() -> TestResult {
        let server = echo_upstream(TLS).await?;
        let secrets = secrets()?;
        let upstream = Upstream::Tls {
            addr: server.addr,
            server_name: "api.test".into(),
            config: upstream_client_config(&[])?,
        };
        let (gate, _) = gate("api.test", &secrets, upstream);
        let (mut guest, _served) = guest_through_tls(gate).await?;
        let p = placeholder(&secrets, "API_TOKEN");
        let request = get("/", "api.test")
            .header("authorization", format!("Bearer {p}"))
            .body(Full::default())?;
        let (status, body) =
            tokio::time::timeout(PATIENCE, exchange(&mut guest, request)).await??;
        assert_eq!(status, StatusCode::BAD_GATEWAY);
        assert!(!body.contains("sk-real"), "{body}");
        assert_eq!(server.requests(), 0);
        Ok(())
    }

    #[test]
    fn debug_of_a_gate_never_shows_a_value() -> TestResult {
        let secrets = secrets()?;
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 1));
        let (gate, _) = gate("api.test", &secrets, Upstream::Plain { addr });
        let shown = format!("{gate:?}");
        assert!(shown.contains("api.test"), "{shown}");
        assert!(!shown.contains("sk-real"), "{shown}");
        Ok(())
    }

    /// A gate whose untrusted-certificate reports are kept.
    fn reporting(mut gate: HttpGate) -> (HttpGate, Arc<StdMutex<Vec<Untrusted>>>) {
        let kept: Arc<StdMutex<Vec<Untrusted>>> = Arc::default();
        let sink = Arc::clone(&kept);
        gate.on_untrusted = Arc::new(move |untrusted| {
            if let Ok(mut kept) = sink.lock() {
                kept.push(untrusted);
            }
        });
        (gate, kept)
    }

    #[tokio::test]
    async fn an_upstream_from_an_unknown_issuer_is_a_502_reported_as_untrusted() -> TestResult {
        let server = echo_upstream(TLS).await?;
        let secrets = secrets()?;
        // The host does not trust the test server's CA.
        let upstream = Upstream::Tls {
            addr: server.addr,
            server_name: "api.test".into(),
            config: upstream_client_config(&[])?,
        };
        let (gate, kept) = reporting(gate("api.test", &secrets, upstream).0);
        let (mut guest, _served) = guest_through_tls(gate).await?;
        let request = get("/", "api.test").body(Full::default())?;
        let (status, _) = tokio::time::timeout(PATIENCE, exchange(&mut guest, request)).await??;
        assert_eq!(status, StatusCode::BAD_GATEWAY);
        assert_eq!(server.requests(), 0);
        let kept = kept.lock().map(|k| k.clone()).unwrap_or_default();
        assert_eq!(
            kept,
            [Untrusted::Upstream {
                detail: "UnknownIssuer".into()
            }]
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_guest_that_refuses_the_sandbox_certificate_is_reported() -> TestResult {
        let server = echo_upstream(TLS).await?;
        let secrets = secrets()?;
        let (gate, kept) = reporting(gate("api.test", &secrets, tls_upstream(&server)?).0);
        let ca = SandboxCa::generate()?;
        // The guest trusts another CA than the one the host answers with.
        let other = SandboxCa::generate()?.cert_der().clone();
        let (guest, host_side) = tokio::io::duplex(64 << 10);
        let served =
            tokio::spawn(async move { intercept_tls(host_side, "api.test", &ca, gate).await });
        assert!(guest_client(guest, Some(("api.test", &other)))
            .await
            .is_err());
        let served = tokio::time::timeout(PATIENCE, served).await??;
        assert!(
            matches!(served, Err(HttpGateError::Handshake(_))),
            "{served:?}"
        );
        let kept = kept.lock().map(|k| k.clone()).unwrap_or_default();
        assert_eq!(
            kept,
            [Untrusted::Guest {
                alert: "UnknownCA".into()
            }]
        );
        Ok(())
    }
}
