//! [`TcpEndpoint`]: the TCP listener, with TLS unless asked otherwise on
//! loopback, and the [`Connection`]s it accepts.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tonic::transport::server::{Connected, TcpConnectInfo};

use super::handshake::{Handshakes, DEADLINE, FIRST_BYTE};
use crate::error::ServerError;

/// Handshaken connections waiting for the server.
const QUEUE: usize = 64;

/// The certificate chain and key of the TCP listener (PEM files).
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TlsFiles {
    /// A rustls server configuration from the files, offering HTTP/2 and
    /// HTTP/1.1 (gRPC-Web from browsers and `fetch`).
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, ServerError> {
        let bad = |path: &PathBuf, reason: String| ServerError::Tls {
            path: path.clone(),
            reason,
        };
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&self.cert)
            .map_err(|e| bad(&self.cert, e.to_string()))?
            .collect::<Result<_, _>>()
            .map_err(|e| bad(&self.cert, e.to_string()))?;
        let Some(first) = certs.first() else {
            return Err(bad(&self.cert, "no certificate in the file".into()));
        };
        super::certificate::check(first).map_err(|reason| bad(&self.cert, reason))?;
        let key = PrivateKeyDer::from_pem_file(&self.key)
            .map_err(|e| bad(&self.key, format!("no private key: {e}")))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| bad(&self.cert, e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| bad(&self.key, e.to_string()))?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// A bound TCP listener and how its connections are secured.
pub struct TcpEndpoint {
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
}

impl std::fmt::Debug for TcpEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpEndpoint")
            .field("listener", &self.listener)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl TcpEndpoint {
    /// Listens on `addr` with TLS from `tls`; without TLS only on a
    /// loopback address, and only when `insecure` says so.
    pub async fn bind(
        addr: SocketAddr,
        tls: Option<TlsFiles>,
        insecure: bool,
    ) -> Result<TcpEndpoint, ServerError> {
        let tls = match (tls, insecure) {
            (Some(files), _) => Some(TlsAcceptor::from(files.server_config()?)),
            (None, true) if addr.ip().is_loopback() => None,
            (None, true) => return Err(ServerError::PlainOffLoopback { addr }),
            (None, false) => return Err(ServerError::NoTls { addr }),
        };
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| ServerError::Bind {
                address: addr.to_string(),
                source,
            })?;
        Ok(TcpEndpoint { listener, tls })
    }

    /// The address it listens on (the port, when bound to port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Whether connections are TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Accepts connections for ever, handshaking TLS off the accept loop
    /// within the bounds of [`Handshakes`]; each ready connection is sent
    /// to the returned receiver.
    pub(crate) fn accept(self) -> mpsc::Receiver<io::Result<Connection>> {
        let (ready, connections) = mpsc::channel(QUEUE);
        tokio::spawn(async move {
            let handshakes = Arc::new(Handshakes::default());
            loop {
                let (stream, peer) = match self.listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        tracing::warn!(%error, "accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                if ready.is_closed() {
                    return;
                }
                let _ = stream.set_nodelay(true);
                let Some(acceptor) = self.tls.clone() else {
                    if ready.send(Ok(Connection::Plain(stream))).await.is_err() {
                        return;
                    }
                    continue;
                };
                let Some(mut slot) = handshakes.admit(peer.ip()) else {
                    tracing::debug!(%peer, "closed: too many handshakes from this address");
                    continue;
                };
                let ready = ready.clone();
                tokio::spawn(async move {
                    let handshake = async {
                        let mut first = [0u8; 1];
                        match tokio::time::timeout(FIRST_BYTE, stream.peek(&mut first)).await {
                            Ok(Ok(n)) if n > 0 => {}
                            _ => return Err("sent nothing in time"),
                        }
                        match tokio::time::timeout(DEADLINE - FIRST_BYTE, acceptor.accept(stream))
                            .await
                        {
                            Ok(Ok(tls)) => Ok(tls),
                            Ok(Err(_)) => Err("TLS handshake failed"),
                            Err(_) => Err("TLS handshake timed out"),
                        }
                    };
                    let outcome = tokio::select! {
                        outcome = handshake => outcome,
                        _ = &mut slot.cut => Err("cut for a newer handshake"),
                    };
                    drop(slot);
                    match outcome {
                        Ok(tls) => {
                            let _ = ready.send(Ok(Connection::Tls(Box::new(tls)))).await;
                        }
                        Err(why) => tracing::debug!(%peer, why, "connection closed"),
                    }
                });
            }
        });
        connections
    }
}

/// An accepted TCP connection, plain or TLS.
#[derive(Debug)]
pub enum Connection {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Connection {
    /// The client's address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.tcp().peer_addr().ok()
    }

    fn tcp(&self) -> &TcpStream {
        match self {
            Connection::Plain(stream) => stream,
            Connection::Tls(tls) => tls.get_ref().0,
        }
    }
}

impl Connected for Connection {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        TcpConnectInfo {
            local_addr: self.tcp().local_addr().ok(),
            remote_addr: self.tcp().peer_addr().ok(),
        }
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Connection::Plain(stream) => Pin::new(stream).poll_read(cx, buf),
            Connection::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Connection::Plain(stream) => Pin::new(stream).poll_write(cx, buf),
            Connection::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Connection::Plain(stream) => Pin::new(stream).poll_flush(cx),
            Connection::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Connection::Plain(stream) => Pin::new(stream).poll_shutdown(cx),
            Connection::Tls(tls) => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Connection::Plain(stream) => Pin::new(stream).poll_write_vectored(cx, bufs),
            Connection::Tls(tls) => Pin::new(tls.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Connection::Plain(stream) => stream.is_write_vectored(),
            Connection::Tls(tls) => tls.is_write_vectored(),
        }
    }
}
