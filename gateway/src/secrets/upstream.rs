//! The host's own connection to the real server.
//!
//! After the proxy has put a secret into a request, it goes on to the real
//! server over a connection the host makes: [`Upstream::Plain`] for HTTP,
//! [`Upstream::Tls`] for HTTPS, verified against real roots (webpki-roots,
//! plus any the embedder adds; tests add their loopback server's CA) by
//! [`upstream_client_config`], never against the sandbox CA.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// How long opening the upstream connection (TCP and TLS) may take.
pub const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Why the upstream connection or its configuration failed.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// An extra root is not a usable CA certificate.
    #[error("extra root certificate refused")]
    Root(#[source] rustls::Error),
    /// rustls refused the configuration.
    #[error("cannot build the upstream TLS configuration")]
    Config(#[source] rustls::Error),
    /// The server name cannot be sent in TLS.
    #[error("{0:?} is not a TLS server name")]
    ServerName(String),
    /// The TCP connection failed.
    #[error("cannot connect to {addr}")]
    Connect {
        /// Where.
        addr: SocketAddr,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// The TLS handshake with the server failed (its certificate included).
    #[error("TLS handshake with {server_name} failed")]
    Handshake {
        /// The name the certificate was checked against.
        server_name: String,
        /// What rustls said.
        #[source]
        source: io::Error,
    },
    /// Connecting took longer than `UPSTREAM_CONNECT_TIMEOUT` (30 s).
    #[error("connecting to {addr} timed out")]
    Timeout {
        /// Where.
        addr: SocketAddr,
    },
}

/// A byte stream to the upstream server.
pub trait UpstreamIo: AsyncRead + AsyncWrite + Send + Unpin {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin> UpstreamIo for T {}

/// An open connection to the upstream server.
pub type UpstreamStream = Box<dyn UpstreamIo>;

/// The TLS client configuration for upstream servers: webpki-roots plus
/// `extra_roots`, ring as the provider, ALPN `http/1.1`.
pub fn upstream_client_config(
    extra_roots: &[CertificateDer<'static>],
) -> Result<Arc<ClientConfig>, UpstreamError> {
    let mut roots = RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    for root in extra_roots {
        roots.add(root.clone()).map_err(UpstreamError::Root)?;
    }
    let mut config =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(UpstreamError::Config)?
            .with_root_certificates(roots)
            .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Where and how the proxy reaches the real server.
#[derive(Clone)]
pub enum Upstream {
    /// Plain TCP, for HTTP.
    Plain {
        /// The server's address.
        addr: SocketAddr,
    },
    /// TLS over TCP, for HTTPS.
    Tls {
        /// The server's address.
        addr: SocketAddr,
        /// The name sent as SNI and checked against the certificate.
        server_name: String,
        /// From [`upstream_client_config`].
        config: Arc<ClientConfig>,
    },
}

impl Upstream {
    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        match self {
            Upstream::Plain { addr } | Upstream::Tls { addr, .. } => *addr,
        }
    }

    /// Opens a connection, within [`UPSTREAM_CONNECT_TIMEOUT`].
    pub async fn connect(&self) -> Result<UpstreamStream, UpstreamError> {
        let addr = self.addr();
        tokio::time::timeout(UPSTREAM_CONNECT_TIMEOUT, self.connect_now())
            .await
            .map_err(|_| UpstreamError::Timeout { addr })?
    }

    async fn connect_now(&self) -> Result<UpstreamStream, UpstreamError> {
        let addr = self.addr();
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|source| UpstreamError::Connect { addr, source })?;
        // Requests are written whole by hyper; waiting for more would only
        // delay them.
        let _ = tcp.set_nodelay(true);
        match self {
            Upstream::Plain { .. } => Ok(Box::new(tcp)),
            Upstream::Tls {
                server_name,
                config,
                ..
            } => {
                let name = ServerName::try_from(server_name.clone())
                    .map_err(|_| UpstreamError::ServerName(server_name.clone()))?;
                let tls = TlsConnector::from(Arc::clone(config))
                    .connect(name, tcp)
                    .await
                    .map_err(|source| UpstreamError::Handshake {
                        server_name: server_name.clone(),
                        source,
                    })?;
                Ok(Box::new(tls))
            }
        }
    }
}

impl fmt::Debug for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Upstream::Plain { addr } => f.debug_struct("Plain").field("addr", addr).finish(),
            Upstream::Tls {
                addr, server_name, ..
            } => f
                .debug_struct("Tls")
                .field("addr", addr)
                .field("server_name", server_name)
                .finish_non_exhaustive(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    #[test]
    fn the_client_config_trusts_public_roots_and_offers_http_1_1() -> Result<(), UpstreamError> {
        let config = upstream_client_config(&[])?;
        assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]);
        Ok(())
    }

    #[test]
    fn an_extra_root_that_is_not_a_certificate_is_refused() {
        let junk = CertificateDer::from(vec![1u8, 2, 3]);
        assert!(matches!(
            upstream_client_config(&[junk]),
            Err(UpstreamError::Root(_))
        ));
    }

    #[tokio::test]
    async fn a_plain_upstream_carries_bytes_both_ways() -> Result<(), Box<dyn std::error::Error>> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let server = tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await?;
            let mut buf = [0u8; 4];
            sock.read_exact(&mut buf).await?;
            sock.write_all(&buf).await?;
            Ok::<_, io::Error>(())
        });
        let mut stream = Upstream::Plain { addr }.connect().await?;
        stream.write_all(b"ping").await?;
        let mut back = [0u8; 4];
        stream.read_exact(&mut back).await?;
        assert_eq!(&back, b"ping");
        server.await??;
        Ok(())
    }

    #[tokio::test]
    async fn a_refused_connection_is_an_error_naming_the_address(
    ) -> Result<(), Box<dyn std::error::Error>> {
        // Bind, learn the port, close: nothing listens there now.
        let addr = TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
        let err = Upstream::Plain { addr }.connect().await.err();
        assert!(
            matches!(err, Some(UpstreamError::Connect { addr: a, .. }) if a == addr),
            "{err:?}"
        );
        Ok(())
    }
}
