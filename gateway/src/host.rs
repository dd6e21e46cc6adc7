//! The host's own addresses, and whether a sandbox may reach them.
//!
//! A sandbox's gateway dials from the host, so an address that means "this
//! machine" there (loopback, link-local, the unspecified address, any
//! address of the host's interfaces) would open the host's own services to
//! the guest: the server's API and ingress among them. [`HostAccess`] on a
//! sandbox's network options says whether that is allowed; by default it
//! is [`Denied`](HostAccess::Denied), and then:
//! - the gateway refuses every connection to a host address (`host_kind`)
//!   whatever the rules say (`0.0.0.0/0:*` allows the world, never the
//!   host; a name that resolves to 127.0.0.1 is refused too), one decision
//!   made where it admits a destination (direct TCP, TLS, HTTP, the proxy's
//!   `CONNECT` and absolute-form requests: every path goes through it, and
//!   DNS answers are fake addresses that come back to it);
//! - a rule whose whole range is host addresses (`127.0.0.1`,
//!   `169.254.169.254`, `[::1]:443`, the host's own IP) is refused when the
//!   policy is set or changed ([`check_rules`]), with an error naming the
//!   rule and why ([`HostRuleError`]).
//!
//! The host's interface addresses are read with `getifaddrs` and kept for
//! `ADDRESSES_KEPT_FOR`, so that a decision is never made on a list much
//! older than the host's interfaces.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use super::policy::NetRule;

/// How long a reading of the host's interface addresses is used.
pub(crate) const ADDRESSES_KEPT_FOR: Duration = Duration::from_secs(2);

/// Whether a sandbox's guest may reach the host it runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HostAccess {
    /// No connection to a host address, whatever the rules say; rules
    /// whose whole range is host addresses are refused. The default.
    #[default]
    Denied,
    /// Host addresses follow the rules as any other: a rule for
    /// `127.0.0.1:8080` reaches the host's loopback. For the machine's
    /// owner only: a guest given this reaches every service the rules let
    /// it on the host.
    Allowed,
}

impl HostAccess {
    /// Whether host addresses may be reached.
    pub fn is_allowed(self) -> bool {
        self == HostAccess::Allowed
    }
}

/// What makes an address one of the host's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HostKind {
    /// 127.0.0.0/8 or `::1`.
    Loopback,
    /// 169.254.0.0/16 (with cloud metadata at 169.254.169.254) or
    /// `fe80::/10`.
    LinkLocal,
    /// 0.0.0.0/8 ("this host") or `::`.
    Unspecified,
    /// An address of one of the host's interfaces.
    Own,
}

impl fmt::Display for HostKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HostKind::Loopback => "the host's loopback",
            HostKind::LinkLocal => "link-local (the host's own link, with cloud metadata)",
            HostKind::Unspecified => "the unspecified address (this host)",
            HostKind::Own => "an address of the host's own interfaces",
        })
    }
}

/// A rule refused because all it allows is the host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "network rule \"{rule}\" is {kind}; a sandbox may not reach the host it runs on unless its \
     host access is allowed, which only the machine's owner may do (on a server: `airlock serve \
     --host-access`, for the owner's sandboxes)"
)]
pub struct HostRuleError {
    /// The rule, as written back.
    pub rule: String,
    /// What it is of the host's.
    pub kind: HostKind,
}

const LOOPBACK_V4: Ipv4Net = Ipv4Net::new_assert(Ipv4Addr::new(127, 0, 0, 0), 8);
const LINK_LOCAL_V4: Ipv4Net = Ipv4Net::new_assert(Ipv4Addr::new(169, 254, 0, 0), 16);
const THIS_HOST_V4: Ipv4Net = Ipv4Net::new_assert(Ipv4Addr::new(0, 0, 0, 0), 8);
const LINK_LOCAL_V6: Ipv6Net = Ipv6Net::new_assert(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10);

/// What `addr` is of the host's, judged against the host's interface
/// addresses now (read at most [`ADDRESSES_KEPT_FOR`] ago); `None`: it is
/// not the host's. An IPv4-mapped IPv6 address is judged by its IPv4
/// address.
pub(crate) fn host_kind(addr: IpAddr) -> Option<HostKind> {
    host_kind_among(addr, &own_addresses())
}

/// [`host_kind`] with `own` as the host's interface addresses.
pub(crate) fn host_kind_among(addr: IpAddr, own: &[IpAddr]) -> Option<HostKind> {
    let addr = addr.to_canonical();
    let fixed = match addr {
        IpAddr::V4(v4) if LOOPBACK_V4.contains(&v4) => Some(HostKind::Loopback),
        IpAddr::V4(v4) if LINK_LOCAL_V4.contains(&v4) => Some(HostKind::LinkLocal),
        IpAddr::V4(v4) if THIS_HOST_V4.contains(&v4) => Some(HostKind::Unspecified),
        IpAddr::V6(v6) if v6.is_loopback() => Some(HostKind::Loopback),
        IpAddr::V6(v6) if v6.is_unspecified() => Some(HostKind::Unspecified),
        IpAddr::V6(v6) if LINK_LOCAL_V6.contains(&v6) => Some(HostKind::LinkLocal),
        _ => None,
    };
    fixed.or_else(|| {
        own.iter()
            .any(|own| own.to_canonical() == addr)
            .then_some(HostKind::Own)
    })
}

/// What `net` is of the host's when every address in it is the host's
/// (judged against `own`); `None` when it allows anything else.
pub(crate) fn net_host_kind_among(net: &IpNet, own: &[IpAddr]) -> Option<HostKind> {
    let single = net.prefix_len() == net.max_prefix_len();
    let within_v4 = |outer: &Ipv4Net| match net {
        IpNet::V4(v4) => outer.contains(v4),
        // An IPv4-mapped range (::ffff:127.0.0.0/104) is its IPv4 range.
        IpNet::V6(v6) => {
            v6.prefix_len() >= 96 && {
                let mapped = v6.network().to_ipv4_mapped();
                mapped.is_some_and(|start| {
                    Ipv4Net::new(start, v6.prefix_len() - 96).is_ok_and(|v4| outer.contains(&v4))
                })
            }
        }
    };
    if within_v4(&LOOPBACK_V4) {
        return Some(HostKind::Loopback);
    }
    if within_v4(&LINK_LOCAL_V4) {
        return Some(HostKind::LinkLocal);
    }
    if within_v4(&THIS_HOST_V4) {
        return Some(HostKind::Unspecified);
    }
    if let IpNet::V6(v6) = net {
        if LINK_LOCAL_V6.contains(v6) {
            return Some(HostKind::LinkLocal);
        }
    }
    // `::1/128` and `::/128` (a wider range holds more than the host).
    if single {
        return host_kind_among(net.addr(), own);
    }
    None
}

/// Refuses, when `access` is [`Denied`](HostAccess::Denied), the first rule
/// of `rules` whose whole range is the host's (with its index). Domain
/// rules are judged when their name resolves, not here.
pub fn check_rules<'a>(
    rules: impl IntoIterator<Item = &'a NetRule>,
    access: HostAccess,
) -> Result<(), (usize, HostRuleError)> {
    if access.is_allowed() {
        return Ok(());
    }
    let own = own_addresses();
    for (index, rule) in rules.into_iter().enumerate() {
        if let NetRule::Network { net, .. } = rule {
            if let Some(kind) = net_host_kind_among(net, &own) {
                return Err((
                    index,
                    HostRuleError {
                        rule: rule.to_string(),
                        kind,
                    },
                ));
            }
        }
    }
    Ok(())
}

/// The host's interface addresses, read again when the last reading is
/// older than `ADDRESSES_KEPT_FOR` (2 s). A reading that fails is logged and
/// gives none: loopback, link-local and unspecified are refused all the
/// same.
pub fn own_addresses() -> Vec<IpAddr> {
    /// A reading of the host's interface addresses, and when it was made.
    type Reading = Option<(Instant, Vec<IpAddr>)>;
    static KEPT: OnceLock<Mutex<Reading>> = OnceLock::new();
    let mut kept = KEPT
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some((at, addrs)) = kept.as_ref() {
        if at.elapsed() < ADDRESSES_KEPT_FOR {
            return addrs.clone();
        }
    }
    let addrs = read_interfaces();
    *kept = Some((Instant::now(), addrs.clone()));
    addrs
}

fn read_interfaces() -> Vec<IpAddr> {
    let interfaces = match nix::ifaddrs::getifaddrs() {
        Ok(interfaces) => interfaces,
        Err(error) => {
            tracing::warn!(%error, "cannot list the host's interface addresses");
            return Vec::new();
        }
    };
    let mut addrs = Vec::new();
    for interface in interfaces {
        let Some(address) = interface.address else {
            continue;
        };
        if let Some(v4) = address.as_sockaddr_in() {
            addrs.push(IpAddr::V4(v4.ip()));
        } else if let Some(v6) = address.as_sockaddr_in6() {
            addrs.push(IpAddr::V6(v6.ip()));
        }
    }
    addrs.sort_unstable();
    addrs.dedup();
    addrs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::NetworkPolicy;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap_or(IpAddr::V4(Ipv4Addr::BROADCAST))
    }

    #[test]
    fn loopback_link_local_unspecified_and_own_addresses_are_the_hosts() {
        let own = [ip("10.1.2.3"), ip("2001:db8::7")];
        for (text, kind) in [
            ("127.0.0.1", HostKind::Loopback),
            ("127.255.0.9", HostKind::Loopback),
            ("::1", HostKind::Loopback),
            ("::ffff:127.0.0.1", HostKind::Loopback),
            ("169.254.169.254", HostKind::LinkLocal),
            ("fe80::1", HostKind::LinkLocal),
            ("0.0.0.0", HostKind::Unspecified),
            ("::", HostKind::Unspecified),
            ("10.1.2.3", HostKind::Own),
            ("::ffff:10.1.2.3", HostKind::Own),
            ("2001:db8::7", HostKind::Own),
        ] {
            assert_eq!(host_kind_among(ip(text), &own), Some(kind), "{text}");
        }
        // Private and public addresses that are not the host's own stay
        // with the rules.
        for text in [
            "10.1.2.4",
            "192.168.1.1",
            "1.1.1.1",
            "2001:db8::8",
            "fd00::1",
        ] {
            assert_eq!(host_kind_among(ip(text), &own), None, "{text}");
        }
    }

    #[test]
    fn the_hosts_own_interfaces_are_read() {
        let own = own_addresses();
        // Every Linux host has a loopback interface.
        assert!(own.contains(&IpAddr::V4(Ipv4Addr::LOCALHOST)), "{own:?}");
        assert_eq!(host_kind(ip("127.0.0.1")), Some(HostKind::Loopback));
    }

    #[test]
    fn a_rule_of_host_addresses_only_is_refused_naming_it_and_why() -> TestResult {
        let own = [ip("10.1.2.3")];
        for (text, kind) in [
            ("127.0.0.1/32:8080", HostKind::Loopback),
            ("127.0.0.0/8", HostKind::Loopback),
            ("[::1]:443", HostKind::Loopback),
            ("[::ffff:127.0.0.1]:80", HostKind::Loopback),
            ("169.254.169.254", HostKind::LinkLocal),
            ("fe80::/64", HostKind::LinkLocal),
            ("0.0.0.0", HostKind::Unspecified),
            ("10.1.2.3:22", HostKind::Own),
        ] {
            let rule: NetRule = text.parse()?;
            assert_eq!(
                net_host_kind_among(&net_of(&rule), &own),
                Some(kind),
                "{text}"
            );
        }
        for text in ["0.0.0.0/0", "10.0.0.0/8", "10.1.2.0/24", "::/0", "1.1.1.1"] {
            let rule: NetRule = text.parse()?;
            assert_eq!(net_host_kind_among(&net_of(&rule), &own), None, "{text}");
        }
        let policy = NetworkPolicy::from_rules([
            "example.com".parse()?,
            "0.0.0.0/0".parse()?,
            "127.0.0.1/32:8080".parse()?,
        ]);
        let (index, error) = check_rules(policy.rules(), HostAccess::Denied)
            .err()
            .ok_or("refused")?;
        assert_eq!(index, 2);
        let message = error.to_string();
        assert!(
            message.starts_with("network rule \"127.0.0.1:8080\" is the host's loopback;"),
            "{message}"
        );
        assert!(message.contains("airlock serve --host-access"), "{message}");
        assert_eq!(check_rules(policy.rules(), HostAccess::Allowed), Ok(()));
        Ok(())
    }

    fn net_of(rule: &NetRule) -> IpNet {
        match rule {
            NetRule::Network { net, .. } => *net,
            NetRule::Domain { .. } => IpNet::V4(Ipv4Net::default()),
        }
    }
}
