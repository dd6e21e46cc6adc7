//! The network section of a create: `allow_net` (the rules a guest's
//! connections must match) and `secrets` (credentials the host puts into
//! requests to their hosts); either gives the sandbox a network. And the
//! host access of a create's principal, which its rules must respect.

use tonic::Status;

use airlock::network::secrets::Secrets;
use airlock::{HostAccess, NetRule, NetworkOptions, NetworkPolicy, Secret};
use airlock_api::limits;
use airlock_api::reason::invalid;
use airlock_api::v1 as api;

use super::Create;
use crate::validate;

/// Name and hosts of each secret (what may be shown and compared; the
/// values stay out).
pub type SecretNames = Vec<(String, Vec<String>)>;

/// A create's network, checked.
#[derive(Debug, Clone)]
pub struct Network {
    pub rules: Vec<NetRule>,
    pub secrets: Vec<Secret>,
    pub secret_names: SecretNames,
}

impl Network {
    /// The library's network options: `None` without rules and secrets
    /// (no network at all).
    pub fn options(&self) -> Option<NetworkOptions> {
        (!self.rules.is_empty() || !self.secrets.is_empty()).then(|| {
            let policy = NetworkPolicy::from_rules(self.rules.iter().cloned());
            self.secrets
                .iter()
                .cloned()
                .fold(NetworkOptions::new().policy(policy), NetworkOptions::secret)
        })
    }
}

/// `allow_net` and `secrets` checked: bounded in number and size, each
/// rule parsed, each secret valid and the set without clashes.
pub fn network(allow_net: &[String], secrets: &[api::Secret]) -> Result<Network, Status> {
    let rules = rules(allow_net)?;
    let (secrets, secret_names) = bound_secrets(secrets)?;
    Ok(Network {
        rules,
        secrets,
        secret_names,
    })
}

fn rules(allow_net: &[String]) -> Result<Vec<NetRule>, Status> {
    validate::count("allow_net", allow_net, limits::MAX_RULES)?;
    allow_net
        .iter()
        .map(|text| {
            if text.len() > limits::MAX_RULE_BYTES {
                return Err(invalid(
                    "allow_net",
                    format!("a rule longer than {} bytes", limits::MAX_RULE_BYTES),
                ));
            }
            text.parse::<NetRule>()
                .map_err(|error| invalid("allow_net", error))
        })
        .collect()
}

fn bound_secrets(asked: &[api::Secret]) -> Result<(Vec<Secret>, SecretNames), Status> {
    validate::count("secrets", asked, limits::MAX_SECRETS)?;
    let mut secrets = Vec::with_capacity(asked.len());
    for secret in asked {
        if secret.value.len() > limits::MAX_SECRET_VALUE_BYTES {
            return Err(invalid(
                "secrets",
                format!(
                    "{}: a value longer than {} bytes",
                    secret.name,
                    limits::MAX_SECRET_VALUE_BYTES
                ),
            ));
        }
        if secret.hosts.is_empty() || secret.hosts.len() > limits::MAX_SECRET_HOSTS {
            return Err(invalid(
                "secrets",
                format!("{}: 1 to {} hosts", secret.name, limits::MAX_SECRET_HOSTS),
            ));
        }
        // The library's words never contain the value.
        let made = Secret::new(secret.name.clone(), secret.value.clone())
            .map_err(|error| invalid("secrets", error))?
            .hosts(&secret.hosts);
        secrets.push(made);
    }
    Secrets::new(secrets.clone())
        .map_err(|error| invalid("secrets", airlock::error_chain(&error)))?;
    let names = asked
        .iter()
        .map(|s| (s.name.clone(), s.hosts.clone()))
        .collect();
    Ok((secrets, names))
}

/// Refuses a rule of `rules` whose whole range is the host's own
/// (loopback, link-local, an address of the host's interfaces) when
/// `access` is denied: INVALID_ARGUMENT naming `field[INDEX]` and why.
pub fn host_rules(field: &str, rules: &[NetRule], access: HostAccess) -> Result<(), Status> {
    airlock::network::host::check_rules(rules, access)
        .map_err(|(index, error)| invalid(&format!("{field}[{index}]"), error))
}

/// Gives `create`'s network the host access of its principal (`access`:
/// a key's is always denied), refusing its rules that reach only the host
/// when that is denied.
pub fn apply_host_access(create: &mut Create, access: HostAccess) -> Result<(), Status> {
    host_rules("allow_net", &create.machine.rules, access)?;
    create.network = create
        .network
        .take()
        .map(|network| network.host_access(access));
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use airlock_api::reason::field_of;

    fn secret(name: &str, value: &str, hosts: &[&str]) -> api::Secret {
        api::Secret {
            name: name.to_owned(),
            value: value.to_owned(),
            hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
        }
    }

    #[test]
    fn nothing_asked_is_no_network() {
        let checked = network(&[], &[]).unwrap();
        assert!(checked.options().is_none());
        assert!(checked.secret_names.is_empty());
    }

    #[test]
    fn rules_are_parsed_and_bounded() {
        let checked = network(&["example.com".to_owned()], &[]).unwrap();
        assert_eq!(checked.rules.len(), 1);
        assert!(checked.options().is_some());
        let refused = network(&["not a rule!".to_owned()], &[]).unwrap_err();
        assert_eq!(field_of(&refused), Some("allow_net"));
        let long = "a".repeat(limits::MAX_RULE_BYTES + 1);
        let refused = network(&[long], &[]).unwrap_err();
        assert!(
            refused.message().contains("a rule longer than"),
            "{refused:?}"
        );
        let many = vec!["example.com".to_owned(); limits::MAX_RULES + 1];
        assert_eq!(
            field_of(&network(&many, &[]).unwrap_err()),
            Some("allow_net")
        );
    }

    #[test]
    fn secrets_need_hosts_and_bounded_values_and_keep_their_names() {
        let checked = network(&[], &[secret("TOKEN", "v", &["api.example"])]).unwrap();
        assert_eq!(
            checked.secret_names,
            [("TOKEN".to_owned(), vec!["api.example".to_owned()])]
        );
        assert!(checked.options().is_some());
        let refused = network(&[], &[secret("TOKEN", "v", &[])]).unwrap_err();
        assert_eq!(field_of(&refused), Some("secrets"));
        assert!(
            refused.message().contains("TOKEN: 1 to 16 hosts"),
            "{refused:?}"
        );
        let long = "v".repeat(limits::MAX_SECRET_VALUE_BYTES + 1);
        let refused = network(&[], &[secret("TOKEN", &long, &["a.example"])]).unwrap_err();
        assert!(!refused.message().contains(&long));
        let twice = [
            secret("TOKEN", "a", &["a.example"]),
            secret("TOKEN", "b", &["b.example"]),
        ];
        assert_eq!(
            field_of(&network(&[], &twice).unwrap_err()),
            Some("secrets")
        );
    }

    #[test]
    fn a_rule_reaching_only_the_host_is_refused_without_host_access() {
        let rules: Vec<NetRule> = vec![
            "example.com".parse().unwrap(),
            "127.0.0.1:5432".parse().unwrap(),
        ];
        let refused = host_rules("allow_net", &rules, HostAccess::Denied).unwrap_err();
        assert_eq!(field_of(&refused), Some("allow_net[1]"));
        assert!(host_rules("allow_net", &rules, HostAccess::Allowed).is_ok());
    }
}
