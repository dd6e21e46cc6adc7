//! Which sandbox and guest port a request is for. Two forms:
//!
//! - by host: `{port}-{sandbox_id}.{domain}` (any port after the name is
//!   the ingress's own and ignored), what browsers and curl reach under
//!   `*.localhost`;
//! - by path: `/_sandbox/{sandbox_id}/{port}/...` on any host, for
//!   clients that cannot resolve such names (glibc does not resolve
//!   `*.localhost`): the prefix is taken off before the request reaches
//!   the guest. A client may instead connect to the ingress's address and
//!   send the first form's Host header.

/// The path prefix of the second form.
pub const PATH_PREFIX: &str = "/_sandbox/";

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The sandbox id as the request wrote it (a browser lowercases a
    /// host; the registry matches ids without case when it must).
    pub sandbox: String,
    pub port: u16,
    /// For the path form: the prefix to take off (`/_sandbox/ID/PORT`).
    pub prefix: Option<String>,
}

/// The route of a request with `host` (its Host or `:authority`) and
/// `path`, for ingress domain `domain`; `None` when it names none.
pub fn parse(host: Option<&str>, path: &str, domain: &str) -> Option<Route> {
    if let Some(route) = by_path(path) {
        return Some(route);
    }
    by_host(host?, domain)
}

fn by_host(host: &str, domain: &str) -> Option<Route> {
    let name = strip_port(host);
    let label = name
        .strip_suffix(domain)
        .and_then(|rest| rest.strip_suffix('.'))
        .or_else(|| {
            // Hosts compare without case.
            let lower = name.to_ascii_lowercase();
            let domain = domain.to_ascii_lowercase();
            let cut = lower.strip_suffix(&domain)?.strip_suffix('.')?.len();
            Some(&name[..cut])
        })?;
    let (port, sandbox) = label.split_once('-')?;
    Some(Route {
        sandbox: sandbox.to_owned(),
        port: port_number(port)?,
        prefix: None,
    })
}

fn by_path(path: &str) -> Option<Route> {
    let rest = path.strip_prefix(PATH_PREFIX)?;
    let mut parts = rest.splitn(3, '/');
    let sandbox = parts.next().filter(|s| !s.is_empty())?;
    let port = port_number(parts.next()?)?;
    Some(Route {
        sandbox: sandbox.to_owned(),
        port,
        prefix: Some(format!("{PATH_PREFIX}{sandbox}/{port}")),
    })
}

/// A port of 1 to 65535 written in plain digits.
fn port_number(text: &str) -> Option<u16> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) || text.starts_with('0') {
        return None;
    }
    text.parse::<u16>().ok().filter(|&p| p != 0)
}

/// `name:port` without `:port` (names only; ingress never routes by an IP
/// literal).
fn strip_port(host: &str) -> &str {
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

/// The path (and query) the guest sees: the prefix of the path form
/// taken off, `/` at least.
pub fn guest_path(route: &Route, path_and_query: &str) -> String {
    let rest = match &route.prefix {
        Some(prefix) => path_and_query.strip_prefix(prefix.as_str()).unwrap_or(""),
        None => path_and_query,
    };
    if rest.starts_with('/') {
        rest.to_owned()
    } else {
        format!("/{rest}")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const DOMAIN: &str = "airlock.localhost";

    #[test]
    fn the_host_names_port_and_sandbox() {
        let route = parse(
            Some("8000-sandbox-Ab12.airlock.localhost:8080"),
            "/",
            DOMAIN,
        )
        .unwrap();
        assert_eq!(route.sandbox, "sandbox-Ab12");
        assert_eq!(route.port, 8000);
        assert_eq!(route.prefix, None);
        let route = parse(Some("80-x.AIRLOCK.localhost"), "/a", DOMAIN).unwrap();
        assert_eq!((route.sandbox.as_str(), route.port), ("x", 80));
        for bad in [
            "airlock.localhost",
            "x.airlock.localhost",
            "0-x.airlock.localhost",
            "65536-x.airlock.localhost",
            "08-x.airlock.localhost",
            "8000-x.example.com",
            "8000-x.evilairlock.localhost",
        ] {
            assert_eq!(parse(Some(bad), "/", DOMAIN), None, "{bad}");
        }
        assert_eq!(parse(None, "/", DOMAIN), None);
    }

    #[test]
    fn the_path_form_is_taken_off_before_the_guest() {
        let route = parse(
            Some("127.0.0.1:8080"),
            "/_sandbox/sb-1/8000/a/b?c=1",
            DOMAIN,
        )
        .unwrap();
        assert_eq!(route.sandbox, "sb-1");
        assert_eq!(route.port, 8000);
        assert_eq!(
            guest_path(&route, "/_sandbox/sb-1/8000/a/b?c=1"),
            "/a/b?c=1"
        );
        assert_eq!(guest_path(&route, "/_sandbox/sb-1/8000"), "/");
        assert_eq!(parse(None, "/_sandbox/sb-1/x/", DOMAIN), None);
        assert_eq!(parse(None, "/_sandbox//80/", DOMAIN), None);
    }
}
