//! [`Target`]: where a webhook posts, checked when it is registered and
//! again at each delivery.
//!
//! `https://` to any host, or `http://` to a loopback address (never in
//! clear over a network). A key's webhook may not reach the server's host
//! itself, as its sandboxes may not (`HostAccess` in docs/network.md): a
//! key's `http://` URL is refused, and so is an `https://` one whose host
//! is or resolves to a host address (loopback, link-local, unspecified,
//! one of the host's interfaces), checked at registration and again on
//! each delivery's connection, so a name that changes its answer later
//! reaches nothing of the host's. The owner's webhooks and the server-wide
//! ones may.

use std::net::{IpAddr, SocketAddr};

use http::Uri;

/// A URL's most bytes.
pub const MAX_URL_BYTES: usize = 2048;

/// Why a URL is refused.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("{url:?} is not a URL: {reason}")]
    Malformed { url: String, reason: String },
    #[error("a webhook URL is at most {MAX_URL_BYTES} bytes")]
    TooLong,
    #[error(
        "{url:?}: a webhook is https://, or http:// to a loopback address (127.0.0.1, [::1], \
         localhost)"
    )]
    Scheme { url: String },
    #[error(
        "{url:?} reaches the server's own host ({address}); a key's webhook may not, as its \
         sandboxes may not: use https:// to another host"
    )]
    Host { url: String, address: IpAddr },
    #[error("cannot resolve {host}")]
    Resolve {
        host: String,
        #[source]
        source: std::io::Error,
    },
}

/// A webhook's URL, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub uri: Uri,
    pub tls: bool,
    pub host: String,
    pub port: u16,
}

/// Whether `address` is the host's own: loopback, link-local,
/// unspecified, or one of its interfaces' addresses.
pub fn is_host_address(address: IpAddr) -> bool {
    let address = address.to_canonical();
    let special = match address {
        IpAddr::V4(v4) => {
            v4.is_loopback() || v4.is_link_local() || v4.is_unspecified() || v4.octets()[0] == 0
        }
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.is_unspecified() || (v6.segments()[0] & 0xffc0) == 0xfe80
        }
    };
    special || airlock::network::host::own_addresses().contains(&address)
}

fn is_loopback_host(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok_and(|address| address.is_loopback())
}

impl Target {
    /// Parses `url` for a webhook of the owner (`may_reach_host`) or a key.
    pub fn parse(url: &str, may_reach_host: bool) -> Result<Target, TargetError> {
        if url.len() > MAX_URL_BYTES {
            return Err(TargetError::TooLong);
        }
        let malformed = |reason: &str| TargetError::Malformed {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        let uri: Uri = url
            .parse()
            .map_err(|e: http::uri::InvalidUri| malformed(&e.to_string()))?;
        let authority = uri.authority().ok_or_else(|| malformed("no host"))?;
        if authority.as_str().contains('@') {
            return Err(malformed(
                "credentials in a URL are refused; the signature authenticates",
            ));
        }
        let host = authority.host().to_owned();
        if host.is_empty() {
            return Err(malformed("no host"));
        }
        let tls = match uri.scheme_str() {
            Some("https") => true,
            Some("http") if is_loopback_host(&host) && may_reach_host => false,
            _ => {
                return Err(TargetError::Scheme {
                    url: url.to_owned(),
                })
            }
        };
        let port = authority.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let target = Target {
            uri,
            tls,
            host,
            port,
        };
        if !may_reach_host {
            if let Some(address) = target.literal() {
                if is_host_address(address) {
                    return Err(TargetError::Host {
                        url: url.to_owned(),
                        address,
                    });
                }
            }
        }
        Ok(target)
    }

    /// The host as an IP address, if it is one.
    fn literal(&self) -> Option<IpAddr> {
        self.host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .ok()
    }

    /// The addresses to connect to: for a key's webhook, none of the
    /// host's own (all of them refused: `Host`).
    pub async fn resolve(&self, may_reach_host: bool) -> Result<Vec<SocketAddr>, TargetError> {
        let addresses: Vec<SocketAddr> = match self.literal() {
            Some(address) => vec![SocketAddr::new(address, self.port)],
            None => tokio::net::lookup_host((self.host.as_str(), self.port))
                .await
                .map_err(|source| TargetError::Resolve {
                    host: self.host.clone(),
                    source,
                })?
                .collect(),
        };
        if may_reach_host {
            return Ok(addresses);
        }
        if let Some(own) = addresses.iter().find(|a| is_host_address(a.ip())) {
            return Err(TargetError::Host {
                url: self.uri.to_string(),
                address: own.ip(),
            });
        }
        Ok(addresses)
    }

    /// The request target: the path and query.
    pub fn path(&self) -> &str {
        self.uri.path_and_query().map_or("/", |p| p.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_anywhere_and_http_only_to_loopback_for_the_owner() {
        let target = Target::parse("https://hooks.example/in?x=1", false).unwrap();
        assert!(target.tls);
        assert_eq!(target.port, 443);
        assert_eq!(target.path(), "/in?x=1");
        let local = Target::parse("http://127.0.0.1:8080/hook", true).unwrap();
        assert!(!local.tls);
        assert_eq!(local.port, 8080);
        assert!(Target::parse("http://[::1]:9/", true).is_ok());
        assert!(matches!(
            Target::parse("http://hooks.example/", true),
            Err(TargetError::Scheme { .. })
        ));
        assert!(matches!(
            Target::parse("http://127.0.0.1:8080/", false),
            Err(TargetError::Scheme { .. })
        ));
        assert!(matches!(
            Target::parse("ftp://hooks.example/", true),
            Err(TargetError::Scheme { .. })
        ));
    }

    #[test]
    fn a_keys_https_url_to_the_host_itself_is_refused() {
        for url in [
            "https://127.0.0.1/",
            "https://[::1]:8443/",
            "https://169.254.169.254/latest",
            "https://0.0.0.0/",
        ] {
            assert!(
                matches!(Target::parse(url, false), Err(TargetError::Host { .. })),
                "{url}"
            );
            assert!(Target::parse(url, true).is_ok(), "{url}");
        }
    }

    #[test]
    fn malformed_and_long_urls_are_refused() {
        assert!(matches!(
            Target::parse("not a url", true),
            Err(TargetError::Malformed { .. })
        ));
        assert!(matches!(
            Target::parse("https://user:pw@hooks.example/", true),
            Err(TargetError::Malformed { .. })
        ));
        let long = format!("https://hooks.example/{}", "a".repeat(MAX_URL_BYTES));
        assert!(matches!(
            Target::parse(&long, true),
            Err(TargetError::TooLong)
        ));
    }

    #[tokio::test]
    async fn a_name_resolving_to_loopback_is_refused_for_a_key() {
        let target = Target::parse("https://localhost:9/", false).unwrap();
        assert!(matches!(
            target.resolve(false).await,
            Err(TargetError::Host { .. })
        ));
        assert!(!target.resolve(true).await.unwrap().is_empty());
    }
}
