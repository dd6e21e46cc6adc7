//! The network policy: which names and addresses sandboxed code may reach.
//!
//! A [`NetworkPolicy`] is a list of allow rules ([`NetRule`]); with none it
//! denies everything. A domain rule (`example.com`, `*.example.com:443`)
//! allows connections to a name, whatever it resolves to, unless it resolves
//! to a [restricted](is_restricted) address (loopback, private, link-local
//! and cloud metadata ...): those need a network rule (`10.0.0.0/8:5432`),
//! which allows an address range directly.
//!
//! Rule syntax, as [`NetRule`]'s `FromStr` reads and `Display` writes it:
//!
//! | rule                 | allows                                         |
//! |----------------------|------------------------------------------------|
//! | `example.com`        | the name `example.com`, any port               |
//! | `example.com:443`    | the name `example.com`, port 443               |
//! | `*.example.com`      | every name under `example.com`, not itself     |
//! | `*.example.com:8080` | the same, port 8080                            |
//! | `10.0.0.0/8`         | the addresses `10.0.0.0/8`, any port           |
//! | `10.0.0.0/8:5432`    | the same, port 5432                            |
//! | `127.0.0.1`          | that one address (`/32`), any port             |
//! | `127.0.0.1:8443`     | that address, port 8443                        |
//! | `::1`, `fd00::/8`    | IPv6 address or range, any port                |
//! | `[::1]:443`          | IPv6 with a port: the address in brackets      |
//! | `[fd00::]/8:443`     | IPv6 range with a port: `[ADDR]/LEN:PORT`      |
//!
//! Names are lowercased and a trailing dot is dropped; they may hold only
//! letters, digits, `-`, `_` and `.`, in labels of 1 to 63 characters, at
//! most 253 in all, and `*` only as the whole first label. Ports run from 1
//! to 65535. A range with host bits set (`10.0.0.1/8`) is refused rather
//! than widened, since it is most likely a typo.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// What rules look like, for error messages.
const ACCEPTED: &str = "expected a name (example.com), a wildcard (*.example.com), \
an address (127.0.0.1, ::1) or a range (10.0.0.0/8, fd00::/8), each optionally \
followed by :PORT, with an IPv6 address in brackets before a port ([::1]:443, [fd00::]/8:443)";

/// Why a rule did not parse. Each message quotes the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseRuleError {
    /// The rule was empty or only whitespace.
    #[error("empty network rule; {ACCEPTED}")]
    Empty,
    /// The port was not a number from 1 to 65535.
    #[error("network rule \"{rule}\": port \"{port}\" is not a number from 1 to 65535")]
    BadPort {
        /// The rule as written.
        rule: String,
        /// The port as written.
        port: String,
    },
    /// The name broke the naming rules.
    #[error(
        "network rule \"{rule}\": {reason}; a name holds only letters, digits, '-', '_' and '.', \
         in labels of 1 to 63 characters and at most 253 in all"
    )]
    BadName {
        /// The rule as written.
        rule: String,
        /// What is wrong with the name.
        reason: String,
    },
    /// A `*` somewhere other than as the whole first label.
    #[error(
        "network rule \"{rule}\": '*' may only be the whole first label, as in *.example.com \
         (which allows every name under example.com)"
    )]
    BadWildcard {
        /// The rule as written.
        rule: String,
    },
    /// An address or range that did not parse.
    #[error("network rule \"{rule}\": {reason}; {ACCEPTED}")]
    BadAddress {
        /// The rule as written.
        rule: String,
        /// What is wrong with the address.
        reason: String,
    },
    /// A range whose address has bits set past its prefix length.
    #[error("network rule \"{rule}\": {net} has host bits set; did you mean {suggestion}?")]
    HostBits {
        /// The rule as written.
        rule: String,
        /// The range as written.
        net: String,
        /// The range with the host bits cleared.
        suggestion: String,
    },
}

/// A domain name pattern: one name, or every name under a suffix.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DomainPattern {
    /// Exactly this name (lowercase, no trailing dot).
    Exact(String),
    /// Every name with at least one more label in front of this suffix:
    /// `*.example.com` is `Suffix("example.com")` and matches
    /// `a.example.com` and `a.b.example.com`, but not `example.com`.
    Suffix(String),
}

impl DomainPattern {
    /// Whether `name` matches, ignoring ASCII case and a trailing dot.
    pub fn matches(&self, name: &str) -> bool {
        let name = trim_dot(name);
        match self {
            DomainPattern::Exact(exact) => name.eq_ignore_ascii_case(trim_dot(exact)),
            DomainPattern::Suffix(suffix) => {
                let suffix = trim_dot(suffix);
                // At least one character of label and a dot before the suffix.
                let Some(split) = name.len().checked_sub(suffix.len() + 1) else {
                    return false;
                };
                split > 0
                    && name.is_char_boundary(split)
                    && name[split..].starts_with('.')
                    && name[split + 1..].eq_ignore_ascii_case(suffix)
            }
        }
    }
}

impl fmt::Display for DomainPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DomainPattern::Exact(name) => f.write_str(name),
            DomainPattern::Suffix(suffix) => write!(f, "*.{suffix}"),
        }
    }
}

/// One allow rule: a name pattern or an address range, on one port or all.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum NetRule {
    /// Connections to names matching `pattern` (on `port`, or any port).
    Domain {
        /// The names allowed.
        pattern: DomainPattern,
        /// The one port allowed, or `None` for any.
        port: Option<u16>,
    },
    /// Connections to addresses in `net` (on `port`, or any port), including
    /// restricted ones.
    Network {
        /// The addresses allowed.
        net: IpNet,
        /// The one port allowed, or `None` for any.
        port: Option<u16>,
    },
}

impl NetRule {
    /// The port this rule is limited to, if any.
    pub fn port(&self) -> Option<u16> {
        match self {
            NetRule::Domain { port, .. } | NetRule::Network { port, .. } => *port,
        }
    }

    fn allows_port(&self, port: u16) -> bool {
        self.port().is_none_or(|only| only == port)
    }
}

impl FromStr for NetRule {
    type Err = ParseRuleError;

    fn from_str(rule: &str) -> Result<Self, Self::Err> {
        let text = rule.trim();
        if text.is_empty() {
            return Err(ParseRuleError::Empty);
        }
        if let Some(rest) = text.strip_prefix('[') {
            return parse_bracketed(rule, rest);
        }
        if text.matches(':').count() > 1 {
            // Bare IPv6: no port (that needs brackets).
            let net = parse_net(rule, text)?;
            return Ok(NetRule::Network { net, port: None });
        }
        let (host, port) = match text.split_once(':') {
            Some((host, port)) => (host, Some(parse_port(rule, port)?)),
            None => (text, None),
        };
        if host.contains('/') || looks_numeric(host) {
            let net = parse_net(rule, host)?;
            return Ok(NetRule::Network { net, port });
        }
        let pattern = parse_pattern(rule, host)?;
        Ok(NetRule::Domain { pattern, port })
    }
}

impl fmt::Display for NetRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetRule::Domain { pattern, port } => {
                write!(f, "{pattern}")?;
                if let Some(port) = port {
                    write!(f, ":{port}")?;
                }
                Ok(())
            }
            NetRule::Network { net, port } => {
                let single = net.prefix_len() == net.max_prefix_len();
                match (net, port) {
                    (IpNet::V6(v6), Some(port)) if single => write!(f, "[{}]:{port}", v6.addr()),
                    (IpNet::V6(v6), Some(port)) => {
                        write!(f, "[{}]/{}:{port}", v6.addr(), v6.prefix_len())
                    }
                    (net, port) => {
                        if single {
                            write!(f, "{}", net.addr())?;
                        } else {
                            write!(f, "{net}")?;
                        }
                        if let Some(port) = port {
                            write!(f, ":{port}")?;
                        }
                        Ok(())
                    }
                }
            }
        }
    }
}

/// `[ADDR]`, `[ADDR]:PORT`, `[ADDR]/LEN` or `[ADDR]/LEN:PORT`, after the `[`.
fn parse_bracketed(rule: &str, rest: &str) -> Result<NetRule, ParseRuleError> {
    let bad = |reason: &str| ParseRuleError::BadAddress {
        rule: rule.to_owned(),
        reason: reason.to_owned(),
    };
    let (addr, after) = rest.split_once(']').ok_or_else(|| bad("'[' without ']'"))?;
    let addr: Ipv6Addr = addr
        .parse()
        .map_err(|_| bad("brackets must hold an IPv6 address"))?;
    let (prefix, port) = match after.split_once(':') {
        Some((prefix, port)) => (prefix, Some(parse_port(rule, port)?)),
        None => (after, None),
    };
    let net = match prefix {
        "" => format!("{addr}/128"),
        _ => match prefix.strip_prefix('/') {
            Some(len) => format!("{addr}/{len}"),
            None => return Err(bad("after ']' comes /LEN or :PORT")),
        },
    };
    let net = parse_net(rule, &net)?;
    Ok(NetRule::Network { net, port })
}

/// An address (a range of one) or a range without host bits.
fn parse_net(rule: &str, text: &str) -> Result<IpNet, ParseRuleError> {
    if !text.contains('/') {
        return match text.parse::<IpAddr>() {
            Ok(addr) => Ok(IpNet::from(addr)),
            Err(_) => Err(ParseRuleError::BadAddress {
                rule: rule.to_owned(),
                reason: format!("\"{text}\" is not an IP address"),
            }),
        };
    }
    let net: IpNet = text.parse().map_err(|_| ParseRuleError::BadAddress {
        rule: rule.to_owned(),
        reason: format!("\"{text}\" is not an address range like 10.0.0.0/8"),
    })?;
    if net.addr() != net.network() {
        return Err(ParseRuleError::HostBits {
            rule: rule.to_owned(),
            net: text.to_owned(),
            suggestion: net.trunc().to_string(),
        });
    }
    Ok(net)
}

fn parse_port(rule: &str, port: &str) -> Result<u16, ParseRuleError> {
    match port.parse::<u16>() {
        // `u16::from_str` takes a leading '+'; a port is digits only.
        Ok(n) if n > 0 && port.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
        _ => Err(ParseRuleError::BadPort {
            rule: rule.to_owned(),
            port: port.to_owned(),
        }),
    }
}

/// A host whose last label is all digits was meant as an IPv4 address (no
/// top-level domain is numeric), so `10.0.0.256` is a bad address, not a name.
fn looks_numeric(host: &str) -> bool {
    let last = trim_dot(host).rsplit('.').next().unwrap_or_default();
    !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit())
}

fn parse_pattern(rule: &str, host: &str) -> Result<DomainPattern, ParseRuleError> {
    let name = host.to_ascii_lowercase();
    let name = trim_dot(&name);
    let (wildcard, name) = match name.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, name),
    };
    if name.contains('*') || name == "*" {
        return Err(ParseRuleError::BadWildcard {
            rule: rule.to_owned(),
        });
    }
    check_name(name).map_err(|reason| ParseRuleError::BadName {
        rule: rule.to_owned(),
        reason,
    })?;
    let name = name.to_owned();
    Ok(if wildcard {
        DomainPattern::Suffix(name)
    } else {
        DomainPattern::Exact(name)
    })
}

/// Why `name` (lowercase, no trailing dot) is not a valid name, if it is not.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the name is empty".to_owned());
    }
    if name.len() > 253 {
        return Err(format!("the name is {} characters long", name.len()));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(format!("{c:?} is not allowed in a name"));
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err("the name has an empty label".to_owned());
        }
        if label.len() > 63 {
            return Err(format!(
                "the label \"{label}\" is longer than 63 characters"
            ));
        }
    }
    Ok(())
}

fn trim_dot(name: &str) -> &str {
    name.strip_suffix('.').unwrap_or(name)
}

/// A name as rules compare it: lowercase, without a trailing dot.
pub fn normalize_name(name: &str) -> String {
    trim_dot(name).to_ascii_lowercase()
}

/// The allow rules for one sandbox. The default (no rules) denies everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetworkPolicy {
    rules: Vec<NetRule>,
}

impl NetworkPolicy {
    /// A policy that denies everything.
    pub fn new() -> Self {
        Self::default()
    }

    /// This policy with `rule` added.
    #[must_use]
    pub fn allow(mut self, rule: NetRule) -> Self {
        self.rules.push(rule);
        self
    }

    /// Adds `rule`.
    pub fn push(&mut self, rule: NetRule) {
        self.rules.push(rule);
    }

    /// A policy of these rules.
    pub fn from_rules(rules: impl IntoIterator<Item = NetRule>) -> Self {
        Self {
            rules: rules.into_iter().collect(),
        }
    }

    /// The rules, in the order they were added.
    pub fn rules(&self) -> &[NetRule] {
        &self.rules
    }

    /// Whether there are no rules (everything is denied).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether a domain rule allows `name` on `port`.
    pub fn allows_name(&self, name: &str, port: u16) -> bool {
        self.rules.iter().any(|rule| match rule {
            NetRule::Domain { pattern, .. } => rule.allows_port(port) && pattern.matches(name),
            NetRule::Network { .. } => false,
        })
    }

    /// Whether a domain rule allows `name` on any port at all: the name may
    /// be resolved, though connections to it may still be refused by port.
    pub fn allows_name_on_some_port(&self, name: &str) -> bool {
        self.rules.iter().any(|rule| match rule {
            NetRule::Domain { pattern, .. } => pattern.matches(name),
            NetRule::Network { .. } => false,
        })
    }

    /// Whether a network rule allows `addr` on `port`. An IPv4-mapped IPv6
    /// address also matches rules for its IPv4 address.
    pub fn allows_addr(&self, addr: IpAddr, port: u16) -> bool {
        let canonical = addr.to_canonical();
        self.rules.iter().any(|rule| match rule {
            NetRule::Network { net, .. } => {
                rule.allows_port(port) && (net.contains(&addr) || net.contains(&canonical))
            }
            NetRule::Domain { .. } => false,
        })
    }
}

/// Whether `addr` is one a name may not resolve to unless a network rule
/// allows it: addresses of the host itself, of private and link-local
/// networks (with cloud metadata services at 169.254.169.254 and
/// fd00:ec2::254), of our own fake range 198.18.0.0/15, multicast and
/// reserved ones. IPv6 addresses that embed an IPv4 address (IPv4-mapped,
/// IPv4-compatible, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) are judged by it.
pub fn is_restricted(addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(v4) => is_restricted_v4(v4),
        IpAddr::V6(v6) => is_restricted_v6(v6),
    }
}

const RESTRICTED_V4: [Ipv4Net; 9] = [
    v4net(0, 0, 0, 0, 8),      // "this network", with the unspecified address
    v4net(10, 0, 0, 0, 8),     // RFC 1918
    v4net(100, 64, 0, 0, 10),  // carrier-grade NAT
    v4net(127, 0, 0, 0, 8),    // loopback
    v4net(169, 254, 0, 0, 16), // link-local, with cloud metadata
    v4net(172, 16, 0, 0, 12),  // RFC 1918
    v4net(192, 168, 0, 0, 16), // RFC 1918
    v4net(198, 18, 0, 0, 15),  // benchmarking; our fake addresses
    v4net(224, 0, 0, 0, 3),    // multicast, 240/4 reserved and broadcast
];

const fn v4net(a: u8, b: u8, c: u8, d: u8, len: u8) -> Ipv4Net {
    Ipv4Net::new_assert(Ipv4Addr::new(a, b, c, d), len)
}

const fn v6net(addr: Ipv6Addr, len: u8) -> Ipv6Net {
    Ipv6Net::new_assert(addr, len)
}

const RESTRICTED_V6: [Ipv6Net; 5] = [
    v6net(Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7), // unique local, with fd00:ec2::254
    v6net(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10), // link-local
    v6net(Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10), // site-local (deprecated)
    v6net(Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8), // multicast
    v6net(Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48), // local-use NAT64
];

const NAT64: Ipv6Net = v6net(Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96);
const SIX_TO_FOUR: Ipv6Net = v6net(Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16);

fn is_restricted_v4(addr: Ipv4Addr) -> bool {
    RESTRICTED_V4.iter().any(|net| net.contains(&addr))
}

fn is_restricted_v6(addr: Ipv6Addr) -> bool {
    if addr.is_loopback() || addr.is_unspecified() {
        return true;
    }
    if RESTRICTED_V6.iter().any(|net| net.contains(&addr)) {
        return true;
    }
    let bits = addr.to_bits();
    let low32 = Ipv4Addr::from_bits(bits as u32);
    if let Some(v4) = addr.to_ipv4_mapped() {
        return is_restricted_v4(v4);
    }
    // IPv4-compatible (::a.b.c.d) and NAT64 (64:ff9b::a.b.c.d).
    if bits >> 32 == 0 || NAT64.contains(&addr) {
        return is_restricted_v4(low32);
    }
    if SIX_TO_FOUR.contains(&addr) {
        return is_restricted_v4(Ipv4Addr::from_bits((bits >> 80) as u32));
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn rule(text: &str) -> Result<NetRule, ParseRuleError> {
        text.parse()
    }

    fn ip(text: &str) -> Result<IpAddr, std::net::AddrParseError> {
        text.parse()
    }

    #[test]
    fn every_documented_rule_form_round_trips() -> TestResult {
        for text in [
            "example.com",
            "example.com:443",
            "*.example.com",
            "*.example.com:8080",
            "10.0.0.0/8",
            "10.0.0.0/8:5432",
            "127.0.0.1",
            "127.0.0.1:8443",
            "::1",
            "[::1]:443",
            "fd00::/8",
            "[fd00::]/8:443",
            "under_score.example",
        ] {
            let parsed = rule(text)?;
            assert_eq!(parsed.to_string(), text, "display of {text}");
            assert_eq!(rule(&parsed.to_string())?, parsed, "reparse of {text}");
        }
        Ok(())
    }

    #[test]
    fn rules_parse_to_the_documented_values() -> TestResult {
        assert_eq!(
            rule("*.Example.COM.:8080")?,
            NetRule::Domain {
                pattern: DomainPattern::Suffix("example.com".into()),
                port: Some(8080)
            }
        );
        assert_eq!(
            rule("127.0.0.1")?,
            NetRule::Network {
                net: "127.0.0.1/32".parse()?,
                port: None
            }
        );
        assert_eq!(
            rule("[fd00::]/8:443")?,
            NetRule::Network {
                net: "fd00::/8".parse()?,
                port: Some(443)
            }
        );
        assert_eq!(
            rule("[::1]")?,
            NetRule::Network {
                net: "::1/128".parse()?,
                port: None
            }
        );
        Ok(())
    }

    #[test]
    fn bad_rules_are_refused_with_the_rule_quoted() {
        for (text, expected) in [
            ("", "empty"),
            ("example.com:0", "port \"0\""),
            ("example.com:65536", "port \"65536\""),
            ("example.com:+80", "port \"+80\""),
            ("example.com:", "port \"\""),
            ("exa mple.com", "' ' is not allowed"),
            ("ex/ample.com", "not an address range"),
            ("a..com", "empty label"),
            ("foo.*.com", "'*' may only be"),
            ("*", "'*' may only be"),
            ("*example.com", "'*' may only be"),
            ("10.0.0.256", "not an IP address"),
            ("10.0.0.1/8", "did you mean 10.0.0.0/8?"),
            ("10.0.0.0/33", "not an address range"),
            ("[::1", "without ']'"),
            ("[10.0.0.1]:80", "IPv6"),
            ("[fd00::]8", "/LEN or :PORT"),
            ("::1:443:x", "not an IP address"),
        ] {
            let err = match rule(text) {
                Ok(parsed) => panic!("{text:?} parsed as {parsed:?}"),
                Err(err) => err.to_string(),
            };
            assert!(err.contains(expected), "{text:?}: {err}");
            if !text.is_empty() {
                assert!(err.contains(&format!("\"{text}\"")), "{text:?}: {err}");
            }
        }
    }

    #[test]
    fn overlong_names_and_labels_are_refused() {
        let label = "a".repeat(64);
        assert!(rule(&format!("{label}.com")).is_err());
        let long = ["abcdefghi"; 26].join("."); // 259 characters
        assert!(rule(&long).is_err());
        assert!(rule(&"a".repeat(63)).is_ok());
    }

    #[test]
    fn wildcard_matches_names_under_the_suffix_but_not_the_suffix() {
        let pattern = DomainPattern::Suffix("example.com".into());
        assert!(pattern.matches("a.example.com"));
        assert!(pattern.matches("a.b.example.com"));
        assert!(pattern.matches("A.Example.Com."));
        assert!(!pattern.matches("example.com"));
        assert!(!pattern.matches(".example.com"));
        assert!(!pattern.matches("badexample.com"));
        assert!(!pattern.matches("example.com.evil"));
    }

    #[test]
    fn exact_pattern_ignores_case_and_trailing_dot() {
        let pattern = DomainPattern::Exact("example.com".into());
        assert!(pattern.matches("EXAMPLE.com."));
        assert!(!pattern.matches("www.example.com"));
        assert!(!pattern.matches("example.co"));
    }

    #[test]
    fn default_policy_denies_everything() -> TestResult {
        let policy = NetworkPolicy::default();
        assert!(policy.is_empty());
        assert!(!policy.allows_name("example.com", 443));
        assert!(!policy.allows_name_on_some_port("example.com"));
        assert!(!policy.allows_addr(ip("1.1.1.1")?, 53));
        Ok(())
    }

    #[test]
    fn ports_limit_name_rules_but_not_resolution() -> TestResult {
        let policy = NetworkPolicy::new().allow(rule("api.example.com:443")?);
        assert!(policy.allows_name("api.example.com", 443));
        assert!(!policy.allows_name("api.example.com", 80));
        assert!(policy.allows_name_on_some_port("api.example.com"));
        assert!(!policy.allows_name_on_some_port("www.example.com"));
        Ok(())
    }

    #[test]
    fn network_rules_allow_addresses_and_not_names() -> TestResult {
        let mut policy = NetworkPolicy::from_rules([rule("10.0.0.0/8:5432")?]);
        policy.push(rule("[fd00::]/8")?);
        assert_eq!(policy.rules().len(), 2);
        assert!(policy.allows_addr(ip("10.1.2.3")?, 5432));
        assert!(!policy.allows_addr(ip("10.1.2.3")?, 5433));
        assert!(!policy.allows_addr(ip("11.0.0.1")?, 5432));
        assert!(policy.allows_addr(ip("::ffff:10.1.2.3")?, 5432));
        assert!(policy.allows_addr(ip("fd12::1")?, 1));
        assert!(!policy.allows_name("10.1.2.3", 5432));
        Ok(())
    }

    #[test]
    fn name_rules_do_not_allow_addresses() -> TestResult {
        let policy = NetworkPolicy::new().allow(rule("example.com")?);
        assert!(!policy.allows_addr(ip("93.184.216.34")?, 443));
        Ok(())
    }

    #[test]
    fn private_loopback_and_metadata_addresses_are_restricted() -> TestResult {
        for text in [
            "127.0.0.1",
            "0.0.0.0",
            "0.1.2.3",
            "10.0.0.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "198.18.0.1",
            "198.19.255.254",
            "224.0.0.1",
            "240.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fd00:ec2::254",
            "fc00::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::10.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::",
        ] {
            assert!(is_restricted(ip(text)?), "{text} should be restricted");
        }
        Ok(())
    }

    #[test]
    fn public_addresses_are_not_restricted() -> TestResult {
        for text in [
            "1.1.1.1",
            "8.8.8.8",
            "93.184.216.34",
            "172.32.0.1",
            "100.128.0.1",
            "198.20.0.1",
            "2606:4700::1111",
            "::ffff:1.1.1.1",
            "64:ff9b::808:808",
            "2002:808:808::",
        ] {
            assert!(!is_restricted(ip(text)?), "{text} should not be restricted");
        }
        Ok(())
    }
}
