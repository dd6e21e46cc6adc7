//! E2B's snapshots as the caller's named snapshots: `POST
//! /sandboxes/{id}/snapshots` (`Sandboxes.Snapshot`), `GET /snapshots`
//! (`ListSnapshots`, in pages of `limit` by name, the next page's token in
//! `x-next-token`) and `DELETE /templates/{id}` (`DeleteSnapshot`: E2B's
//! snapshots are templates; a name that is no snapshot of the caller's is
//! its template, `Templates.DeleteTemplate`). A snapshot's `snapshotID` is its name, what
//! `Sandbox.create(snapshot_id)` sends as its `templateID` (`create`
//! starts from it when no template or image has that name).
//!
//! Airlock's snapshots always hold the memory: `memory: false` (the SDKs'
//! `mode="filesystem"`) is 400 naming it. Another key's snapshot is not
//! found, as one that does not exist.

use airlock_api::v1::sandboxes_server::Sandboxes as _;
use airlock_api::v1::templates_server::Templates as _;
use airlock_api::v1::{self as api};
use http::{HeaderValue, Response, StatusCode};
use hyper::body::Incoming;
use tonic::Code;

use super::list::{limit, NEXT_TOKEN_HEADER};
use super::shape::BASE_TEMPLATE;
use super::wire::{Snapshot, SnapshotRequest};
use super::{body, empty, fail, query, Ctl};
use crate::e2b::reply::{self, Body, Failure};

impl Ctl<'_> {
    /// Whether the caller has a snapshot named `name`.
    pub async fn has_snapshot(&self, name: &str) -> Result<bool, Failure> {
        let found = self
            .front
            .services
            .get_snapshot(self.request(api::GetSnapshotRequest {
                name: name.to_owned(),
            }))
            .await;
        match found {
            Ok(_) => Ok(true),
            // A name no snapshot can have is not one of the caller's.
            Err(status) if matches!(status.code(), Code::NotFound | Code::InvalidArgument) => {
                Ok(false)
            }
            Err(status) => Err(fail::from_status(&status)),
        }
    }
}

/// `info` as E2B's `SnapshotInfo`.
fn shape(info: &api::SnapshotInfo) -> Snapshot {
    Snapshot {
        snapshot_id: info.name.clone(),
        names: vec![info.name.clone()],
    }
}

pub(super) async fn take(
    ctl: &Ctl<'_>,
    id: &str,
    body: Incoming,
) -> Result<Response<Body>, Failure> {
    let request: SnapshotRequest = body::json(body).await?;
    if request.memory == Some(serde_json::Value::Bool(false)) {
        return Err(fail::invalid(
            "memory",
            "false (mode=\"filesystem\") is not supported by Airlock: its snapshots always \
             keep the memory, running programs and files; take a full snapshot (mode \"full\", \
             the default)",
        ));
    }
    ctl.info(id).await?;
    let info = ctl
        .front
        .services
        .snapshot(ctl.request(api::SnapshotSandboxRequest {
            sandbox_id: id.to_owned(),
            name: request.name.unwrap_or_default(),
        }))
        .await
        .map_err(|status| fail::from_status(&status))?
        .into_inner();
    tracing::info!(sandbox = id, snapshot = info.name, principal = %ctl.principal, "e2b: snapshot taken");
    Ok(reply::json(StatusCode::CREATED, &shape(&info)))
}

pub(super) async fn list(ctl: &Ctl<'_>, query: Option<&str>) -> Result<Response<Body>, Failure> {
    let pairs = query::pairs(query)?;
    let limit = usize::try_from(limit(&pairs)?).unwrap_or(usize::MAX);
    let source = query::one(&pairs, "sandboxID")?.unwrap_or_default();
    let named = query::one(&pairs, "name")?;
    let after = query::one(&pairs, "nextToken")?.unwrap_or_default();
    let mut snapshots = ctl
        .front
        .services
        .list_snapshots(ctl.request(api::ListSnapshotsRequest {
            sandbox_id: source.to_owned(),
        }))
        .await
        .map_err(|status| fail::from_status(&status))?
        .into_inner()
        .snapshots;
    // By name or by content id; a page starts past the previous one's last.
    snapshots.retain(|s| named.is_none_or(|n| s.name == n || s.id == n));
    snapshots.retain(|s| s.name.as_str() > after);
    snapshots.sort_by(|a, b| a.name.cmp(&b.name));
    let more = snapshots.len() > limit;
    snapshots.truncate(limit);
    let page: Vec<Snapshot> = snapshots.iter().map(shape).collect();
    let mut response = reply::json(StatusCode::OK, &page);
    if let (true, Some(last)) = (more, snapshots.last()) {
        if let Ok(value) = HeaderValue::from_str(&last.name) {
            response.headers_mut().insert(NEXT_TOKEN_HEADER, value);
        }
    }
    Ok(response)
}

/// Whether `status` says the name is none of the caller's (or none a
/// snapshot or template can have).
fn not_theirs(status: &tonic::Status) -> bool {
    matches!(status.code(), Code::NotFound | Code::InvalidArgument)
}

/// `DELETE /templates/{id}`: the caller's snapshot `id`, else the
/// caller's template `id` (the server's own are 403: its owner removes
/// them). An image is not removed here (501); any other name is 404, as
/// E2B's SDKs read "not found" (`delete_snapshot` answers `False`).
pub(super) async fn delete(ctl: &Ctl<'_>, id: &str) -> Result<Response<Body>, Failure> {
    let name = query::decode(id, "templateID")?;
    let deleted = ctl
        .front
        .services
        .delete_snapshot(ctl.request(api::DeleteSnapshotRequest { name: name.clone() }))
        .await;
    match deleted {
        Ok(_) => {
            tracing::info!(snapshot = name, principal = %ctl.principal, "e2b: snapshot deleted");
            return Ok(empty(StatusCode::NO_CONTENT));
        }
        Err(status) if not_theirs(&status) => {}
        Err(status) => return Err(fail::from_status(&status)),
    }
    let deleted = ctl
        .front
        .services
        .delete_template(ctl.request(api::DeleteTemplateRequest { name: name.clone() }))
        .await;
    match deleted {
        Ok(_) => {
            tracing::info!(template = name, principal = %ctl.principal, "e2b: template deleted");
            return Ok(empty(StatusCode::NO_CONTENT));
        }
        Err(status) if not_theirs(&status) => {}
        Err(status) => return Err(fail::from_status(&status)),
    }
    if name == BASE_TEMPLATE || ctl.image_names().await?.contains(&name) {
        return Err(fail::unsupported(
            &format!("deleting image {name:?}"),
            "the server's images are removed on its host, with `airlock image rm`",
        ));
    }
    Err(Failure::new(
        StatusCode::NOT_FOUND,
        format!(
            "templateID: no snapshot or template named {name:?} (GET /snapshots lists your \
             snapshots, GET /templates the templates)"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_is_named_by_its_name() {
        let info = api::SnapshotInfo {
            name: "web".into(),
            id: "ab".repeat(32),
            ..api::SnapshotInfo::default()
        };
        let json = serde_json::to_value(shape(&info)).expect("json");
        assert_eq!(
            json,
            serde_json::json!({"snapshotID": "web", "names": ["web"]})
        );
    }
}
