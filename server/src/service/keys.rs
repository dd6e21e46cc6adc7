//! `airlock.api.v1.Keys`: API keys, the machine owner's to manage (on the
//! Unix socket only).

use tonic::{Request, Response, Status};

use airlock_api::reason::{self, invalid};
use airlock_api::v1::{self as api, keys_server, ErrorReason};

use super::Services;
use crate::keys::{KeyError, KeyInfo, Quota};
use crate::principal::Principal;

fn quota(quota: Quota) -> api::KeyQuota {
    api::KeyQuota {
        max_sandboxes: quota.max_sandboxes,
        max_memory_mib: quota.max_memory_mib,
        max_concurrent_calls: quota.max_concurrent_calls,
        max_workspaces: quota.max_workspaces,
        max_workspace_mib: quota.max_workspace_mib,
        max_snapshots: quota.max_snapshots,
        max_storage_mib: quota.max_storage_mib,
    }
}

impl Services {
    fn key_info(&self, key: &KeyInfo) -> api::KeyInfo {
        let held = self.state.registry.holding(Some(&key.name));
        let whose = Principal::Key(std::sync::Arc::clone(&key.name));
        let (workspaces, workspace_bytes) =
            self.state.workspaces.totals(&whose).unwrap_or_else(|status| {
                tracing::warn!(name = %key.name, error = status.message(), "cannot count a key's workspaces");
                (0, 0)
            });
        let (snapshots, snapshot_bytes) =
            self.state.snapshots.totals(&whose).unwrap_or_else(|status| {
                tracing::warn!(name = %key.name, error = status.message(), "cannot count a key's snapshots");
                (0, 0)
            });
        let (templates, template_bytes) = self.state.templates.owned(&whose);
        api::KeyInfo {
            name: key.name.to_string(),
            quota: Some(quota(key.quota)),
            created_at_ms: key.created_at_ms,
            sandboxes: held.sandboxes,
            workspaces,
            workspace_bytes,
            snapshots,
            templates,
            storage_bytes: snapshot_bytes + template_bytes,
        }
    }
}

fn key_status(error: &KeyError) -> Status {
    match error {
        KeyError::Exists(_) => reason::status(ErrorReason::AlreadyExists, error.to_string()),
        KeyError::NoSuchKey(_) => reason::status(ErrorReason::NotFound, error.to_string()),
        KeyError::BadName => invalid("name", error),
        other => reason::status(ErrorReason::Internal, airlock::error_chain(other)),
    }
}

#[tonic::async_trait]
impl keys_server::Keys for Services {
    async fn create_key(
        &self,
        request: Request<api::CreateKeyRequest>,
    ) -> Result<Response<api::CreateKeyResponse>, Status> {
        self.call(&request)?
            .principal
            .require_owner("managing API keys")?;
        let request = request.into_inner();
        let asked = request.quota.unwrap_or_default();
        let (key, secret) = self
            .state
            .keys
            .create(
                &request.name,
                Quota {
                    max_sandboxes: asked.max_sandboxes,
                    max_memory_mib: asked.max_memory_mib,
                    max_concurrent_calls: asked.max_concurrent_calls,
                    max_workspaces: asked.max_workspaces,
                    max_workspace_mib: asked.max_workspace_mib,
                    max_snapshots: asked.max_snapshots,
                    max_storage_mib: asked.max_storage_mib,
                },
            )
            .map_err(|error| key_status(&error))?;
        tracing::info!(name = %key.name, "API key created");
        Ok(Response::new(api::CreateKeyResponse {
            key: Some(self.key_info(&key)),
            secret,
        }))
    }

    async fn list_keys(
        &self,
        request: Request<api::ListKeysRequest>,
    ) -> Result<Response<api::ListKeysResponse>, Status> {
        self.call(&request)?
            .principal
            .require_owner("managing API keys")?;
        let keys = self
            .state
            .keys
            .list()
            .iter()
            .map(|key| self.key_info(key))
            .collect();
        Ok(Response::new(api::ListKeysResponse { keys }))
    }

    async fn remove_key(
        &self,
        request: Request<api::RemoveKeyRequest>,
    ) -> Result<Response<api::RemoveKeyResponse>, Status> {
        self.call(&request)?
            .principal
            .require_owner("managing API keys")?;
        let name = request.into_inner().name;
        self.state
            .keys
            .remove(&name)
            .map_err(|error| key_status(&error))?;
        tracing::info!(%name, "API key removed");
        Ok(Response::new(api::RemoveKeyResponse {
            sandbox_ids: self.state.registry.owned_by(&name),
        }))
    }
}
