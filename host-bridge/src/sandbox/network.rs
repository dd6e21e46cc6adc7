//! A sandbox's network on the host: turning the guest's side on, the
//! gateway that decides, and the carriers that bring it the guest's
//! connections (see [`airlock_gateway`]); and the network as an adoptable
//! sandbox's record keeps it (see [`crate::adopt`]).

use std::net::IpAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use airlock_proto::v1::network_client::NetworkClient;
use airlock_proto::v1::EnableNetworkRequest;
use airlock_proto::Feature;
use base64::Engine as _;
use rustls::pki_types::CertificateDer;
use tonic::transport::Channel;

use crate::adopt::{from_unix_ms, ms, Hidden, RecordedCa, RecordedNetwork, RecordedSecret};
use crate::error::{Error, Result};
use crate::features::AgentFeatures;
use crate::trust::GuestRoots;
use airlock_gateway::audit::{AuditRecord, Protocol, Verdict};
use airlock_gateway::host::{check_rules, HostAccess};
use airlock_gateway::policy::{NetRule, NetworkPolicy};
use airlock_gateway::secrets::{CaParts, SandboxCa, Secret, Secrets};
use airlock_gateway::{CarrierPool, Gateway, GatewayError, NetworkOptions, GATEWAY_ADDR};

use super::error::ConfigError;
use super::Sandbox;

/// The network half of a running sandbox.
#[derive(Debug)]
pub(super) struct SandboxNetwork {
    gateway: Arc<Gateway>,
    /// The environment every program gets (proxy, CA, placeholders).
    pub(super) env: Vec<(String, String)>,
    /// `None` once stopped (a detached sandbox's).
    carriers: Mutex<Option<CarrierPool>>,
}

impl SandboxNetwork {
    /// Makes the gateway, turns the guest's side on and opens carriers.
    /// The gateway checks the servers of secret-bound hosts against the
    /// public roots and `roots`, the ones the guest was given.
    /// With `audit_dir` (an adoptable sandbox's state directory) the audit
    /// log is kept there too.
    #[tracing::instrument(name = "enable_network", skip_all)]
    pub(super) async fn enable(
        channel: &Channel,
        features: AgentFeatures,
        options: &NetworkOptions,
        roots: Option<&GuestRoots>,
        audit_dir: Option<&Path>,
    ) -> Result<Self> {
        let options = options
            .clone()
            .audit_dir(audit_dir.map(Path::to_owned))
            .upstream_roots(
                roots
                    .map(|roots| roots.certs.iter().map(|c| c.der().clone()).collect())
                    .unwrap_or_default(),
            );
        let gateway = Gateway::new(options)?;
        Self::enable_with(channel, features, gateway).await
    }

    /// Turns the guest's side on again for an adopted sandbox, with the
    /// gateway its record describes: the same rules, secrets,
    /// placeholders and CA (so the guest's CA bundle is rewritten as it
    /// was). The audit log is read back from `audit_dir` (its state
    /// directory) and goes on there.
    pub(super) async fn restore(
        channel: &Channel,
        features: AgentFeatures,
        recorded: &RecordedNetwork,
        options: NetworkOptions,
        audit_dir: &Path,
    ) -> Result<Self> {
        let options = options.audit_dir(Some(audit_dir.to_owned()));
        let gateway = recorded_gateway(recorded, options)?;
        Self::enable_with(channel, features, gateway).await
    }

    async fn enable_with(
        channel: &Channel,
        features: AgentFeatures,
        gateway: Gateway,
    ) -> Result<Self> {
        features.require(Feature::Network)?;
        let gateway = Arc::new(gateway);
        let request = EnableNetworkRequest {
            nameserver: GATEWAY_ADDR.to_string(),
            extra_ca_pem: gateway.ca_pem().unwrap_or_default(),
        };
        let enabled = NetworkClient::new(channel.clone())
            .enable(request)
            .await
            .map_err(|status| Error::agent("Network.Enable", status))?
            .into_inner();
        let bundle = Some(enabled.ca_bundle_path.as_str()).filter(|p| !p.is_empty());
        let env = gateway.guest_env(bundle);
        let carriers = CarrierPool::start(channel.clone(), Arc::clone(&gateway));
        tracing::info!(rules = gateway.policy().rules().len(), "network on");
        Ok(Self {
            gateway,
            env,
            carriers: Mutex::new(Some(carriers)),
        })
    }

    /// Stops carrying the guest's connections (a detached sandbox's: its
    /// next owner carries them).
    pub(super) fn stop(&self) {
        let carriers = self
            .carriers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        drop(carriers);
    }

    /// The network as an adoption record keeps it.
    pub(super) fn record(&self) -> RecordedNetwork {
        let options = self.gateway.options();
        RecordedNetwork {
            rules: self
                .gateway
                .policy()
                .rules()
                .iter()
                .map(ToString::to_string)
                .collect(),
            secrets: self
                .gateway
                .secrets()
                .bindings()
                .map(|(secret, placeholder)| RecordedSecret {
                    name: secret.name().to_owned(),
                    value: Hidden(secret.value().to_owned()),
                    hosts: secret.bound_hosts().to_vec(),
                    placeholder: placeholder.to_owned(),
                })
                .collect(),
            ca: self.gateway.ca().map(|ca| {
                let parts = ca.parts();
                RecordedCa {
                    id: parts.id,
                    cert_pem: parts.cert_pem,
                    key_pem: Hidden(parts.key_pem),
                    not_after_unix_secs: crate::adopt::unix_ms(parts.not_after) / 1000,
                }
            }),
            upstream_roots: options
                .get_upstream_roots()
                .iter()
                .map(|root| base64::engine::general_purpose::STANDARD.encode(root.as_ref()))
                .collect(),
            max_connections: options.get_max_connections(),
            idle_timeout_ms: ms(options.get_idle_timeout()),
            head_timeout_ms: ms(options.get_head_timeout()),
            max_header_bytes: options.get_max_header_bytes(),
            host_access: options.get_host_access().is_allowed(),
        }
    }
}

/// Why a recorded network could not be made again.
fn unusable(
    what: impl Into<String>,
    source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> Error {
    ConfigError::recorded_network(what, source).into()
}

/// The options a recorded network describes, with `base`'s resolver (the
/// record keeps none); the secrets come separately, with their
/// placeholders.
pub(super) fn recorded_options(
    recorded: &RecordedNetwork,
    base: Option<&NetworkOptions>,
) -> Result<NetworkOptions> {
    let rules = recorded
        .rules
        .iter()
        .map(|rule| {
            rule.parse::<NetRule>()
                .map_err(|error| unusable(format!("rule {rule:?}"), error))
        })
        .collect::<Result<Vec<_>>>()?;
    let upstream_roots = recorded
        .upstream_roots
        .iter()
        .map(|root| {
            base64::engine::general_purpose::STANDARD
                .decode(root)
                .map(CertificateDer::from)
                .map_err(|error| unusable("an upstream root", error))
        })
        .collect::<Result<Vec<_>>>()?;
    let secrets = recorded_secrets(recorded)?
        .into_iter()
        .map(|(secret, _)| secret);
    let options = base
        .cloned()
        .unwrap_or_default()
        .policy(NetworkPolicy::from_rules(rules))
        .secrets(secrets)
        .upstream_roots(upstream_roots)
        .max_connections(recorded.max_connections)
        .idle_timeout(Duration::from_millis(recorded.idle_timeout_ms))
        .head_timeout(Duration::from_millis(recorded.head_timeout_ms))
        .max_header_bytes(recorded.max_header_bytes)
        .host_access(match recorded.host_access {
            true => HostAccess::Allowed,
            false => HostAccess::Denied,
        });
    Ok(options)
}

/// The recorded secrets, each with its placeholder.
fn recorded_secrets(recorded: &RecordedNetwork) -> Result<Vec<(Secret, String)>> {
    recorded
        .secrets
        .iter()
        .map(|kept| {
            Secret::new(kept.name.clone(), kept.value.0.clone())
                .map(|secret| (secret.hosts(&kept.hosts), kept.placeholder.clone()))
                .map_err(|error| unusable(format!("secret {}", kept.name), error))
        })
        .collect()
}

/// The gateway of a recorded network (options from [`recorded_options`]).
fn recorded_gateway(recorded: &RecordedNetwork, options: NetworkOptions) -> Result<Gateway> {
    let secrets = Secrets::with_placeholders(recorded_secrets(recorded)?)
        .map_err(|error| Error::Network(GatewayError::Secrets(error)))?;
    let ca = match &recorded.ca {
        Some(kept) => Some(
            SandboxCa::from_parts(&CaParts {
                id: kept.id.clone(),
                cert_pem: kept.cert_pem.clone(),
                key_pem: kept.key_pem.0.clone(),
                not_after: from_unix_ms(kept.not_after_unix_secs.saturating_mul(1000)),
            })
            .map_err(|error| Error::Network(GatewayError::Ca(error)))?,
        ),
        None => None,
    };
    Ok(Gateway::with_identity(options, secrets, ca)?)
}

impl Sandbox {
    fn network_on(&self) -> Result<&SandboxNetwork> {
        self.network
            .as_ref()
            .ok_or_else(|| Error::from(ConfigError::NoNetwork))
    }

    /// Every allowed and refused connection and DNS query so far (the
    /// newest 4096), oldest first. An adoptable sandbox's log is kept in
    /// its state directory too, so an adopted sandbox's goes on from its
    /// previous owner's (see [`airlock_gateway::audit`]).
    pub fn network_audit(&self) -> Result<Vec<AuditRecord>> {
        Ok(self.network_on()?.gateway.audit())
    }

    /// Records an ingress decision (a connection from outside to guest
    /// `port`, from `client`) in the audit log: the network's, beside the
    /// egress records, or, without a network, the sandbox's own, which
    /// [`audit`](Sandbox::audit) reads.
    pub fn record_ingress(&self, client: Option<IpAddr>, port: u16, verdict: Verdict) {
        let name = client.map(|addr| format!("from {addr}"));
        match &self.network {
            Some(network) => network
                .gateway
                .record(Protocol::Ingress, name, port, verdict),
            None => {
                self.ingress_audit
                    .record(Protocol::Ingress, name, None, port, verdict);
            }
        }
    }

    /// The bytes its connections carried each way since this handle was
    /// made (see [`Traffic`](crate::Traffic)).
    pub fn traffic(&self) -> crate::Traffic {
        let egress = self
            .network
            .as_ref()
            .map(|network| network.gateway.egress())
            .unwrap_or_default();
        let ingress = self.ingress_meter.counts();
        crate::Traffic {
            egress_sent: egress.from_guest,
            egress_received: egress.to_guest,
            ingress_received: ingress.to_guest,
            ingress_sent: ingress.from_guest,
        }
    }

    /// Every audit record after sequence number `after` (0: all), oldest
    /// first: the network's log (egress and ingress) when the sandbox has
    /// a network, else its ingress records alone.
    pub fn audit(&self, after: u64) -> Vec<AuditRecord> {
        match &self.network {
            Some(network) => network.gateway.audit_since(after),
            None => self.ingress_audit.since(after),
        }
    }

    /// Whether the guest may reach the host itself (see
    /// [`airlock_gateway::host`]); a sandbox without a network reaches
    /// nothing.
    pub fn host_access(&self) -> HostAccess {
        self.network.as_ref().map_or(HostAccess::Denied, |network| {
            network.gateway.options().get_host_access()
        })
    }

    /// The network policy in force.
    pub fn network_policy(&self) -> Result<NetworkPolicy> {
        Ok(self.network_on()?.gateway.policy())
    }

    /// Replaces the network policy; connections already open stay open,
    /// new ones and new DNS queries follow `policy`. An adoptable
    /// sandbox's record keeps the new policy.
    ///
    /// Refused with [`Error::HostRule`] when a rule's whole range is the
    /// host's own (loopback, link-local, an address of its interfaces) and
    /// the sandbox's [host access](Sandbox::host_access) is denied.
    pub fn set_network_policy(&self, policy: NetworkPolicy) -> Result<()> {
        let network = self.network_on()?;
        check_rules(policy.rules(), network.gateway.options().get_host_access())
            .map_err(|(index, error)| Error::HostRule { index, error })?;
        let rules: Vec<String> = policy.rules().iter().map(ToString::to_string).collect();
        network.gateway.set_policy(policy);
        if let Some(keeper) = self.vm.adoption() {
            keeper.update(|record| {
                if let Some(recorded) = &mut record.network {
                    recorded.rules = rules;
                }
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_network_makes_the_same_gateway_again() -> Result<()> {
        let options = NetworkOptions::new()
            .policy(NetworkPolicy::from_rules([
                "api.test:443"
                    .parse::<NetRule>()
                    .map_err(|e| unusable("the test network", e))?,
                "127.0.0.1"
                    .parse::<NetRule>()
                    .map_err(|e| unusable("the test network", e))?,
                "[::1]:8080"
                    .parse::<NetRule>()
                    .map_err(|e| unusable("the test network", e))?,
            ]))
            .secret(
                Secret::new("API_TOKEN", "real-value")
                    .map_err(|e| unusable("the test network", e))?
                    .host("api.test"),
            )
            .max_connections(12);
        let options = options.upstream_roots(vec![SandboxCa::generate()
            .map_err(|e| Error::Network(GatewayError::Ca(e)))?
            .cert_der()
            .clone()]);
        let first = Gateway::new(options)?;
        let network = SandboxNetwork {
            gateway: Arc::new(first),
            env: Vec::new(),
            carriers: Mutex::new(None),
        };
        let recorded = network.record();
        assert!(!format!("{recorded:?}").contains("real-value"));

        let again = recorded_gateway(&recorded, recorded_options(&recorded, None)?)?;
        let first = &network.gateway;
        assert_eq!(again.policy(), first.policy());
        assert_eq!(again.guest_env(Some("/b")), first.guest_env(Some("/b")));
        assert_eq!(again.ca_pem(), first.ca_pem());
        assert_eq!(again.options().get_max_connections(), 12);
        assert_eq!(
            again.options().get_upstream_roots(),
            first.options().get_upstream_roots()
        );
        let placeholder = first
            .secrets()
            .placeholders()
            .into_iter()
            .map(|(_, p)| p)
            .next()
            .unwrap_or_default();
        assert_eq!(
            again.secrets().replace_for_host("api.test", &placeholder),
            Ok("real-value".to_owned())
        );
        Ok(())
    }
}
