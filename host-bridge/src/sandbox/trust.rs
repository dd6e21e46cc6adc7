//! Installing a start's CA certificates in the guest (`System.TrustRoots`),
//! after the agent answered and before anything runs: so a clone of a
//! template, restored from a snapshot taken before this start's options
//! were known, trusts them as a cold boot does.

use std::time::Duration;

use airlock_proto::v1::system_client::SystemClient;
use airlock_proto::v1::TrustRootsRequest;
use airlock_proto::Feature;
use tonic::transport::Channel;

use crate::error::{Error, Result};
use crate::features::AgentFeatures;
use crate::transport::CapMessages;
use crate::trust::GuestRoots;

/// How long installing the roots may take (a few hundred small files and
/// two mounts, under emulation).
const TRUST_TIMEOUT: Duration = Duration::from_secs(15);

/// Installs `roots` in the guest behind `channel`.
#[tracing::instrument(name = "install_ca", skip_all)]
pub(super) async fn install(
    channel: &Channel,
    features: AgentFeatures,
    roots: &GuestRoots,
) -> Result<()> {
    features.require(Feature::TrustRoots)?;
    let request = TrustRootsRequest {
        certificates: roots
            .certs
            .iter()
            .map(|cert| cert.der().to_vec().into())
            .collect(),
        replace_image_roots: roots.replace,
    };
    let began = std::time::Instant::now();
    let mut client = SystemClient::new(channel.clone()).capped();
    let answer = tokio::time::timeout(TRUST_TIMEOUT, client.trust_roots(request))
        .await
        .map_err(|_| {
            Error::Protocol(format!(
                "System.TrustRoots did not answer within {TRUST_TIMEOUT:?}"
            ))
        })?
        .map_err(|status| Error::agent("System.TrustRoots", status))?
        .into_inner();
    tracing::info!(
        roots = roots.certs.len(),
        hashed = answer.hashed,
        replace = roots.replace,
        bundle = answer.bundle_path,
        took = ?began.elapsed(),
        "guest trusts the given roots"
    );
    Ok(())
}
