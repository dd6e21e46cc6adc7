//! Where a request of the front goes: to one port of one sandbox, named by
//! E2B's two headers (`E2b-Sandbox-Id`, `E2b-Sandbox-Port`: one endpoint for
//! all sandboxes, `E2B_SANDBOX_URL`) or by a Host of `PORT-ID.DOMAIN`
//! (`E2B_DOMAIN`); anything else is for the control plane.

use http::HeaderMap;

/// The header naming the sandbox on the one-endpoint form.
pub const SANDBOX_ID_HEADER: &str = "e2b-sandbox-id";
/// The header naming the guest port on the one-endpoint form.
pub const SANDBOX_PORT_HEADER: &str = "e2b-sandbox-port";

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// The control plane (`api.DOMAIN`, or the one endpoint without the
    /// sandbox headers).
    Control,
    /// A sandbox's port.
    Sandbox { id: String, port: u16 },
}

/// The destination of a request with `headers` and `host` (its Host or
/// `:authority`) for `domain`; `Err` says what is malformed.
pub fn destination(
    headers: &HeaderMap,
    host: Option<&str>,
    domain: &str,
) -> Result<Destination, String> {
    let id = one(headers, SANDBOX_ID_HEADER)?;
    let port = one(headers, SANDBOX_PORT_HEADER)?;
    match (id, port) {
        (Some(id), Some(port)) => {
            let port = port.parse::<u16>().map_err(|_| {
                format!("{SANDBOX_PORT_HEADER}: {port:?} is not a port number (1-65535)")
            })?;
            if port == 0 || id.is_empty() {
                return Err(format!(
                    "{SANDBOX_ID_HEADER} and {SANDBOX_PORT_HEADER} must name a sandbox and a port"
                ));
            }
            Ok(Destination::Sandbox {
                id: id.to_owned(),
                port,
            })
        }
        (Some(_), None) | (None, Some(_)) => Err(format!(
            "send {SANDBOX_ID_HEADER} and {SANDBOX_PORT_HEADER} together"
        )),
        (None, None) => Ok(
            match host.and_then(|host| crate::ingress::route::parse(Some(host), "", domain)) {
                Some(route) => Destination::Sandbox {
                    id: route.sandbox,
                    port: route.port,
                },
                None => Destination::Control,
            },
        ),
    }
}

/// The one value of header `name`, if any; `Err` for several or for one
/// that is not text.
fn one<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, String> {
    let mut values = headers.get_all(name).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return match headers.get(name) {
            None => Ok(None),
            Some(_) => Err(format!("{name}: send it once")),
        };
    };
    value
        .to_str()
        .map(|value| Some(value.trim()))
        .map_err(|_| format!("{name}: not text"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, value.parse().expect("a header value"));
        }
        map
    }

    #[test]
    fn the_headers_name_a_sandbox() {
        let map = headers(&[(SANDBOX_ID_HEADER, "abc"), (SANDBOX_PORT_HEADER, "49983")]);
        assert_eq!(
            destination(&map, Some("127.0.0.1:3000"), "e2b.localhost"),
            Ok(Destination::Sandbox {
                id: "abc".into(),
                port: 49983
            })
        );
    }

    #[test]
    fn a_host_names_a_sandbox_and_api_is_the_control_plane() {
        let none = HeaderMap::new();
        assert_eq!(
            destination(&none, Some("49999-abc.e2b.localhost:8443"), "e2b.localhost"),
            Ok(Destination::Sandbox {
                id: "abc".into(),
                port: 49999
            })
        );
        assert_eq!(
            destination(&none, Some("api.e2b.localhost"), "e2b.localhost"),
            Ok(Destination::Control)
        );
    }

    #[test]
    fn half_a_pair_or_a_bad_port_is_refused() {
        let map = headers(&[(SANDBOX_ID_HEADER, "abc")]);
        assert!(destination(&map, None, "d").is_err());
        let map = headers(&[(SANDBOX_ID_HEADER, "abc"), (SANDBOX_PORT_HEADER, "x")]);
        assert!(destination(&map, None, "d").is_err());
        let map = headers(&[
            (SANDBOX_ID_HEADER, "a"),
            (SANDBOX_ID_HEADER, "b"),
            (SANDBOX_PORT_HEADER, "1"),
        ]);
        assert!(destination(&map, None, "d").is_err());
    }
}
