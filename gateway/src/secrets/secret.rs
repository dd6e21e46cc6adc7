//! One credential and the hosts it may be sent to.
//!
//! A [`Secret`] is a name (the environment variable the guest sees), a value
//! that never enters the guest, and the host names the value may be sent
//! to. Host patterns are lowercase DNS names, or `*.suffix` for any name
//! below `suffix` (not `suffix` itself). The value lives in a type whose
//! `Debug` prints `<redacted>` and is reachable only inside this crate.
//!
//! On a command line a secret is written `NAME=VALUE@host[,host...]`; the
//! split is at the last `@`, so a value may itself contain `@`.

use std::fmt;
use std::str::FromStr;

/// The longest host name DNS allows (RFC 1035, without the final dot).
const MAX_HOST_LEN: usize = 253;
/// The longest label DNS allows.
const MAX_LABEL_LEN: usize = 63;

/// Why a secret was refused. No message ever contains the value.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// The name cannot be an environment variable name.
    #[error("secret name {name:?} is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")]
    InvalidName {
        /// The refused name.
        name: String,
    },
    /// The value is empty.
    #[error("secret {name} has an empty value")]
    EmptyValue {
        /// The secret's name.
        name: String,
    },
    /// The value holds a byte no HTTP header may carry.
    #[error("secret {name}'s value contains CR, LF or NUL")]
    ForbiddenByte {
        /// The secret's name.
        name: String,
    },
    /// A host pattern is neither a DNS name nor `*.suffix`.
    #[error("secret {name}: {host:?} is not a host name (a DNS name, or *.suffix)")]
    InvalidHost {
        /// The secret's name.
        name: String,
        /// The refused pattern.
        host: String,
    },
    /// The secret is bound to no host, so it could never be sent anywhere.
    #[error("secret {name} is bound to no host")]
    NoHosts {
        /// The secret's name.
        name: String,
    },
    /// A command-line secret is not in the expected shape.
    #[error("a secret is written NAME=VALUE@host[,host...]")]
    Syntax,
}

/// A secret's value; `Debug` never shows it.
#[derive(Clone)]
pub(crate) struct SecretValue(String);

impl SecretValue {
    /// The value itself.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A credential the guest may use, but never see, on the hosts it is
/// bound to.
#[derive(Debug, Clone)]
pub struct Secret {
    name: String,
    value: SecretValue,
    hosts: Vec<String>,
}

impl Secret {
    /// Whether `name` can name a secret: an environment variable name,
    /// `[A-Za-z_][A-Za-z0-9_]*`.
    pub fn is_valid_name(name: &str) -> bool {
        is_env_name(name)
    }

    /// A secret named `name` (an environment variable name) with `value`
    /// (non-empty, without CR, LF or NUL), bound to no host yet.
    pub fn new(name: impl Into<String>, value: impl Into<String>) -> Result<Self, SecretError> {
        let name = name.into();
        let value = value.into();
        if !is_env_name(&name) {
            return Err(SecretError::InvalidName { name });
        }
        if value.is_empty() {
            return Err(SecretError::EmptyValue { name });
        }
        if value.bytes().any(|b| matches!(b, b'\r' | b'\n' | b'\0')) {
            return Err(SecretError::ForbiddenByte { name });
        }
        Ok(Self {
            name,
            value: SecretValue(value),
            hosts: Vec::new(),
        })
    }

    /// Also binds the secret to `host`: a DNS name, or `*.suffix` for any
    /// name below `suffix`. Letters are lowercased and a final dot dropped;
    /// a pattern that is still not a host name is refused when the secret
    /// joins a [`Secrets`](super::Secrets) set.
    #[must_use]
    pub fn host(mut self, host: impl AsRef<str>) -> Self {
        self.hosts.push(normalize_host(host.as_ref()));
        self
    }

    /// Also binds the secret to every pattern in `hosts` (see
    /// [`Secret::host`]).
    #[must_use]
    pub fn hosts<I>(self, hosts: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        hosts.into_iter().fold(self, Secret::host)
    }

    /// The environment variable the guest finds the placeholder in.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The host patterns the value may be sent to, normalized.
    pub fn bound_hosts(&self) -> &[String] {
        &self.hosts
    }

    /// Whether the value may be sent to `host` (compared without case and
    /// without a final dot).
    pub fn is_bound_to(&self, host: &str) -> bool {
        let host = normalize_host(host);
        self.hosts
            .iter()
            .any(|pattern| pattern_matches(pattern, &host))
    }

    /// The value: for the proxy that puts it into requests and for an
    /// adoptable sandbox's record (0600), nothing else; never log it.
    pub fn value(&self) -> &str {
        self.value.expose()
    }

    /// Checks what [`Secret::host`] could not: that there is a host and
    /// every pattern is a host name.
    pub(crate) fn check_hosts(&self) -> Result<(), SecretError> {
        if self.hosts.is_empty() {
            return Err(SecretError::NoHosts {
                name: self.name.clone(),
            });
        }
        match self.hosts.iter().find(|h| !is_host_pattern(h)) {
            Some(bad) => Err(SecretError::InvalidHost {
                name: self.name.clone(),
                host: bad.clone(),
            }),
            None => Ok(()),
        }
    }
}

impl FromStr for Secret {
    type Err = SecretError;

    /// Parses `NAME=VALUE@host[,host...]`, splitting at the last `@`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (binding, hosts) = s.rsplit_once('@').ok_or(SecretError::Syntax)?;
        let (name, value) = binding.split_once('=').ok_or(SecretError::Syntax)?;
        let hosts: Vec<&str> = hosts.split(',').map(str::trim).collect();
        if hosts.iter().any(|h| h.is_empty()) {
            return Err(SecretError::Syntax);
        }
        let secret = Secret::new(name, value)?.hosts(hosts);
        secret.check_hosts()?;
        Ok(secret)
    }
}

/// `[A-Za-z_][A-Za-z0-9_]*`: what a secret's name must be (see
/// [`Secret::is_valid_name`]).
fn is_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Lowercase, without one final dot.
pub(crate) fn normalize_host(host: &str) -> String {
    let host = host.strip_suffix('.').unwrap_or(host);
    host.to_ascii_lowercase()
}

/// A DNS name (labels of letters, digits, `-` and `_`, not starting or
/// ending with `-`), optionally behind `*.`.
fn is_host_pattern(pattern: &str) -> bool {
    let name = pattern.strip_prefix("*.").unwrap_or(pattern);
    !name.is_empty() && name.len() <= MAX_HOST_LEN && name.split('.').all(is_label)
}

fn is_label(label: &str) -> bool {
    !label.is_empty()
        && label.len() <= MAX_LABEL_LEN
        && !label.starts_with('-')
        && !label.ends_with('-')
        && label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// Whether a normalized `host` matches a normalized `pattern`.
fn pattern_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(suffix) => host
            .strip_suffix(suffix)
            .and_then(|rest| rest.strip_suffix('.'))
            .is_some_and(|label| !label.is_empty()),
        None => pattern == host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_form_keeps_an_at_sign_in_the_value() -> Result<(), SecretError> {
        let secret: Secret = "TOKEN=p@ss=word@api.example.com,*.example.org".parse()?;
        assert_eq!(secret.name(), "TOKEN");
        assert_eq!(secret.value(), "p@ss=word");
        assert_eq!(secret.bound_hosts(), ["api.example.com", "*.example.org"]);
        Ok(())
    }

    #[test]
    fn malformed_command_line_secrets_name_the_expected_shape() {
        for bad in [
            "TOKEN=value",
            "TOKEN@api.example.com",
            "TOKEN=v@",
            "TOKEN=v@a.com,",
        ] {
            let err = bad.parse::<Secret>().err();
            assert!(matches!(err, Some(SecretError::Syntax)), "{bad}: {err:?}");
        }
        let message = SecretError::Syntax.to_string();
        assert!(message.contains("NAME=VALUE@host"), "{message}");
    }

    #[test]
    fn names_that_are_not_environment_variables_are_refused() {
        for bad in ["", "1TOKEN", "MY-TOKEN", "TO KEN", "TÖKEN", "A=B"] {
            assert!(
                matches!(Secret::new(bad, "v"), Err(SecretError::InvalidName { .. })),
                "{bad:?} was accepted"
            );
        }
        for good in ["TOKEN", "_x", "a1_B2"] {
            assert!(Secret::new(good, "v").is_ok(), "{good:?} was refused");
        }
    }

    #[test]
    fn empty_values_and_header_breaking_bytes_are_refused() {
        assert!(matches!(
            Secret::new("T", ""),
            Err(SecretError::EmptyValue { .. })
        ));
        for bad in ["a\rb", "a\nb", "a\0b"] {
            assert!(matches!(
                Secret::new("T", bad),
                Err(SecretError::ForbiddenByte { .. })
            ));
        }
    }

    #[test]
    fn errors_never_show_the_value() {
        let err = "T=hunter2\n@bad host".parse::<Secret>().err();
        let shown = format!(
            "{err:?} {}",
            err.as_ref().map(ToString::to_string).unwrap_or_default()
        );
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    #[test]
    fn debug_shows_the_name_and_hosts_but_not_the_value() -> Result<(), SecretError> {
        let secret = Secret::new("TOKEN", "hunter2")?.host("api.example.com");
        let shown = format!("{secret:?}");
        assert!(
            shown.contains("TOKEN") && shown.contains("api.example.com"),
            "{shown}"
        );
        assert!(shown.contains("<redacted>"), "{shown}");
        assert!(!shown.contains("hunter2"), "{shown}");
        Ok(())
    }

    #[test]
    fn a_wildcard_binds_subdomains_but_not_the_suffix_itself() -> Result<(), SecretError> {
        let secret = Secret::new("T", "v")?.host("*.example.com");
        assert!(secret.is_bound_to("api.example.com"));
        assert!(secret.is_bound_to("a.b.example.com"));
        assert!(!secret.is_bound_to("example.com"));
        assert!(!secret.is_bound_to("badexample.com"));
        assert!(!secret.is_bound_to("example.com.evil.net"));
        Ok(())
    }

    #[test]
    fn hosts_match_without_case_or_final_dot() -> Result<(), SecretError> {
        let secret = Secret::new("T", "v")?.hosts(["API.Example.com."]);
        assert!(secret.is_bound_to("api.example.com"));
        assert!(secret.is_bound_to("Api.Example.Com."));
        assert!(!secret.is_bound_to("other.example.com"));
        Ok(())
    }

    #[test]
    fn patterns_that_are_not_host_names_are_refused() -> Result<(), SecretError> {
        for bad in [
            "*",
            "*.",
            "a..b",
            "-a.com",
            "a b.com",
            "a.*.com",
            "http://a.com",
        ] {
            let secret = Secret::new("T", "v")?.host(bad);
            assert!(
                matches!(secret.check_hosts(), Err(SecretError::InvalidHost { .. })),
                "{bad:?} was accepted"
            );
        }
        let unbound = Secret::new("T", "v")?;
        assert!(matches!(
            unbound.check_hosts(),
            Err(SecretError::NoHosts { .. })
        ));
        Ok(())
    }
}
