//! `snapshot_sandbox`, `list_snapshots`, `delete_snapshot`: the caller's
//! named snapshots (`Sandboxes.Snapshot`, `ListSnapshots`,
//! `DeleteSnapshot`), which `create_sandbox`'s `snapshot` starts clones of.

use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::service::RequestContext;
use rmcp::{schemars, tool, tool_router, RoleServer};
use serde::Deserialize;
use serde_json::json;

use airlock_client::api::{ErrorReason, SnapshotInfo};
use airlock_client::ClientError;

use super::AirlockTools;
use crate::outcome::{finish, Reply, Stop};
use crate::render;

/// What a refusal of an unknown name adds.
const LIST_HINT: &str = " (list_snapshots lists yours)";

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = super::schema::one_line)]
pub struct SnapshotSandbox {
    /// The sandbox to save. Default: this session's own sandbox.
    pub sandbox_id: Option<String>,
    /// A name for the snapshot: letters, digits, '.', '_' and '-', up to
    /// 128, not starting with '.'. Default: one the server makes up
    /// (snapshot- and 16 hex digits).
    pub name: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = super::schema::one_line)]
pub struct ListSnapshots {
    /// Only the snapshots taken of this sandbox. Default: all of yours.
    pub sandbox_id: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = super::schema::one_line)]
pub struct DeleteSnapshot {
    /// The snapshot's name, as snapshot_sandbox or list_snapshots gave it.
    pub name: String,
}

#[tool_router(router = snapshots_router, vis = "pub(super)")]
impl AirlockTools {
    #[tool(
        description = "Save a sandbox's whole state (memory, running programs, files, Python \
        variables) as a named snapshot, and return its name. create_sandbox with snapshot \
        starts new sandboxes as exact copies of that moment, each with its own id; use it to \
        keep a prepared environment (packages installed, data loaded, a server running) and \
        start from it again, or to try several things from one point. The sandbox itself goes \
        on as it was (stopped only while its memory is copied). Snapshots outlive this \
        session, until delete_snapshot.",
        annotations(
            title = "Snapshot a sandbox",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn snapshot_sandbox(
        &self,
        Parameters(params): Parameters<SnapshotSandbox>,
        context: RequestContext<RoleServer>,
    ) -> Reply {
        let _busy = self.session.busy(&context);
        finish(self.do_snapshot(params, context).await)
    }

    #[tool(
        description = "List your snapshots (made by snapshot_sandbox): name, the sandbox it \
        was taken of, image, memory, size, age, and how many sandboxes run from it.",
        annotations(
            title = "List snapshots",
            read_only_hint = true,
            open_world_hint = false
        )
    )]
    async fn list_snapshots(
        &self,
        Parameters(params): Parameters<ListSnapshots>,
        context: RequestContext<RoleServer>,
    ) -> Reply {
        let _busy = self.session.busy(&context);
        finish(self.do_list_snapshots(params, context).await)
    }

    #[tool(
        description = "Delete a snapshot of yours by name: no new sandbox can start from it. \
        Sandboxes already started from it run on. Frees its storage.",
        annotations(
            title = "Delete a snapshot",
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = false
        )
    )]
    async fn delete_snapshot(
        &self,
        Parameters(params): Parameters<DeleteSnapshot>,
        context: RequestContext<RoleServer>,
    ) -> Reply {
        let _busy = self.session.busy(&context);
        finish(self.do_delete_snapshot(params, context).await)
    }
}

impl AirlockTools {
    async fn do_snapshot(
        &self,
        params: SnapshotSandbox,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, Stop> {
        let client = self.session.client(&context).await?;
        let id = self.named_or_own(params.sandbox_id).await?;
        let name = params
            .name
            .as_deref()
            .map(str::trim)
            .filter(|n| !n.is_empty());
        let taken = client
            .snapshot(&id, name)
            .await
            .map_err(|e| Stop::call(&format!("cannot snapshot {id}"), e))?;
        let text = format!(
            "Saved {id} as snapshot \"{}\" ({} stopped {} ms). Pass snapshot \"{}\" to \
             create_sandbox to start sandboxes from it.\n{}",
            taken.name,
            id,
            taken.paused_ms,
            taken.name,
            snapshot_line(&taken)
        );
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        result.structured_content = Some(json!({
            "snapshot": taken.name,
            "source_sandbox_id": taken.source_sandbox_id,
            "paused_ms": taken.paused_ms,
            "size_bytes": taken.size_bytes,
        }));
        Ok(result)
    }

    async fn do_list_snapshots(
        &self,
        params: ListSnapshots,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, Stop> {
        let client = self.session.client(&context).await?;
        let source = params
            .sandbox_id
            .as_deref()
            .map(str::trim)
            .filter(|id| !id.is_empty());
        let snapshots = client
            .snapshots(source)
            .await
            .map_err(|e| Stop::call("cannot list the snapshots", e))?;
        let text = if snapshots.is_empty() {
            "No snapshots. snapshot_sandbox saves a sandbox as one.".to_owned()
        } else {
            snapshots
                .iter()
                .map(snapshot_line)
                .collect::<Vec<_>>()
                .join("\n")
        };
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        let names: Vec<&str> = snapshots.iter().map(|s| s.name.as_str()).collect();
        result.structured_content = Some(json!({ "snapshots": names }));
        Ok(result)
    }

    async fn do_delete_snapshot(
        &self,
        params: DeleteSnapshot,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, Stop> {
        let name = params.name.trim();
        if name.is_empty() {
            return Err(Stop::Invalid("name: the snapshot's name".into()));
        }
        let client = self.session.client(&context).await?;
        client
            .delete_snapshot(name)
            .await
            .map_err(|e| unknown_name(&format!("cannot delete snapshot {name}"), e))?;
        Ok(CallToolResult::success(vec![ContentBlock::text(format!(
            "Deleted snapshot {name}; sandboxes started from it run on."
        ))]))
    }
}

/// A refusal naming a snapshot, with where the names are for one that is
/// not found.
pub(super) fn unknown_name(what: &str, error: ClientError) -> Stop {
    let not_found = error.reason() == Some(ErrorReason::NotFound);
    match Stop::call(what, error) {
        Stop::Failed(message) if not_found => Stop::Failed(format!("{message}{LIST_HINT}")),
        stop => stop,
    }
}

/// One line about a snapshot.
fn snapshot_line(info: &SnapshotInfo) -> String {
    let image = if info.image.is_empty() {
        "none (busybox)"
    } else {
        &info.image
    };
    let mut line = format!(
        "{}  of {}  image {image}  {} MiB  {} vCPU  {} MiB on disk",
        info.name,
        info.source_sandbox_id,
        info.memory_mib,
        info.vcpus,
        info.size_bytes.div_ceil(1 << 20)
    );
    if info.created_at_ms > 0 {
        let age = render::now_ms().saturating_sub(info.created_at_ms) / 1000;
        line.push_str(&format!("  taken {} ago", render::duration(age)));
    }
    if info.sandboxes > 0 {
        line.push_str(&format!("  {} sandboxes run from it", info.sandboxes));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_line_says_what_it_holds() {
        let info = SnapshotInfo {
            name: "prepared".into(),
            source_sandbox_id: "sb-1".into(),
            image: "default".into(),
            memory_mib: 512,
            vcpus: 1,
            size_bytes: 300 << 20,
            created_at_ms: render::now_ms() - 65_000,
            sandboxes: 2,
            ..SnapshotInfo::default()
        };
        let line = snapshot_line(&info);
        assert!(
            line.starts_with(
                "prepared  of sb-1  image default  512 MiB  1 vCPU  300 MiB on disk  taken 1m"
            ),
            "{line}"
        );
        assert!(line.ends_with("2 sandboxes run from it"), "{line}");
    }

    #[test]
    fn an_unknown_name_says_where_the_names_are() {
        let status = airlock_client::reason::status(ErrorReason::NotFound, "no snapshot named x");
        match unknown_name("cannot delete snapshot x", status.into()) {
            Stop::Failed(message) => assert!(
                message.ends_with("no snapshot named x (list_snapshots lists yours)"),
                "{message}"
            ),
            other => panic!("{other:?}"),
        }
    }
}
