//! [`post`]: one attempt of one delivery: a `POST` of the body with its
//! headers over HTTP/1.1, on a connection of its own (TLS with the public
//! roots webpki-roots carries for `https://`), within [`ATTEMPT_TIMEOUT`].
//! A 2xx answer is a success; anything else, or no answer, a failure to
//! retry.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;

use super::outbox::Delivery;
use super::sign;
use super::target::{Target, TargetError};

/// How long one attempt may take, connection and answer together.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(15);

/// Why an attempt failed.
#[derive(Debug, thiserror::Error)]
pub enum DeliverError {
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error("cannot connect to {host}:{port}")]
    Connect {
        host: String,
        port: u16,
        #[source]
        source: std::io::Error,
    },
    #[error("TLS with {host}")]
    Tls {
        host: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0} is not a TLS server name")]
    ServerName(String),
    #[error("HTTP")]
    Http(#[source] hyper::Error),
    #[error("cannot make the request")]
    Request(#[source] http::Error),
    #[error("answered {0}")]
    Status(http::StatusCode),
    #[error("no answer within {ATTEMPT_TIMEOUT:?}")]
    Timeout,
}

fn tls_connector() -> tokio_rustls::TlsConnector {
    static CONNECTOR: OnceLock<tokio_rustls::TlsConnector> = OnceLock::new();
    CONNECTOR
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = match rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
            {
                Ok(builder) => builder.with_root_certificates(roots).with_no_client_auth(),
                // ring offers the default versions; this is not reached.
                Err(_) => rustls::ClientConfig::builder()
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth(),
            };
            tokio_rustls::TlsConnector::from(Arc::new(config))
        })
        .clone()
}

/// The request of `delivery` to `target`, signed with `secret`.
fn request(
    target: &Target,
    delivery: &Delivery,
    secret: &str,
) -> Result<http::Request<Full<Bytes>>, DeliverError> {
    let body = Bytes::from(delivery.body.clone());
    let host = match (target.tls, target.port) {
        (true, 443) | (false, 80) => target.host.clone(),
        (_, port) => format!("{}:{port}", target.host),
    };
    http::Request::post(target.path())
        .header(http::header::HOST, host)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(
            http::header::USER_AGENT,
            concat!("airlock-webhooks/", env!("CARGO_PKG_VERSION")),
        )
        .header("airlock-webhook-id", &delivery.webhook)
        .header("airlock-delivery-id", &delivery.id)
        .header(
            "airlock-delivery-attempt",
            (delivery.attempts + 1).to_string(),
        )
        .header("airlock-event-seq", delivery.seq.to_string())
        .header("airlock-event-type", &delivery.kind)
        .header("airlock-signature-version", sign::VERSION)
        .header("airlock-signature", sign::sign(secret, &body))
        .body(Full::new(body))
        .map_err(DeliverError::Request)
}

/// Sends `delivery` to `url` once.
pub async fn post(
    url: &str,
    may_reach_host: bool,
    delivery: &Delivery,
    secret: &str,
) -> Result<(), DeliverError> {
    match tokio::time::timeout(
        ATTEMPT_TIMEOUT,
        attempt(url, may_reach_host, delivery, secret),
    )
    .await
    {
        Ok(result) => result,
        Err(_) => Err(DeliverError::Timeout),
    }
}

async fn attempt(
    url: &str,
    may_reach_host: bool,
    delivery: &Delivery,
    secret: &str,
) -> Result<(), DeliverError> {
    let target = Target::parse(url, may_reach_host)?;
    let addresses = target.resolve(may_reach_host).await?;
    let stream =
        TcpStream::connect(&addresses[..])
            .await
            .map_err(|source| DeliverError::Connect {
                host: target.host.clone(),
                port: target.port,
                source,
            })?;
    let request = request(&target, delivery, secret)?;
    let status = if target.tls {
        let name = ServerName::try_from(
            target
                .host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
        )
        .map_err(|_| DeliverError::ServerName(target.host.clone()))?;
        let stream = tls_connector()
            .connect(name, stream)
            .await
            .map_err(|source| DeliverError::Tls {
                host: target.host.clone(),
                source,
            })?;
        send(TokioIo::new(stream), request).await?
    } else {
        send(TokioIo::new(stream), request).await?
    };
    if status.is_success() {
        Ok(())
    } else {
        Err(DeliverError::Status(status))
    }
}

async fn send<T>(
    io: T,
    request: http::Request<Full<Bytes>>,
) -> Result<http::StatusCode, DeliverError>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(DeliverError::Http)?;
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let answer = sender.send_request(request).await;
    let result = match answer {
        // The answer's body is not read: the status is all that counts.
        Ok(response) => Ok(response.status()),
        Err(error) => Err(DeliverError::Http(error)),
    };
    driver.abort();
    result
}
