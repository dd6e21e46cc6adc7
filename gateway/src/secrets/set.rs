//! A sandbox's secrets and the placeholders that stand for them.
//!
//! When a [`Secrets`] set is built each secret gets a placeholder,
//! `airlock-placeholder-<name lowercased>-<32 random hex digits>`, which
//! is what the guest's environment holds instead of the value. The
//! characters are all URL-unreserved, so a placeholder survives
//! percent-encoding and header folding unchanged and is found verbatim.
//! On the way out, [`Secrets::replace_for_host`] turns the placeholders of
//! secrets bound to the destination into their values, and refuses text
//! that carries a placeholder of any other secret: that is a [`Leak`].

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Arc;

use super::secret::{Secret, SecretError};
use airlock_random::RandomError;

/// What every placeholder starts with.
const PLACEHOLDER_PREFIX: &str = "airlock-placeholder-";

/// Why a set of secrets was refused.
#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    /// One secret is not valid on its own.
    #[error(transparent)]
    Secret(#[from] SecretError),
    /// Two secrets share a name, so the guest could see only one.
    #[error("two secrets are named {name}")]
    DuplicateName {
        /// The shared name.
        name: String,
    },
    /// No random placeholder could be made.
    #[error("cannot make placeholders")]
    Random(#[from] RandomError),
    /// A placeholder kept for an adopted sandbox is not one this library
    /// makes.
    #[error("the placeholder kept for secret {name} is malformed")]
    Placeholder {
        /// The secret's name.
        name: String,
    },
}

/// A placeholder of a secret found in text bound for a host the secret is
/// not bound to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("placeholder of secret {secret} sent to a host it is not bound to")]
pub struct Leak {
    /// The secret's name (never its value).
    pub secret: String,
}

#[derive(Debug)]
struct Entry {
    secret: Secret,
    placeholder: String,
}

/// A sandbox's secrets with their placeholders. Cloning is cheap: clones
/// share one set.
#[derive(Debug, Clone, Default)]
pub struct Secrets {
    entries: Arc<[Entry]>,
}

const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Secrets>();
};

impl Secrets {
    /// The set of `secrets`, each with a fresh placeholder. Refuses a
    /// secret bound to no host or to a pattern that is not a host name,
    /// and two secrets of one name.
    pub fn new(secrets: Vec<Secret>) -> Result<Self, SecretsError> {
        let mut names = HashSet::new();
        let mut entries = Vec::with_capacity(secrets.len());
        for secret in secrets {
            secret.check_hosts()?;
            if !names.insert(secret.name().to_owned()) {
                return Err(SecretsError::DuplicateName {
                    name: secret.name().to_owned(),
                });
            }
            let placeholder = format!(
                "{PLACEHOLDER_PREFIX}{}-{}",
                secret.name().to_ascii_lowercase(),
                airlock_random::hex::<16>().map_err(RandomError)?
            );
            entries.push(Entry {
                secret,
                placeholder,
            });
        }
        Ok(Self {
            entries: entries.into(),
        })
    }

    /// The set of `secrets` with the placeholders their guest already
    /// holds (an adopted sandbox's, see the library's `adopt`), checked as
    /// [`Secrets::new`] checks, and each placeholder for its form.
    pub fn with_placeholders(bound: Vec<(Secret, String)>) -> Result<Self, SecretsError> {
        let mut names = HashSet::new();
        let mut entries = Vec::with_capacity(bound.len());
        for (secret, placeholder) in bound {
            secret.check_hosts()?;
            if !names.insert(secret.name().to_owned()) {
                return Err(SecretsError::DuplicateName {
                    name: secret.name().to_owned(),
                });
            }
            let expected = format!(
                "{PLACEHOLDER_PREFIX}{}-",
                secret.name().to_ascii_lowercase()
            );
            let well_formed = placeholder
                .strip_prefix(&expected)
                .is_some_and(|hex| hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()));
            if !well_formed {
                return Err(SecretsError::Placeholder {
                    name: secret.name().to_owned(),
                });
            }
            entries.push(Entry {
                secret,
                placeholder,
            });
        }
        Ok(Self {
            entries: entries.into(),
        })
    }

    /// Each secret with its placeholder: what an adoptable sandbox's
    /// record keeps.
    pub fn bindings(&self) -> impl Iterator<Item = (&Secret, &str)> {
        self.entries
            .iter()
            .map(|entry| (&entry.secret, entry.placeholder.as_str()))
    }

    /// Whether the set holds no secret.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// What the guest's environment gets: each secret's name with its
    /// placeholder.
    pub fn placeholders(&self) -> Vec<(String, String)> {
        self.entries
            .iter()
            .map(|e| (e.secret.name().to_owned(), e.placeholder.clone()))
            .collect()
    }

    /// Whether some secret is bound to `host`, that is whether connections
    /// to it need the proxy that puts values into requests.
    pub(crate) fn bound_hosts_match(&self, host: &str) -> bool {
        self.entries.iter().any(|e| e.secret.is_bound_to(host))
    }

    /// The name of a secret whose placeholder appears in `haystack`.
    pub(crate) fn find_placeholder(&self, haystack: &[u8]) -> Option<&str> {
        self.occurrences(haystack)
            .next()
            .map(|(_, entry)| entry.secret.name())
    }

    /// `text` with the placeholder of every secret bound to `host`
    /// replaced by its value; a [`Leak`] if `text` holds the placeholder of
    /// a secret not bound to `host`.
    pub fn replace_for_host(&self, host: &str, text: &str) -> Result<String, Leak> {
        match self.replace_bytes_for_host(host, text.as_bytes())? {
            Cow::Borrowed(_) => Ok(text.to_owned()),
            // Placeholders are ASCII and values are strings, so the bytes
            // stay UTF-8; the lossy path is never taken.
            Cow::Owned(bytes) => Ok(String::from_utf8(bytes)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())),
        }
    }

    /// [`Secrets::replace_for_host`] on bytes (header values need not be
    /// UTF-8), borrowing `text` back when it holds no placeholder.
    pub(crate) fn replace_bytes_for_host<'t>(
        &self,
        host: &str,
        text: &'t [u8],
    ) -> Result<Cow<'t, [u8]>, Leak> {
        let found: Vec<(usize, &Entry)> = self.occurrences(text).collect();
        if found.is_empty() {
            return Ok(Cow::Borrowed(text));
        }
        if let Some((_, stray)) = found.iter().find(|(_, e)| !e.secret.is_bound_to(host)) {
            return Err(Leak {
                secret: stray.secret.name().to_owned(),
            });
        }
        let mut out = Vec::with_capacity(text.len());
        let mut copied = 0;
        for (at, entry) in found {
            out.extend_from_slice(&text[copied..at]);
            out.extend_from_slice(entry.secret.value().as_bytes());
            copied = at + entry.placeholder.len();
        }
        out.extend_from_slice(&text[copied..]);
        Ok(Cow::Owned(out))
    }

    /// Each placeholder in `haystack`, left to right, with where it starts.
    fn occurrences<'s: 'h, 'h>(
        &'s self,
        haystack: &'h [u8],
    ) -> impl Iterator<Item = (usize, &'s Entry)> + 'h {
        let prefix = PLACEHOLDER_PREFIX.as_bytes();
        let mut at = 0;
        std::iter::from_fn(move || {
            if self.entries.is_empty() {
                return None;
            }
            while let Some(offset) = find(&haystack[at..], prefix) {
                let start = at + offset;
                let rest = &haystack[start..];
                match self
                    .entries
                    .iter()
                    .find(|e| rest.starts_with(e.placeholder.as_bytes()))
                {
                    Some(entry) => {
                        at = start + entry.placeholder.len();
                        return Some((start, entry));
                    }
                    None => at = start + 1,
                }
            }
            at = haystack.len();
            None
        })
    }
}

/// Where `needle` first occurs in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_secrets() -> Result<Secrets, SecretsError> {
        Secrets::new(vec![
            Secret::new("API_TOKEN", "real-api-value")?.host("api.test"),
            Secret::new("OTHER", "real-other-value")?.host("*.other.test"),
        ])
    }

    fn placeholder(secrets: &Secrets, name: &str) -> String {
        secrets
            .placeholders()
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, p)| p)
            .unwrap_or_default()
    }

    #[test]
    fn the_guest_gets_one_placeholder_per_secret_named_for_it() -> Result<(), SecretsError> {
        let secrets = two_secrets()?;
        let env = secrets.placeholders();
        assert_eq!(env.len(), 2);
        let (name, value) = &env[0];
        assert_eq!(name, "API_TOKEN");
        let hex = value
            .strip_prefix("airlock-placeholder-api_token-")
            .unwrap_or_default();
        assert_eq!(hex.len(), 32, "{value}");
        assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()));
        assert!(!value.contains("real-api-value"));
        Ok(())
    }

    #[test]
    fn each_set_gets_fresh_placeholders() -> Result<(), SecretsError> {
        let a = two_secrets()?;
        let b = two_secrets()?;
        assert_ne!(placeholder(&a, "API_TOKEN"), placeholder(&b, "API_TOKEN"));
        Ok(())
    }

    #[test]
    fn a_bound_placeholder_becomes_the_value() -> Result<(), SecretsError> {
        let secrets = two_secrets()?;
        let p = placeholder(&secrets, "API_TOKEN");
        let text = format!("Bearer {p}, again {p}.");
        let replaced = secrets.replace_for_host("api.test", &text);
        assert_eq!(
            replaced,
            Ok("Bearer real-api-value, again real-api-value.".to_owned())
        );
        let q = placeholder(&secrets, "OTHER");
        assert_eq!(
            secrets.replace_for_host("x.other.test", &format!("k={q}")),
            Ok("k=real-other-value".to_owned())
        );
        Ok(())
    }

    #[test]
    fn a_placeholder_sent_to_another_host_is_a_leak() -> Result<(), SecretsError> {
        let secrets = two_secrets()?;
        let p = placeholder(&secrets, "API_TOKEN");
        let q = placeholder(&secrets, "OTHER");
        assert_eq!(
            secrets.replace_for_host("x.other.test", &format!("{q} {p}")),
            Err(Leak {
                secret: "API_TOKEN".to_owned()
            })
        );
        assert_eq!(
            secrets.replace_for_host("evil.test", &p),
            Err(Leak {
                secret: "API_TOKEN".to_owned()
            })
        );
        Ok(())
    }

    #[test]
    fn text_without_placeholders_passes_unchanged() -> Result<(), SecretsError> {
        let secrets = two_secrets()?;
        let text = "airlock-placeholder-api_token-not-really /path?q=1";
        assert_eq!(
            secrets.replace_for_host("evil.test", text),
            Ok(text.to_owned())
        );
        assert_eq!(secrets.find_placeholder(text.as_bytes()), None);
        Ok(())
    }

    #[test]
    fn a_placeholder_is_found_in_raw_bytes() -> Result<(), SecretsError> {
        let secrets = two_secrets()?;
        let q = placeholder(&secrets, "OTHER");
        let mut bytes = b"\x16\x03\x01 garbage airlock-placeholder-".to_vec();
        bytes.extend_from_slice(q.as_bytes());
        assert_eq!(secrets.find_placeholder(&bytes), Some("OTHER"));
        Ok(())
    }

    #[test]
    fn hosts_with_a_bound_secret_are_recognized() -> Result<(), SecretsError> {
        let secrets = two_secrets()?;
        assert!(secrets.bound_hosts_match("API.test"));
        assert!(secrets.bound_hosts_match("a.other.test"));
        assert!(!secrets.bound_hosts_match("other.test"));
        assert!(!Secrets::default().bound_hosts_match("api.test"));
        assert!(Secrets::default().is_empty());
        Ok(())
    }

    #[test]
    fn two_secrets_of_one_name_are_refused() -> Result<(), SecretError> {
        let result = Secrets::new(vec![
            Secret::new("T", "a")?.host("a.test"),
            Secret::new("T", "b")?.host("b.test"),
        ]);
        assert!(matches!(result, Err(SecretsError::DuplicateName { .. })));
        Ok(())
    }

    #[test]
    fn a_secret_bound_to_no_host_is_refused() -> Result<(), SecretError> {
        let result = Secrets::new(vec![Secret::new("T", "a")?]);
        assert!(matches!(
            result,
            Err(SecretsError::Secret(SecretError::NoHosts { .. }))
        ));
        Ok(())
    }

    #[test]
    fn a_set_made_again_keeps_its_placeholders() -> Result<(), SecretsError> {
        let first = two_secrets()?;
        let bound: Vec<(Secret, String)> = first
            .bindings()
            .map(|(secret, placeholder)| (secret.clone(), placeholder.to_owned()))
            .collect();
        let again = Secrets::with_placeholders(bound.clone())?;
        assert_eq!(again.placeholders(), first.placeholders());
        let p = placeholder(&again, "API_TOKEN");
        assert_eq!(
            again.replace_for_host("api.test", &p),
            Ok("real-api-value".to_owned())
        );

        let mut forged = bound;
        forged[0].1 = "airlock-placeholder-api_token-xyz".to_owned();
        assert!(matches!(
            Secrets::with_placeholders(forged),
            Err(SecretsError::Placeholder { .. })
        ));
        Ok(())
    }

    #[test]
    fn debug_of_the_set_never_shows_a_value() -> Result<(), SecretsError> {
        let shown = format!("{:?}", two_secrets()?);
        assert!(shown.contains("API_TOKEN"), "{shown}");
        assert!(!shown.contains("real-api-value"), "{shown}");
        assert!(!shown.contains("real-other-value"), "{shown}");
        Ok(())
    }
}
