//! `airlock mcp --http`: MCP's streamable HTTP transport (rmcp's
//! `StreamableHttpService`, one [`AirlockTools`] per MCP session) on HTTP/1.1,
//! with TLS (rustls) unless it listens on a loopback address. Every request
//! passes the [`Gate`] first (the caller's API key, checked by the Airlock
//! server). A session ends when its client deletes it or when it has had
//! no tool call in flight for [`HttpOptions::idle`]; its sandboxes end
//! with it.
//!
//! ```text
//! client ─ TLS ─ hyper (HTTP/1.1) ─ Gate (key → Ping) ─ StreamableHttpService ─ AirlockTools ─ Client (the caller's key) ─ airlock serve
//! ```

mod gate;

use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use airlock_client::Endpoint;

use crate::error::ServeError;
use crate::idle::IdleWatch;
use crate::registry::Registry;
use crate::session::{Access, Session, SessionSandbox};
use crate::tools::MAX_TIMEOUT_SECS;
use crate::tools::{AirlockTools, Transport};
use gate::{Gate, Refusal};

/// The path MCP is served on.
pub const MCP_PATH: &str = "/mcp";
/// How much longer than the longest call rmcp's keep-alive waits.
const BACKSTOP_MARGIN: Duration = Duration::from_secs(60);
/// Connections served at once; past it new ones are closed at once.
const MAX_CONNECTIONS: usize = 1024;
/// How long a TLS handshake may take.
const HANDSHAKE_LIMIT: Duration = Duration::from_secs(10);

/// A certificate chain and its key, PEM files.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// What `airlock mcp --http` serves, and how.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Where to listen.
    pub listen: SocketAddr,
    /// TLS; required unless `listen` is a loopback address.
    pub tls: Option<TlsFiles>,
    /// The Airlock server whose keys callers present (a TCP endpoint: the
    /// Unix socket cannot tell keys apart).
    pub server: Endpoint,
    /// The sandbox each session makes for itself.
    pub sandbox: SessionSandbox,
    /// An MCP session that has had no tool call in flight for this long
    /// ends (and its sandboxes with it).
    pub idle: Duration,
}

/// A bound `airlock mcp --http`, ready to run.
pub struct HttpServer {
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    gate: Arc<Gate>,
    options: HttpOptions,
}

impl std::fmt::Debug for HttpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpServer")
            .field("listener", &self.listener)
            .field("tls", &self.tls.is_some())
            .field("options", &self.options)
            .finish()
    }
}

impl HttpServer {
    /// Checks the options, loads the TLS files and binds.
    pub async fn bind(options: HttpOptions) -> Result<HttpServer, ServeError> {
        let (url, ca_cert) = match &options.server {
            Endpoint::Remote { url, ca_cert, .. } => (url.clone(), ca_cert.clone()),
            Endpoint::Local { .. } => return Err(ServeError::NeedsTcpServer),
        };
        if options.tls.is_none() && !options.listen.ip().is_loopback() {
            return Err(ServeError::PlainHttp(options.listen));
        }
        let tls = options.tls.as_ref().map(acceptor).transpose()?;
        let listener =
            TcpListener::bind(options.listen)
                .await
                .map_err(|source| ServeError::Bind {
                    address: options.listen,
                    source,
                })?;
        Ok(HttpServer {
            listener,
            tls,
            gate: Arc::new(Gate::new(url, ca_cert)),
            options,
        })
    }

    /// Where it listens (the port, when asked for port 0).
    pub fn local_addr(&self) -> Result<SocketAddr, ServeError> {
        self.listener
            .local_addr()
            .map_err(|source| ServeError::Bind {
                address: self.options.listen,
                source,
            })
    }

    /// The URL clients use.
    pub fn url(&self) -> Result<String, ServeError> {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        Ok(format!("{scheme}://{}{MCP_PATH}", self.local_addr()?))
    }

    /// Serves until `stop` completes, then ends every session, killing
    /// their sandboxes.
    pub async fn run(self, stop: impl Future<Output = ()>) -> Result<(), ServeError> {
        let registry = Arc::new(Registry::default());
        let cancel = CancellationToken::new();
        let service = self.service(&registry, &cancel);
        let mut connections = JoinSet::new();
        let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        tokio::pin!(stop);
        loop {
            let (tcp, peer) = tokio::select! {
                () = &mut stop => break,
                accepted = self.listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        // Out of descriptors and the like: wait, go on.
                        tracing::warn!(%error, "cannot accept a connection");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
                Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                tracing::warn!(%peer, "too many connections: closing a new one");
                continue;
            };
            let tls = self.tls.clone();
            let gate = self.gate.clone();
            let service = service.clone();
            connections.spawn(async move {
                let _slot = slot;
                let handler = hyper::service::service_fn(move |request| {
                    let gate = gate.clone();
                    let service = service.clone();
                    async move { Ok::<_, Infallible>(handle(&gate, &service, peer.ip(), request).await) }
                });
                let _ = tcp.set_nodelay(true);
                let result = match tls {
                    Some(tls) => match tokio::time::timeout(HANDSHAKE_LIMIT, tls.accept(tcp)).await {
                        Ok(Ok(stream)) => serve_connection(TokioIo::new(stream), handler).await,
                        Ok(Err(error)) => {
                            tracing::debug!(%peer, %error, "TLS handshake failed");
                            return;
                        }
                        Err(_) => return,
                    },
                    None => serve_connection(TokioIo::new(tcp), handler).await,
                };
                if let Err(error) = result {
                    tracing::debug!(%peer, %error, "connection ended");
                }
            });
        }
        tracing::info!("stopping: ending the MCP sessions");
        cancel.cancel();
        connections.shutdown().await;
        registry.shutdown().await;
        Ok(())
    }

    fn service(
        &self,
        registry: &Arc<Registry>,
        cancel: &CancellationToken,
    ) -> StreamableHttpService<AirlockTools, LocalSessionManager> {
        let mut sessions = LocalSessionManager::default();
        // The idle watch ends sessions; rmcp's keep-alive, which a long call
        // would trip, only reaps those no call ever reached.
        sessions.session_config.keep_alive =
            Some(self.options.idle + Duration::from_secs_f64(MAX_TIMEOUT_SECS) + BACKSTOP_MARGIN);
        let sessions = Arc::new(sessions);
        let mut config =
            StreamableHttpServerConfig::default().with_cancellation_token(cancel.clone());
        if !self.options.listen.ip().is_loopback() {
            // Host names are the operator's; every request needs a key, so
            // a rebound name gains a browser nothing.
            config = config.disable_allowed_hosts();
        }
        let registry = registry.clone();
        let settings = Arc::new(self.options.sandbox.clone());
        let idle = self.options.idle;
        let manager = sessions.clone();
        StreamableHttpService::new(
            move || {
                let access = Access::per_request(IdleWatch::new(idle, manager.clone()));
                let session = Session::new(registry.clone(), settings.clone(), access);
                Ok(AirlockTools::new(session, Transport::Http))
            },
            sessions,
            config,
        )
    }
}

/// HTTP/1.1 on one connection.
async fn serve_connection<I, S>(io: TokioIo<I>, handler: S) -> Result<(), hyper::Error>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::Service<Request<Incoming>, Response = Response<BoxBody<Bytes, Infallible>>>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    S::Future: Send + 'static,
{
    hyper::server::conn::http1::Builder::new()
        .serve_connection(io, handler)
        .await
}

/// One request: the gate, then MCP.
async fn handle(
    gate: &Gate,
    service: &StreamableHttpService<AirlockTools, LocalSessionManager>,
    peer: IpAddr,
    mut request: Request<Incoming>,
) -> Response<BoxBody<Bytes, Infallible>> {
    if request.uri().path() != MCP_PATH {
        return plain(
            StatusCode::NOT_FOUND,
            &format!("the MCP endpoint is {MCP_PATH}"),
        );
    }
    match gate.admit(peer, request.headers()).await {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            service.handle(request).await
        }
        Err(Refusal::Unauthorized(message)) => {
            let mut response = plain(StatusCode::UNAUTHORIZED, &message);
            response.headers_mut().insert(
                http::header::WWW_AUTHENTICATE,
                http::HeaderValue::from_static("Bearer"),
            );
            response
        }
        Err(Refusal::Throttled(message, wait)) => {
            let mut response = plain(StatusCode::TOO_MANY_REQUESTS, &message);
            if let Some(wait) = wait {
                if let Ok(value) = http::HeaderValue::from_str(&wait.as_secs().max(1).to_string()) {
                    response
                        .headers_mut()
                        .insert(http::header::RETRY_AFTER, value);
                }
            }
            response
        }
        Err(Refusal::Unavailable(message)) => plain(StatusCode::BAD_GATEWAY, &message),
    }
}

/// A response of a JSON object `{"error": message}`, closing the
/// connection: the request's body is left unread, so the connection cannot
/// carry another request (a client that sent one on it would find it cut).
fn plain(status: StatusCode, message: &str) -> Response<BoxBody<Bytes, Infallible>> {
    let body = serde_json::json!({ "error": message }).to_string();
    let mut response = Response::new(Full::new(Bytes::from(body)).boxed());
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    headers.insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("close"),
    );
    response
}

/// A TLS acceptor from PEM files (HTTP/1.1 by ALPN).
fn acceptor(files: &TlsFiles) -> Result<tokio_rustls::TlsAcceptor, ServeError> {
    let bad = |path: &PathBuf, reason: String| ServeError::Tls {
        path: path.clone(),
        reason,
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| bad(&files.cert, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| bad(&files.cert, e.to_string()))?;
    if certs.is_empty() {
        return Err(bad(&files.cert, "no certificate in the file".into()));
    }
    let key =
        PrivateKeyDer::from_pem_file(&files.key).map_err(|e| bad(&files.key, e.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(&files.cert, e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| bad(&files.cert, e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(listen: &str, server: Endpoint) -> HttpOptions {
        HttpOptions {
            listen: listen.parse().unwrap(),
            tls: None,
            server,
            sandbox: SessionSandbox::default(),
            idle: Duration::from_secs(60),
        }
    }

    fn remote() -> Endpoint {
        Endpoint::remote("http://127.0.0.1:1", None, None).unwrap()
    }

    #[tokio::test]
    async fn plain_http_is_refused_off_loopback_and_served_on_it() {
        let refused = HttpServer::bind(options("0.0.0.0:0", remote())).await;
        assert!(
            matches!(refused, Err(ServeError::PlainHttp(_))),
            "{refused:?}"
        );
        let served = HttpServer::bind(options("127.0.0.1:0", remote()))
            .await
            .unwrap();
        assert!(served.url().unwrap().starts_with("http://127.0.0.1:"));
        assert!(served.url().unwrap().ends_with("/mcp"));
    }

    #[tokio::test]
    async fn keys_need_the_server_on_tcp() {
        let local = Endpoint::Local {
            socket: "/nonexistent/daemon.sock".into(),
        };
        let refused = HttpServer::bind(options("127.0.0.1:0", local)).await;
        assert!(
            matches!(refused, Err(ServeError::NeedsTcpServer)),
            "{refused:?}"
        );
    }

    #[tokio::test]
    async fn tls_files_that_are_not_there_are_named() {
        let mut with_tls = options("127.0.0.1:0", remote());
        with_tls.tls = Some(TlsFiles {
            cert: "/nonexistent/cert.pem".into(),
            key: "/nonexistent/key.pem".into(),
        });
        let refused = HttpServer::bind(with_tls).await;
        match refused {
            Err(ServeError::Tls { path, .. }) => {
                assert_eq!(path, PathBuf::from("/nonexistent/cert.pem"))
            }
            other => panic!("{other:?}"),
        }
    }
}
