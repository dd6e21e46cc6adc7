//! The snapshot calls of `airlock.api.v1.Sandboxes` (`Snapshot`,
//! `ListSnapshots`, `GetSnapshot`, `DeleteSnapshot`): each request checked,
//! then handed to the server's [`SnapshotNames`](crate::snapshots::SnapshotNames)
//! under the caller's principal. `sandboxes.rs` routes the RPCs here.

use tonic::{Request, Response, Status};

use airlock_api::reason;
use airlock_api::v1::{self as api, ErrorReason};

use super::Services;
use crate::events::{Details, Draft, EventKind};
use crate::principal::Principal;
use crate::snapshots::{Named, Source};
use crate::validate;

impl Services {
    /// `Sandboxes.Snapshot`.
    pub(super) async fn take_snapshot(
        &self,
        request: Request<api::SnapshotSandboxRequest>,
    ) -> Result<Response<api::SnapshotInfo>, Status> {
        let call = self.admit(&request)?;
        let request = request.into_inner();
        validate::sandbox_id("sandbox_id", &request.sandbox_id)?;
        let name = match request.name.as_str() {
            "" => generated_name()?,
            name => {
                validate::name("name", name)?;
                name.to_owned()
            }
        };
        let _held = self.state.events.hold(&request.sandbox_id);
        let (entry, sandbox) = call.any_sandbox(&request.sandbox_id).await?;
        let state = &self.state;
        let quota = state.quota(&call.principal);
        let source = Source {
            sandbox_id: entry.record.id.clone(),
            image: entry.record.image.clone(),
            template: entry.record.template.clone(),
            snapshot: entry.record.snapshot.clone(),
        };
        let named = state
            .snapshots
            .take(
                &call.principal,
                &name,
                &sandbox,
                source,
                quota.as_ref(),
                state.stored_template_bytes(&call.principal),
            )
            .await?;
        state.events.emit(
            Draft::new(
                EventKind::Snapshotted,
                &entry.record.id,
                entry.record.owner.as_deref(),
            )
            .because(format!("snapshot taken by {}", call.principal))
            .with(Details {
                snapshot: named.name.clone(),
                ..Details::default()
            }),
        );
        let (_, snapshot) = state.snapshots.get(&call.principal, &named.name)?;
        Ok(Response::new(self.snapshot_info(
            &call.principal,
            &named,
            snapshot.disk_bytes(),
        )))
    }

    /// `Sandboxes.ListSnapshots`.
    pub(super) async fn list_snapshots_of(
        &self,
        request: Request<api::ListSnapshotsRequest>,
    ) -> Result<Response<api::ListSnapshotsResponse>, Status> {
        let call = self.call(&request)?;
        let request = request.into_inner();
        if !request.sandbox_id.is_empty() {
            validate::sandbox_id("sandbox_id", &request.sandbox_id)?;
        }
        let snapshots = self
            .state
            .snapshots
            .list(&call.principal)?
            .into_iter()
            .filter(|(named, _)| {
                request.sandbox_id.is_empty() || named.source_sandbox_id == request.sandbox_id
            })
            .map(|(named, bytes)| self.snapshot_info(&call.principal, &named, bytes))
            .collect();
        Ok(Response::new(api::ListSnapshotsResponse { snapshots }))
    }

    /// `Sandboxes.GetSnapshot`.
    pub(super) async fn get_snapshot_of(
        &self,
        request: Request<api::GetSnapshotRequest>,
    ) -> Result<Response<api::SnapshotInfo>, Status> {
        let call = self.call(&request)?;
        let name = &request.get_ref().name;
        validate::name("name", name)?;
        let (named, snapshot) = self.state.snapshots.get(&call.principal, name)?;
        Ok(Response::new(self.snapshot_info(
            &call.principal,
            &named,
            snapshot.disk_bytes(),
        )))
    }

    /// `Sandboxes.DeleteSnapshot`.
    pub(super) async fn delete_snapshot_of(
        &self,
        request: Request<api::DeleteSnapshotRequest>,
    ) -> Result<Response<api::DeleteSnapshotResponse>, Status> {
        let call = self.call(&request)?;
        let name = &request.get_ref().name;
        validate::name("name", name)?;
        self.state.snapshots.delete(&call.principal, name).await?;
        Ok(Response::new(api::DeleteSnapshotResponse {}))
    }

    fn snapshot_info(&self, whose: &Principal, named: &Named, bytes: u64) -> api::SnapshotInfo {
        api::SnapshotInfo {
            name: named.name.clone(),
            id: named.id.clone(),
            source_sandbox_id: named.source_sandbox_id.clone(),
            image: named.image.clone(),
            template: named.template.clone(),
            parent_snapshot: named.parent_snapshot.clone(),
            memory_mib: named.memory_mib,
            vcpus: named.vcpus,
            created_at_ms: named.created_at_ms,
            paused_ms: named.paused_ms,
            took_ms: named.took_ms,
            size_bytes: bytes,
            owner: whose.key().unwrap_or_default().to_owned(),
            sandboxes: self.state.registry.started_from(whose.key(), &named.name),
        }
    }
}

/// A name for a snapshot whose request named none: `snapshot-` and 16 hex
/// digits.
fn generated_name() -> Result<String, Status> {
    airlock::random::hex::<8>()
        .map(|hex| format!("snapshot-{hex}"))
        .map_err(|error| {
            reason::status(
                ErrorReason::Internal,
                format!("cannot read {}: {error}", airlock::random::SOURCE),
            )
        })
}
