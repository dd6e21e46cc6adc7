//! [`Endpoint`]: where the server is, and connecting to it.

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::{TcpStream, UnixStream};
use tonic::transport::Channel;

use crate::client::Client;
use crate::error::ClientError;

/// `https://HOST:PORT` of a remote server (unset: the local one).
pub const HOST_ENV: &str = "AIRLOCK_HOST";
/// The API key for a remote server.
pub const API_KEY_ENV: &str = "AIRLOCK_API_KEY";
/// A PEM file with the CA that signed a remote server's certificate, when
/// it is not a public one.
pub const CA_CERT_ENV: &str = "AIRLOCK_CA_CERT";

/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// HTTP/2 pings that find a dead connection.
const KEEPALIVE: Duration = Duration::from_secs(20);

/// Where a server is.
#[derive(Clone)]
pub enum Endpoint {
    /// The local server's Unix socket (the machine's owner).
    Local { socket: PathBuf },
    /// A server on TCP: `https://` (TLS), or `http://` to a loopback
    /// address only.
    Remote {
        url: http::Uri,
        key: Option<String>,
        ca_cert: Option<PathBuf>,
    },
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Local { socket } => f.debug_struct("Local").field("socket", socket).finish(),
            Endpoint::Remote { url, key, ca_cert } => f
                .debug_struct("Remote")
                .field("url", url)
                .field("key", &key.as_ref().map(|_| "<key>"))
                .field("ca_cert", ca_cert)
                .finish(),
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Local { socket } => write!(f, "{}", socket.display()),
            Endpoint::Remote { url, .. } => write!(f, "{url}"),
        }
    }
}

impl Endpoint {
    /// From the environment: a remote server when [`HOST_ENV`] is set (with
    /// [`API_KEY_ENV`] and [`CA_CERT_ENV`]), else the local server on
    /// `local_socket`.
    pub fn from_env(local_socket: PathBuf) -> Result<Endpoint, ClientError> {
        match std::env::var(HOST_ENV) {
            Ok(host) if !host.trim().is_empty() => Endpoint::remote(
                &host,
                std::env::var(API_KEY_ENV).ok().filter(|k| !k.is_empty()),
                std::env::var_os(CA_CERT_ENV).map(PathBuf::from),
            ),
            _ => Ok(Endpoint::Local {
                socket: local_socket,
            }),
        }
    }

    /// A remote server: `https://HOST:PORT`, `HOST:PORT` (https), or
    /// `http://` to a loopback address.
    pub fn remote(
        host: &str,
        key: Option<String>,
        ca_cert: Option<PathBuf>,
    ) -> Result<Endpoint, ClientError> {
        let text = host.trim();
        let text = if text.contains("://") {
            text.to_owned()
        } else {
            format!("https://{text}")
        };
        let url: http::Uri = text
            .parse()
            .map_err(|e| ClientError::Endpoint(format!("{HOST_ENV} {host:?}: {e}")))?;
        let Some(hostname) = url.host() else {
            return Err(ClientError::Endpoint(format!(
                "{HOST_ENV} {host:?} names no host"
            )));
        };
        match url.scheme_str() {
            Some("https") => {}
            Some("http") if is_loopback(hostname) => {}
            Some("http") => {
                return Err(ClientError::Endpoint(format!(
                    "{host}: plain http only to a loopback address; use https://"
                )))
            }
            _ => {
                return Err(ClientError::Endpoint(format!(
                    "{host}: the scheme is https:// (or http:// to a loopback address)"
                )))
            }
        }
        Ok(Endpoint::Remote { url, key, ca_cert })
    }

    /// Connects (one HTTP/2 connection, made again if it breaks).
    pub async fn connect(&self) -> Result<Client, ClientError> {
        match self {
            Endpoint::Local { socket } => connect_unix(socket.clone()).await,
            Endpoint::Remote { url, key, ca_cert } => {
                connect_tcp(url, key.as_deref(), ca_cert.as_ref()).await
            }
        }
    }
}

fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare == "localhost"
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn channel_endpoint(uri: &str) -> Result<tonic::transport::Endpoint, ClientError> {
    Ok(tonic::transport::Endpoint::from_shared(uri.to_owned())
        .map_err(|e| ClientError::Endpoint(e.to_string()))?
        .connect_timeout(CONNECT_TIMEOUT)
        .http2_keep_alive_interval(KEEPALIVE)
        .keep_alive_while_idle(true))
}

async fn connect_unix(socket: PathBuf) -> Result<Client, ClientError> {
    let name = socket.display().to_string();
    let first = UnixStream::connect(&socket)
        .await
        .map_err(|source| ClientError::Connect {
            endpoint: name.clone(),
            source,
        })?;
    // The first stream is the one just made; a reconnect makes another.
    let first = Arc::new(Mutex::new(Some(first)));
    let channel: Channel = channel_endpoint("http://airlock.local")?
        .connect_with_connector(tower::service_fn(move |_| {
            let first = first
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            let socket = socket.clone();
            async move {
                let stream = match first {
                    Some(stream) => stream,
                    None => UnixStream::connect(&socket).await?,
                };
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
        .map_err(|source| ClientError::Transport {
            endpoint: name.clone(),
            source,
        })?;
    Client::new(channel, None, name)
}

/// The roots a TLS connection trusts: the CA file's certificates, else the
/// public roots webpki-roots carries.
fn roots(ca_cert: Option<&PathBuf>) -> Result<rustls::RootCertStore, ClientError> {
    let mut roots = rustls::RootCertStore::empty();
    match ca_cert {
        Some(path) => {
            let bad = |reason: String| ClientError::Tls {
                path: path.clone(),
                reason,
            };
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                .map_err(|e| bad(e.to_string()))?
                .collect::<Result<_, _>>()
                .map_err(|e| bad(e.to_string()))?;
            if certs.is_empty() {
                return Err(bad("no certificate in the file".into()));
            }
            for cert in certs {
                roots.add(cert).map_err(|e| bad(e.to_string()))?;
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    Ok(roots)
}

async fn connect_tcp(
    url: &http::Uri,
    key: Option<&str>,
    ca_cert: Option<&PathBuf>,
) -> Result<Client, ClientError> {
    let name = url.to_string();
    let host = url.host().unwrap_or_default().to_owned();
    let tls = url.scheme_str() == Some("https");
    let port = url.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let connector = if tls {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| ClientError::Endpoint(e.to_string()))?
            .with_root_certificates(roots(ca_cert)?)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"h2".to_vec()];
        Some(tokio_rustls::TlsConnector::from(Arc::new(config)))
    } else {
        None
    };
    let server_name = ServerName::try_from(
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned(),
    )
    .map_err(|e| ClientError::Endpoint(format!("{host}: {e}")))?;
    let address = format!("{host}:{port}");
    let channel: Channel = channel_endpoint(&format!("http://{address}"))?
        .connect_with_connector(tower::service_fn(move |_| {
            let connector = connector.clone();
            let server_name = server_name.clone();
            let address = address.clone();
            async move {
                let tcp = TcpStream::connect(&address).await?;
                tcp.set_nodelay(true)?;
                let stream: Box<dyn Io> = match connector {
                    Some(connector) => Box::new(connector.connect(server_name, tcp).await?),
                    None => Box::new(tcp),
                };
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
        .map_err(|source| ClientError::Transport {
            endpoint: name.clone(),
            source,
        })?;
    Client::new(channel, key, name)
}

/// A byte stream either way (TCP or TLS over TCP).
trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static> Io for T {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_read_with_https_by_default_and_plain_http_only_on_loopback() {
        let remote = Endpoint::remote("example.test:7443", Some("ak_x".into()), None).unwrap();
        assert!(
            remote.to_string().starts_with("https://example.test:7443"),
            "{remote}"
        );
        assert!(!format!("{remote:?}").contains("ak_x"));
        assert!(Endpoint::remote("http://127.0.0.1:80", None, None).is_ok());
        assert!(Endpoint::remote("http://[::1]:80", None, None).is_ok());
        assert!(Endpoint::remote("http://example.test:80", None, None).is_err());
        assert!(Endpoint::remote("ftp://example.test", None, None).is_err());
    }
}
