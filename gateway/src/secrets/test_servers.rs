//! Loopback servers and guest clients for the proxy's tests.
//!
//! [`echo_upstream`] is a real HTTP server on 127.0.0.1, with TLS under a
//! test CA of its own or without, answering every request with what it
//! saw (`authorization`, target, `host`, then the request body) and
//! counting requests and connections. [`guest_client`] is the guest's side:
//! hyper's client over one end of a `tokio::io::duplex`, optionally with
//! TLS trusting one given root only.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream};
use tokio::net::TcpListener;
use tokio_rustls::{TlsAcceptor, TlsConnector};

pub(crate) type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// A running echo server.
pub(crate) struct EchoUpstream {
    pub addr: SocketAddr,
    /// The test CA its certificate is under (TLS only).
    pub root: Option<CertificateDer<'static>>,
    pub requests: Arc<AtomicUsize>,
    pub connections: Arc<AtomicUsize>,
}

impl EchoUpstream {
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

/// How the echo server runs.
#[derive(Clone, Copy)]
pub(crate) struct EchoOptions<'a> {
    /// TLS with a certificate for this name, or plain HTTP.
    pub tls_name: Option<&'a str>,
    /// Whether connections stay open after a response.
    pub keep_alive: bool,
}

pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Starts an echo server on 127.0.0.1.
pub(crate) async fn echo_upstream(options: EchoOptions<'_>) -> TestResult<EchoUpstream> {
    let (acceptor, root) = match options.tls_name {
        Some(name) => {
            let (config, root) = test_server_config(name)?;
            (Some(TlsAcceptor::from(config)), Some(root))
        }
        None => (None, None),
    };
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let requests = Arc::new(AtomicUsize::new(0));
    let connections = Arc::new(AtomicUsize::new(0));
    let (req_count, conn_count) = (Arc::clone(&requests), Arc::clone(&connections));
    let keep_alive = options.keep_alive;
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            conn_count.fetch_add(1, Ordering::SeqCst);
            let acceptor = acceptor.clone();
            let req_count = Arc::clone(&req_count);
            tokio::spawn(async move {
                match acceptor {
                    Some(acceptor) => {
                        if let Ok(tls) = acceptor.accept(tcp).await {
                            serve_echo(tls, req_count, keep_alive).await;
                        }
                    }
                    None => serve_echo(tcp, req_count, keep_alive).await,
                }
            });
        }
    });
    Ok(EchoUpstream {
        addr,
        root,
        requests,
        connections,
    })
}

async fn serve_echo<S>(io: S, requests: Arc<AtomicUsize>, keep_alive: bool)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |request: Request<Incoming>| {
        requests.fetch_add(1, Ordering::SeqCst);
        echo(request)
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .keep_alive(keep_alive)
        .serve_connection(TokioIo::new(io), service)
        .await;
}

async fn echo(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default()
    };
    let mut text = format!(
        "auth={}\ntarget={}\nhost={}\n",
        header("authorization"),
        request.uri(),
        header("host"),
    )
    .into_bytes();
    let body = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    text.extend_from_slice(&body);
    Ok(Response::new(Full::new(Bytes::from(text))))
}

/// A test CA and a server configuration for `name` under it.
fn test_server_config(name: &str) -> TestResult<(Arc<ServerConfig>, CertificateDer<'static>)> {
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;
    let mut params = CertificateParams::new(vec![name.to_owned()])?;
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &ca)?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], key)?;
    Ok((Arc::new(config), ca.der().clone()))
}

/// The guest's HTTP client on `io`: TLS to `tls` (the server name and the
/// only root it trusts) or plain.
pub(crate) async fn guest_client(
    io: DuplexStream,
    tls: Option<(&str, &CertificateDer<'static>)>,
) -> TestResult<SendRequest<Full<Bytes>>> {
    match tls {
        Some((name, root)) => {
            let mut roots = RootCertStore::empty();
            roots.add(root.clone())?;
            let mut config = ClientConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()?
                .with_root_certificates(roots)
                .with_no_client_auth();
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            let tls = TlsConnector::from(Arc::new(config))
                .connect(ServerName::try_from(name.to_owned())?, io)
                .await?;
            handshake(tls).await
        }
        None => handshake(io).await,
    }
}

async fn handshake<S>(io: S) -> TestResult<SendRequest<Full<Bytes>>>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

/// Sends `request` and reads the whole answer.
pub(crate) async fn exchange(
    sender: &mut SendRequest<Full<Bytes>>,
    request: Request<Full<Bytes>>,
) -> TestResult<(http::StatusCode, String)> {
    sender.ready().await?;
    let response = sender.send_request(request).await?;
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}
