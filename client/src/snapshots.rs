//! A caller's named snapshots (`Sandboxes.Snapshot`, `ListSnapshots`,
//! `GetSnapshot`, `DeleteSnapshot`, API revision 6): a sandbox's memory,
//! programs and files saved under a name that a create's `snapshot` starts
//! clones from. The CLI's `sandbox snapshot` and `snapshot ls|rm` and the
//! MCP server's tools share these calls.

use airlock_api::v1::{
    DeleteSnapshotRequest, GetSnapshotRequest, ListSnapshotsRequest, SnapshotInfo,
    SnapshotSandboxRequest,
};

use crate::client::Client;
use crate::error::ClientError;

impl Client {
    /// Saves sandbox `sandbox_id` (running, paused or on disk) as a
    /// snapshot named `name`; `None` lets the server name it. The sandbox
    /// goes on as it was.
    pub async fn snapshot(
        &self,
        sandbox_id: &str,
        name: Option<&str>,
    ) -> Result<SnapshotInfo, ClientError> {
        let request = SnapshotSandboxRequest {
            sandbox_id: sandbox_id.to_owned(),
            name: name.unwrap_or_default().to_owned(),
        };
        Ok(self.sandboxes().snapshot(request).await?.into_inner())
    }

    /// The caller's snapshots by name, only those taken of `sandbox_id`
    /// when it is given.
    pub async fn snapshots(
        &self,
        sandbox_id: Option<&str>,
    ) -> Result<Vec<SnapshotInfo>, ClientError> {
        let request = ListSnapshotsRequest {
            sandbox_id: sandbox_id.unwrap_or_default().to_owned(),
        };
        let mut snapshots = self
            .sandboxes()
            .list_snapshots(request)
            .await?
            .into_inner()
            .snapshots;
        snapshots.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(snapshots)
    }

    /// The caller's snapshot `name`.
    pub async fn get_snapshot(&self, name: &str) -> Result<SnapshotInfo, ClientError> {
        let request = GetSnapshotRequest {
            name: name.to_owned(),
        };
        Ok(self.sandboxes().get_snapshot(request).await?.into_inner())
    }

    /// Deletes the caller's snapshot `name`: the name at once, its files
    /// once no sandbox started from it needs them.
    pub async fn delete_snapshot(&self, name: &str) -> Result<(), ClientError> {
        let request = DeleteSnapshotRequest {
            name: name.to_owned(),
        };
        self.sandboxes().delete_snapshot(request).await?;
        Ok(())
    }
}
