//! A sandbox's network on the host: turning the guest's side on, the
//! gateway that decides, and the carriers that bring it the guest's
//! connections (see [`crate::network`]).

use std::sync::Arc;

use airlock_proto::v1::network_client::NetworkClient;
use airlock_proto::v1::EnableNetworkRequest;
use airlock_proto::Feature;
use tonic::transport::Channel;

use crate::error::{Error, Result};
use crate::features::AgentFeatures;
use crate::network::audit::AuditRecord;
use crate::network::fake_ip::GATEWAY_ADDR;
use crate::network::policy::NetworkPolicy;
use crate::network::{CarrierPool, Gateway, NetworkOptions};
use crate::trust::GuestRoots;

use super::Sandbox;

/// The network half of a running sandbox.
#[derive(Debug)]
pub(super) struct SandboxNetwork {
    gateway: Arc<Gateway>,
    /// The environment every program gets (proxy, CA, placeholders).
    pub(super) env: Vec<(String, String)>,
    _carriers: CarrierPool,
}

impl SandboxNetwork {
    /// Makes the gateway, turns the guest's side on and opens carriers.
    /// The gateway checks the servers of secret-bound hosts against the
    /// public roots and `roots`, the ones the guest was given.
    pub(super) async fn enable(
        channel: &Channel,
        features: AgentFeatures,
        options: &NetworkOptions,
        roots: Option<&GuestRoots>,
    ) -> Result<Self> {
        features.require(Feature::Network)?;
        let mut options = options.clone();
        options.upstream_roots = roots
            .map(|roots| roots.certs.iter().map(|c| c.der().clone()).collect())
            .unwrap_or_default();
        let gateway = Arc::new(Gateway::new(options)?);
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
            _carriers: carriers,
        })
    }
}

impl Sandbox {
    fn network_on(&self) -> Result<&SandboxNetwork> {
        self.network.as_ref().ok_or_else(|| {
            Error::Config(
                "this sandbox has no network; start it with SandboxBuilder::network or allow_net"
                    .to_owned(),
            )
        })
    }

    /// Every allowed and refused connection and DNS query so far (the
    /// newest 4096), oldest first.
    pub fn network_audit(&self) -> Result<Vec<AuditRecord>> {
        Ok(self.network_on()?.gateway.audit())
    }

    /// The network policy in force.
    pub fn network_policy(&self) -> Result<NetworkPolicy> {
        Ok(self.network_on()?.gateway.policy())
    }

    /// Replaces the network policy; connections already open stay open,
    /// new ones and new DNS queries follow `policy`.
    pub fn set_network_policy(&self, policy: NetworkPolicy) -> Result<()> {
        self.network_on()?.gateway.set_policy(policy);
        Ok(())
    }
}
