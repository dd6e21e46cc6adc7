//! Requests to the guest's HTTP proxy: the destination is read
//! ([`ProxyRequest`]) and decided on, and for a tunnel or a raw address the
//! upstream dialed, before anything is answered, so a refused `CONNECT` or
//! absolute-form request gets the refusal (403, 429, 502 ...) and never
//! `200 Connection established`.

use std::net::{IpAddr, SocketAddrV4};

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::refused::{answer, Admitted, Refused};
use super::{dial, sniff_refusal, Gateway, FIRST_BYTE_WAIT};
use crate::audit::{Protocol, Refusal};
use crate::fake_ip::GATEWAY_ADDR;
use crate::proxy::{head_len, ProxyRequest, Target, PROXY_PORT};
use crate::sniff::{read_head, Head};
use crate::told::Tell;

impl Gateway {
    /// A connection past the sandbox's limit
    /// ([`crate::NetworkOptions::max_connections`]): a request to
    /// the proxy is answered 429, anything else reset.
    pub(super) async fn over_limit<S>(
        &self,
        mut guest: S,
        destination: SocketAddrV4,
        tell: &Tell,
    ) -> Refused
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let refusal = Refusal::TooManyConnections {
            limit: self.options.max_connections,
        };
        let raw = Target::Raw(IpAddr::V4(*destination.ip()), destination.port());
        if !is_proxy(destination) {
            return Refused::new(Protocol::Tcp, &raw, None, refusal);
        }
        let mut head = Vec::new();
        match self.proxy_request(&mut guest, &mut head, tell).await {
            Ok(request) => {
                let refused = Refused::new(Protocol::Proxy, &request.target, None, refusal);
                answer(&mut guest, refused, request.head_only, tell).await
            }
            Err(refused) => refused,
        }
    }

    /// A request to the HTTP proxy: the destination is decided, and for a
    /// tunnel or a raw address the upstream dialed, before anything is
    /// answered.
    pub(super) async fn proxied<S>(&self, mut guest: S, tell: &Tell) -> Result<(), Refused>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let via = Protocol::Proxy;
        let mut head = Vec::new();
        let request = self.proxy_request(&mut guest, &mut head, tell).await?;
        let addr = match self.admit(&request.target, via).await {
            Ok(addr) => addr,
            Err(refused) => return Err(answer(&mut guest, refused, request.head_only, tell).await),
        };
        let admitted = Admitted {
            target: request.target,
            addr,
            via,
        };
        // The HTTP gate dials for itself, per request, and answers 502
        // when it cannot: an absolute-form request to a name, and a tunnel
        // to a name whose TLS is intercepted.
        let gated = match &admitted.target {
            Target::Named(name, _) => !request.connect || self.intercepts(name),
            Target::Raw(..) => false,
        };
        let upstream = if gated {
            None
        } else {
            match dial(admitted.upstream_addr()).await {
                Ok(upstream) => Some(upstream),
                Err(refusal) => {
                    let refused = admitted.refused(via, refusal);
                    return Err(answer(&mut guest, refused, request.head_only, tell).await);
                }
            }
        };
        if !request.connect {
            // An absolute-form request: the head is plain HTTP, forwarded.
            let sniffed = Head::Http {
                method: String::new(),
                target: String::new(),
                host: admitted.target.name(),
            };
            return self
                .forward(guest, head, sniffed, &admitted, upstream, tell)
                .await;
        }
        guest
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await
            .map_err(|e| {
                admitted.refused(
                    via,
                    Refusal::Upstream {
                        message: e.to_string(),
                    },
                )
            })?;
        // The tunnel's bytes are what is sniffed next.
        head.drain(..head_len(&head));
        let sniffed = read_head(
            &mut guest,
            &mut head,
            FIRST_BYTE_WAIT,
            self.options.head_timeout,
        )
        .await
        .map_err(|e| admitted.refused(via, sniff_refusal(e)))?;
        if matches!(sniffed, Head::Silent) {
            return self
                .first_speaker(guest, head, &admitted, upstream, tell)
                .await;
        }
        self.forward(guest, head, sniffed, &admitted, upstream, tell)
            .await
    }

    /// Reads a request to the HTTP proxy: a `CONNECT`, or an absolute-form
    /// request (left in `head` to be forwarded). A request whose target
    /// makes no sense is answered 400.
    pub(super) async fn proxy_request<S>(
        &self,
        guest: &mut S,
        head: &mut Vec<u8>,
        tell: &Tell,
    ) -> Result<ProxyRequest, Refused>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let proxy = Target::Raw(IpAddr::V4(GATEWAY_ADDR), PROXY_PORT);
        let refused = |refusal| Refused::new(Protocol::Proxy, &proxy, None, refusal);
        let sniffed = read_head(
            guest,
            head,
            self.options.head_timeout,
            self.options.head_timeout,
        )
        .await
        .map_err(|e| refused(sniff_refusal(e)))?;
        let Head::Http { method, target, .. } = sniffed else {
            return Err(refused(Refusal::Malformed {
                what: "not an HTTP proxy request".to_owned(),
            }));
        };
        match ProxyRequest::parse(&method, &target) {
            Ok(request) => Ok(request),
            Err(what) => {
                let refused = refused(Refusal::Malformed { what });
                let head_only = method.eq_ignore_ascii_case("HEAD");
                Err(answer(guest, refused, head_only, tell).await)
            }
        }
    }
}

/// Whether the guest connected to the HTTP proxy.
pub(super) fn is_proxy(destination: SocketAddrV4) -> bool {
    *destination.ip() == GATEWAY_ADDR && destination.port() == PROXY_PORT
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use http::StatusCode;

    use super::super::test_support::*;
    use super::*;
    use crate::audit::Verdict;
    use crate::told::Told;

    #[tokio::test]
    async fn a_refused_connect_is_answered_403_naming_the_destination_never_200() {
        let gateway = Arc::new(gateway(4));
        let (read, ended, told) = exchange(
            &gateway,
            proxy(),
            b"CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n",
        )
        .await;
        assert!(
            read.starts_with("HTTP/1.1 403 airlock: no rule allows evil.example:443\r\n"),
            "{read}"
        );
        assert!(!read.contains(" 200 "), "{read}");
        assert!(
            read.ends_with("\r\n\r\nairlock: no rule allows evil.example:443\nBlocked by this sandbox's network rules: retrying will not help. Only a rule added to the sandbox can allow it.\n"),
            "{read}"
        );
        assert_eq!(ended, Ok(()), "answered, not reset");
        assert_eq!(
            told,
            [Told::http(
                StatusCode::FORBIDDEN,
                "no rule allows evil.example:443".into()
            )]
        );
        let record = gateway.audit().pop().unwrap();
        assert_eq!(record.protocol, Protocol::Proxy);
        assert_eq!(record.name.as_deref(), Some("evil.example"));
        assert_eq!(record.verdict, Verdict::Refused(Refusal::NotAllowed));
    }

    #[tokio::test]
    async fn a_refused_absolute_form_request_is_answered_403() {
        let gateway = Arc::new(gateway(4));
        let (read, ended, told) = exchange(
            &gateway,
            proxy(),
            b"GET http://evil.example/x HTTP/1.1\r\nHost: evil.example\r\n\r\n",
        )
        .await;
        assert!(
            read.starts_with("HTTP/1.1 403 airlock: no rule allows evil.example:80\r\n"),
            "{read}"
        );
        assert_eq!(ended, Ok(()));
        assert_eq!(told.len(), 1, "{told:?}");
        // A HEAD request's answer has no body.
        let (read, _, _) = exchange(
            &gateway,
            proxy(),
            b"HEAD http://192.0.2.7/ HTTP/1.1\r\nHost: 192.0.2.7\r\n\r\n",
        )
        .await;
        assert!(
            read.starts_with("HTTP/1.1 403 airlock: no rule allows 192.0.2.7:80\r\n"),
            "{read}"
        );
        assert!(read.ends_with("\r\n\r\n"), "{read}");
    }

    #[tokio::test]
    async fn an_unreachable_upstream_is_answered_502_with_the_reason() {
        let gateway = Arc::new(gateway(4));
        let port = closed_port().await;
        let connect = format!("CONNECT plain.test:{port} HTTP/1.1\r\n\r\n");
        let (read, ended, told) = exchange(&gateway, proxy(), connect.as_bytes()).await;
        let expected = format!("HTTP/1.1 502 airlock: plain.test:{port} could not be reached: ");
        assert!(read.starts_with(&expected), "{read}");
        assert!(read.contains("refused"), "the OS's reason: {read}");
        assert!(!read.contains("127.0.0.1"), "no resolved address: {read}");
        assert_eq!(ended, Ok(()));
        assert_eq!(told[0].answer.as_deref(), Some("HTTP 502"));

        // Through the HTTP gate (an absolute-form request to a name) too.
        let get = format!("GET http://plain.test:{port}/ HTTP/1.1\r\nHost: plain.test:{port}\r\nConnection: close\r\n\r\n");
        let (read, _, _) = exchange(&gateway, proxy(), get.as_bytes()).await;
        assert!(read.starts_with(&expected), "{read}");
    }

    #[tokio::test]
    async fn an_allowed_connect_is_established_and_carries_the_tunnel() {
        let server = keep_alive_server().await;
        let gateway = Arc::new(gateway(4));
        let request = format!(
            "CONNECT plain.test:{port} HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\nHost: plain.test\r\nConnection: close\r\n\r\n",
            port = server.port()
        );
        let (read, ended, told) = exchange(&gateway, proxy(), request.as_bytes()).await;
        assert!(
            read.starts_with("HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.1 200 OK\r\n"),
            "{read}"
        );
        assert_eq!(ended, Ok(()));
        assert!(told.is_empty(), "{told:?}");
    }

    #[tokio::test]
    async fn a_proxy_request_past_the_limit_is_answered_429() {
        let server = keep_alive_server().await;
        let gateway = Arc::new(gateway(1));
        let fake = resolve(&gateway, "plain.test");
        // A silent connection holds the only place.
        let (tell, _) = collector();
        let (_held, host_side) = tokio::io::duplex(4096);
        let holder = tokio::spawn({
            let gateway = Arc::clone(&gateway);
            async move {
                let destination = SocketAddrV4::new(fake, server.port());
                gateway.connection(host_side, destination, &tell).await
            }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (read, ended, told) = exchange(
            &gateway,
            proxy(),
            b"CONNECT evil.example:443 HTTP/1.1\r\n\r\n",
        )
        .await;
        assert!(
            read.starts_with(
                "HTTP/1.1 429 airlock: no connection to evil.example:443: the sandbox already has 1 open, its limit\r\n"
            ),
            "{read}"
        );
        assert_eq!(ended, Ok(()));
        assert_eq!(told[0].answer.as_deref(), Some("HTTP 429"));
        // A direct connection past the limit has no way to be answered.
        let (read, ended, _) = exchange(
            &gateway,
            SocketAddrV4::new(fake, server.port()),
            b"GET / HTTP/1.1\r\nHost: plain.test\r\n\r\n",
        )
        .await;
        assert_eq!(read, "");
        assert!(
            ended.as_ref().is_err_and(
                |t| t.answer.is_none() && t.reason.starts_with("no connection to 198.18.")
            ),
            "{ended:?}"
        );
        holder.abort();
    }
}
