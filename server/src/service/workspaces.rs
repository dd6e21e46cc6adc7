//! `airlock.api.v1.Workspaces`: a principal's named workspaces, made,
//! listed and removed through the server's [`WorkspaceStore`](crate::workspaces::WorkspaceStore).

use std::sync::Arc;

use tonic::{Request, Response, Status};

use airlock_api::limits;
use airlock_api::reason::invalid;
use airlock_api::v1::{self as api, workspaces_server};

use super::Services;
use crate::principal::Principal;
use crate::validate;
use crate::workspaces::Found;

/// Whose workspaces a call means: the caller's own, or (the owner only)
/// those of the key `key` names, which need not exist any more (a removed
/// key's workspaces stay, the owner's to remove).
fn whose(principal: &Principal, key: &str) -> Result<Principal, Status> {
    if key.is_empty() {
        return Ok(principal.clone());
    }
    principal.require_owner("naming a key's workspaces")?;
    if !crate::keys::is_valid_name(key) {
        return Err(invalid("key", format!("{key:?} is not a key's name")));
    }
    Ok(Principal::Key(Arc::from(key)))
}

impl Services {
    fn workspace_info(&self, whose: &Principal, found: Found) -> api::WorkspaceInfo {
        let holder = self
            .state
            .registry
            .workspace_holder(whose.key(), &found.name);
        let path = self.state.workspaces.path(whose, &found.name);
        api::WorkspaceInfo {
            in_use: holder.is_some() || self.state.workspaces.is_claimed(&path),
            sandbox_id: holder.unwrap_or_default(),
            name: found.name,
            size_bytes: found.size_bytes,
            used_bytes: found.used_bytes,
            created_at_ms: found.created_at_ms,
            owner: whose.key().unwrap_or_default().to_owned(),
        }
    }
}

#[tonic::async_trait]
impl workspaces_server::Workspaces for Services {
    async fn create_workspace(
        &self,
        request: Request<api::CreateWorkspaceRequest>,
    ) -> Result<Response<api::WorkspaceInfo>, Status> {
        let call = self.admit(&request)?;
        let request = request.into_inner();
        validate::name("name", &request.name)?;
        let whose = whose(&call.principal, &request.key)?;
        let size_mib = match request.size_mib {
            0 => None,
            mib => Some(validate::within(
                "size_mib",
                mib,
                limits::MIN_WORKSPACE_MIB,
                limits::MAX_WORKSPACE_MIB,
            )?),
        };
        let state = &self.state;
        let found = state
            .workspaces
            .create(
                &whose,
                &request.name,
                size_mib,
                state.quota(&whose),
                state.builder(),
            )
            .await?;
        Ok(Response::new(self.workspace_info(&whose, found)))
    }

    async fn list_workspaces(
        &self,
        request: Request<api::ListWorkspacesRequest>,
    ) -> Result<Response<api::ListWorkspacesResponse>, Status> {
        let call = self.call(&request)?;
        let whose = whose(&call.principal, &request.get_ref().key)?;
        let workspaces = self
            .state
            .workspaces
            .list(&whose)?
            .into_iter()
            .map(|found| self.workspace_info(&whose, found))
            .collect();
        Ok(Response::new(api::ListWorkspacesResponse { workspaces }))
    }

    async fn remove_workspace(
        &self,
        request: Request<api::RemoveWorkspaceRequest>,
    ) -> Result<Response<api::RemoveWorkspaceResponse>, Status> {
        let call = self.admit(&request)?;
        let request = request.into_inner();
        validate::name("name", &request.name)?;
        let whose = whose(&call.principal, &request.key)?;
        let registry = &self.state.registry;
        let freed_bytes = self
            .state
            .workspaces
            .remove(&whose, &request.name, || {
                registry.workspace_holder(whose.key(), &request.name)
            })
            .await?;
        Ok(Response::new(api::RemoveWorkspaceResponse { freed_bytes }))
    }
}
