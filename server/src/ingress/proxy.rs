//! One request carried to the guest's server: HTTP/1.1 on a fresh
//! connection to the guest port (`Sandbox::connect_port`), the response
//! streamed back frame by frame as it comes (server-sent events arrive as
//! sent). An `Upgrade` request (WebSocket) that the guest answers 101
//! becomes a tunnel both ways until either side closes or it sits idle
//! for [`TUNNEL_IDLE`].

use std::net::SocketAddr;

use airlock::GuestPort;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode, Uri, Version};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::sync::OwnedSemaphorePermit;

use super::bounds::TUNNEL_IDLE;
use super::refuse::{Body, BoxError};

/// Headers that belong to one hop, never passed on (RFC 9110 7.6.1).
const HOP_BY_HOP: [&str; 6] = [
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
];

/// Carrying the request failed before the guest answered.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("the guest's server broke the connection: {0}")]
    Http(#[from] hyper::Error),
    #[error("a request the guest cannot be sent: {0}")]
    Request(#[from] http::Error),
}

/// What the guest sees of where a request came from.
#[derive(Debug, Clone)]
pub struct Origin {
    /// The Host the client named.
    pub host: String,
    pub client: SocketAddr,
    pub tls: bool,
}

/// Whether `headers` ask to switch protocols (HTTP/1.1 `Upgrade`).
fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|token| token.trim().eq_ignore_ascii_case("upgrade"))
}

/// Removes the hop-by-hop headers (and those `Connection` names), keeping
/// `Connection: upgrade` and `Upgrade` when `upgrade`.
fn strip_hop_by_hop(headers: &mut HeaderMap, upgrade: bool) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .filter(|name| !(upgrade && name == header::UPGRADE))
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    headers.remove(header::TRANSFER_ENCODING);
    if !upgrade {
        headers.remove(header::CONNECTION);
        headers.remove(header::UPGRADE);
    }
}

/// Sends `request` (its path already the guest's, `path`) over `guest`
/// and answers the guest's response; `permit` is held until the response
/// body (or the tunnel) ends.
pub async fn forward(
    guest: GuestPort,
    mut request: Request<Incoming>,
    path: &str,
    origin: &Origin,
    permit: OwnedSemaphorePermit,
) -> Result<Response<Body>, ProxyError> {
    let upgrade = is_upgrade(request.headers());
    let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut request));
    let (mut parts, body) = request.into_parts();
    strip_hop_by_hop(&mut parts.headers, upgrade);
    parts.uri = path.parse::<Uri>().map_err(http::Error::from)?;
    parts.version = Version::HTTP_11;
    if let Ok(host) = HeaderValue::from_str(&origin.host) {
        parts.headers.insert(header::HOST, host);
    }
    let forwarded = [
        ("x-forwarded-for", origin.client.ip().to_string()),
        ("x-forwarded-host", origin.host.clone()),
        (
            "x-forwarded-proto",
            if origin.tls { "https" } else { "http" }.to_owned(),
        ),
    ];
    for (name, value) in forwarded {
        if let Ok(value) = HeaderValue::from_str(&value) {
            parts.headers.insert(name, value);
        }
    }
    let outgoing = Request::from_parts(parts, body);

    let (mut sender, connection) = hyper::client::conn::http1::Builder::new()
        .handshake(TokioIo::new(guest))
        .await?;
    tokio::spawn(async move {
        if let Err(error) = connection.with_upgrades().await {
            tracing::debug!(%error, "ingress: a guest connection ended");
        }
    });
    let mut response = sender.send_request(outgoing).await?;

    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        if let Some(client_upgrade) = client_upgrade {
            let guest_upgrade = hyper::upgrade::on(&mut response);
            tokio::spawn(async move {
                let _permit = permit;
                match tokio::try_join!(client_upgrade, guest_upgrade) {
                    Ok((client, guest)) => {
                        let outcome = airlock::network::splice::splice(
                            TokioIo::new(guest),
                            TokioIo::new(client),
                            TUNNEL_IDLE,
                        )
                        .await;
                        if let Err(error) = outcome {
                            tracing::debug!(%error, "ingress: a tunnel ended");
                        }
                    }
                    Err(error) => tracing::debug!(%error, "ingress: an upgrade failed"),
                }
            });
            let (parts, _) = response.into_parts();
            return Ok(Response::from_parts(parts, super::refuse::full("")));
        }
    }
    let (mut parts, body) = response.into_parts();
    strip_hop_by_hop(&mut parts.headers, false);
    let body = body
        .map_err(move |error| {
            // The permit lives as long as the body.
            let _held = &permit;
            BoxError::from(error)
        })
        .boxed_unsync();
    Ok(Response::from_parts(parts, body))
}
