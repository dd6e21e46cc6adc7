//! Requests to the guest's HTTP proxy ([`GATEWAY_ADDR`](super::fake_ip::GATEWAY_ADDR):
//! [`PROXY_PORT`]): where a `CONNECT` or an absolute-form request is for.
//! The gateway decides on that destination before it answers anything: a
//! refused one is answered with the refusal, never with
//! `200 Connection established`.

use std::net::IpAddr;

use super::policy::normalize_name;

/// The HTTP proxy's port on the gateway address.
pub const PROXY_PORT: u16 = 3128;

/// Where a guest connection is going.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A name (resolved on the host) and port.
    Named(String, u16),
    /// An address the guest gave as such.
    Raw(IpAddr, u16),
}

impl Target {
    /// From a host that may be an address.
    pub fn of(host: String, port: u16) -> Self {
        match host.parse::<IpAddr>() {
            Ok(addr) => Target::Raw(addr, port),
            Err(_) => Target::Named(normalize_name(&host), port),
        }
    }

    /// The port.
    pub fn port(&self) -> u16 {
        match self {
            Target::Named(_, port) | Target::Raw(_, port) => *port,
        }
    }

    /// The name, for a named target.
    pub fn name(&self) -> Option<String> {
        match self {
            Target::Named(name, _) => Some(name.clone()),
            Target::Raw(..) => None,
        }
    }

    /// The address, for a raw target.
    pub fn addr(&self) -> Option<IpAddr> {
        match self {
            Target::Named(..) => None,
            Target::Raw(addr, _) => Some(*addr),
        }
    }
}

/// What a request to the proxy asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyRequest {
    /// Where to.
    pub target: Target,
    /// A `CONNECT` (a tunnel), or else an absolute-form request that is
    /// forwarded as it is.
    pub connect: bool,
    /// A `HEAD` request, whose answer has no body.
    pub head_only: bool,
}

impl ProxyRequest {
    /// The request with `method` and request target `target`, or what is
    /// wrong with it.
    pub fn parse(method: &str, target: &str) -> Result<Self, String> {
        let malformed = || format!("proxy request target {target:?}");
        if method.eq_ignore_ascii_case("CONNECT") {
            let (host, port) = split_authority(target, None).ok_or_else(malformed)?;
            return Ok(Self {
                target: Target::of(host, port),
                connect: true,
                head_only: false,
            });
        }
        let rest = target.strip_prefix("http://").ok_or_else(malformed)?;
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let authority = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
        let (host, port) = split_authority(authority, Some(80)).ok_or_else(malformed)?;
        Ok(Self {
            target: Target::of(host, port),
            connect: false,
            head_only: method.eq_ignore_ascii_case("HEAD"),
        })
    }
}

/// How many bytes of `buf` the complete HTTP request head at its start
/// takes; the rest (a client that did not wait for `200` to begin its
/// tunnel) belongs to the tunnel.
pub fn head_len(buf: &[u8]) -> usize {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    match httparse::Request::new(&mut headers).parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        _ => buf.len(),
    }
}

/// `host:port` (or `[v6]:port`), with `default` for a missing port.
pub fn split_authority(authority: &str, default: Option<u16>) -> Option<(String, u16)> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(port) => port.parse().ok()?,
            None => default?,
        };
        return Some((host.to_owned(), port));
    }
    match authority.rsplit_once(':') {
        Some((host, port)) => Some((host.to_owned(), port.parse().ok()?)),
        None => Some((authority.to_owned(), default?)),
    }
    .filter(|(host, port)| !host.is_empty() && *port != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authorities_split_into_host_and_port() {
        assert_eq!(
            split_authority("api.test:443", None),
            Some(("api.test".to_owned(), 443))
        );
        assert_eq!(
            split_authority("api.test", Some(80)),
            Some(("api.test".to_owned(), 80))
        );
        assert_eq!(split_authority("api.test", None), None);
        assert_eq!(
            split_authority("[::1]:8443", None),
            Some(("::1".to_owned(), 8443))
        );
        assert_eq!(split_authority(":443", None), None);
        assert_eq!(split_authority("h:0", None), None);
    }

    #[test]
    fn bytes_after_a_connect_head_are_the_tunnels() {
        let sent = b"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test\r\n\r\n\x16\x03\x01";
        assert_eq!(head_len(sent), sent.len() - 3);
        let partial = b"CONNECT a.test:443 HTTP/1.1\r\n";
        assert_eq!(head_len(partial), partial.len());
    }

    #[test]
    fn connect_and_absolute_form_name_their_destination() {
        assert_eq!(
            ProxyRequest::parse("CONNECT", "Evil.Example:443"),
            Ok(ProxyRequest {
                target: Target::Named("evil.example".into(), 443),
                connect: true,
                head_only: false,
            })
        );
        assert_eq!(
            ProxyRequest::parse("HEAD", "http://192.0.2.7?x"),
            Ok(ProxyRequest {
                target: Target::Raw([192, 0, 2, 7].into(), 80),
                connect: false,
                head_only: true,
            })
        );
        assert_eq!(
            ProxyRequest::parse("GET", "http://user@a.test:8080/p").map(|r| r.target),
            Ok(Target::Named("a.test".into(), 8080))
        );
        for (method, target) in [
            ("CONNECT", "a.test"),
            ("GET", "/origin-form"),
            ("GET", "https://a.test/"),
        ] {
            let error = ProxyRequest::parse(method, target).err();
            assert!(
                error.as_deref().is_some_and(|e| e.contains(target)),
                "{method} {target}: {error:?}"
            );
        }
    }
}
