//! A sandbox of the services (`airlock.api.v1.SandboxInfo`) as E2B's JSON
//! has it, and the envd access token that goes with it.

use airlock_api::v1 as api;

use super::time::rfc3339;
use super::wire::{ListedSandbox, Sandbox, SandboxDetail};
use super::{Ctl, CLIENT_ID, ENVD_VERSION};
use crate::e2b::reply::Failure;

/// What `templateID` reads for a sandbox on the server's default image.
pub const BASE_TEMPLATE: &str = "base";

/// `endAt` of a sandbox that never ends (only the owner makes them).
const NEVER_MS: u64 = 253_402_300_799_000;

/// E2B's state name of `state`: `running` or `paused` (a sandbox saved to
/// disk is paused for E2B); `None` for one that ended, gone for E2B.
pub fn state_name(state: i32) -> Option<&'static str> {
    match api::SandboxState::try_from(state).ok()? {
        api::SandboxState::Running => Some("running"),
        api::SandboxState::Paused | api::SandboxState::OnDisk => Some("paused"),
        api::SandboxState::Ended | api::SandboxState::Unspecified => None,
    }
}

/// The template, snapshot or image E2B names the sandbox's by (a
/// snapshot's `snapshotID` is its name).
pub fn template_id(info: &api::SandboxInfo) -> String {
    if !info.snapshot.is_empty() {
        info.snapshot.clone()
    } else if !info.template.is_empty() {
        info.template.clone()
    } else if info.image.is_empty() || info.image == "default" {
        BASE_TEMPLATE.to_owned()
    } else {
        info.image.clone()
    }
}

impl Ctl<'_> {
    /// The envd access token of the caller's sandbox `id`: its traffic
    /// token. No service answers it for any port (`Ingress.GetHost` needs
    /// the ingress listener), so it is read from the registry, with the
    /// same tenancy check the services make.
    pub fn access_token(&self, id: &str) -> Result<String, Failure> {
        self.front
            .state()
            .registry
            .get(&self.principal, id)
            .map(|entry| entry.record.ingress_token.clone())
            .map_err(|status| super::fail::from_status(&status))
    }

    /// `info` as a created, connected or forked sandbox.
    pub fn sandbox(&self, info: &api::SandboxInfo) -> Result<Sandbox, Failure> {
        let token = self.access_token(&info.sandbox_id)?;
        Ok(Sandbox {
            sandbox_id: info.sandbox_id.clone(),
            template_id: template_id(info),
            client_id: CLIENT_ID,
            envd_version: ENVD_VERSION,
            traffic_access_token: token.clone(),
            envd_access_token: token,
            domain: self.front.domain.clone(),
        })
    }

    /// `info` as `GET /sandboxes/{id}` answers it.
    pub fn detail(&self, info: &api::SandboxInfo) -> Result<SandboxDetail, Failure> {
        Ok(SandboxDetail {
            listed: listed(info),
            envd_access_token: self.access_token(&info.sandbox_id)?,
            domain: self.front.domain.clone(),
            allow_internet_access: info.network,
        })
    }
}

/// `info` as one sandbox of a list.
pub fn listed(info: &api::SandboxInfo) -> ListedSandbox {
    ListedSandbox {
        sandbox_id: info.sandbox_id.clone(),
        template_id: template_id(info),
        client_id: CLIENT_ID,
        started_at: rfc3339(info.created_at_ms),
        end_at: rfc3339(match info.ends_at_ms {
            0 => NEVER_MS,
            at => at,
        }),
        cpu_count: info.vcpus,
        memory_mb: info.memory_mib,
        disk_size_mb: 0,
        metadata: info.metadata.clone().into_iter().collect(),
        state: state_name(info.state).unwrap_or("paused"),
        envd_version: ENVD_VERSION,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_and_templates_read_as_e2b_has_them() {
        assert_eq!(
            state_name(api::SandboxState::Running.into()),
            Some("running")
        );
        assert_eq!(state_name(api::SandboxState::OnDisk.into()), Some("paused"));
        assert_eq!(state_name(api::SandboxState::Ended.into()), None);
        let mut info = api::SandboxInfo::default();
        assert_eq!(template_id(&info), "base");
        info.image = "python".into();
        assert_eq!(template_id(&info), "python");
        info.template = "e2b".into();
        assert_eq!(template_id(&info), "e2b");
        info.snapshot = "prepared".into();
        assert_eq!(template_id(&info), "prepared");
        let listed = listed(&info);
        assert!(listed.end_at.starts_with("9999-12-31"));
    }
}
