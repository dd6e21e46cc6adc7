//! `GET /v2/sandboxes` (one page: `limit`, `nextToken`, the next page's
//! token in the `x-next-token` header), `GET /sandboxes` (every running
//! sandbox) and `GET /templates`, as `Sandboxes.List` and
//! `ListTemplates` / `ListImages` of the caller; the `limit` of E2B's
//! pages (`GET /snapshots` takes it too).

use airlock_api::v1::sandboxes_server::Sandboxes as _;
use airlock_api::v1::{self as api};
use http::{HeaderValue, Response, StatusCode};

use super::shape::{listed, BASE_TEMPLATE};
use super::time::rfc3339;
use super::wire::{ListedSandbox, Template};
use super::{fail, query, Ctl, ENVD_VERSION};
use crate::e2b::reply::{self, Body, Failure};

/// The header of the next page's token.
pub const NEXT_TOKEN_HEADER: &str = "x-next-token";

/// E2B's largest page.
const MAX_LIMIT: u64 = 1000;
/// E2B's page without a `limit`.
const DEFAULT_LIMIT: u64 = 100;

/// The states `state=...` names (E2B's `running`, `paused`); none: both.
fn states(names: &[String]) -> Result<Vec<i32>, Failure> {
    let mut states = Vec::new();
    for name in names {
        match name.as_str() {
            "running" => states.push(api::SandboxState::Running.into()),
            "paused" => {
                states.push(api::SandboxState::Paused.into());
                states.push(api::SandboxState::OnDisk.into());
            }
            other => {
                return Err(fail::invalid(
                    "state",
                    format!("{other:?} is not a state (running, paused)"),
                ))
            }
        }
    }
    if states.is_empty() {
        states = vec![
            api::SandboxState::Running.into(),
            api::SandboxState::Paused.into(),
            api::SandboxState::OnDisk.into(),
        ];
    }
    Ok(states)
}

/// One page of the caller's sandboxes.
async fn list(
    ctl: &Ctl<'_>,
    request: api::ListSandboxesRequest,
) -> Result<api::ListSandboxesResponse, Failure> {
    ctl.front
        .services
        .list(ctl.request(request))
        .await
        .map(tonic::Response::into_inner)
        .map_err(|status| fail::from_status(&status))
}

/// A page's `limit`: 1 to 1000, 100 if not given (E2B's).
pub(super) fn limit(pairs: &[(String, String)]) -> Result<u64, Failure> {
    let limit = query::number(pairs, "limit")?.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(fail::invalid(
            "limit",
            format!("{limit}: from 1 to {MAX_LIMIT}"),
        ));
    }
    Ok(limit)
}

pub(super) async fn page(ctl: &Ctl<'_>, query: Option<&str>) -> Result<Response<Body>, Failure> {
    let pairs = query::pairs(query)?;
    let limit = limit(&pairs)?;
    if let Some(order) = query::one(&pairs, "order")? {
        if order != "asc" {
            return Err(fail::unsupported(
                &format!("order={order}"),
                "sandboxes are listed by id, ascending",
            ));
        }
    }
    let template = query::one(&pairs, "template")?.map(str::to_owned);
    let answer = list(
        ctl,
        api::ListSandboxesRequest {
            metadata: query::metadata(&pairs)?.into_iter().collect(),
            states: states(&query::list(&pairs, "state"))?,
            page_size: u32::try_from(limit).unwrap_or(u32::MAX),
            page_token: query::one(&pairs, "nextToken")?
                .unwrap_or_default()
                .to_owned(),
        },
    )
    .await?;
    let sandboxes: Vec<ListedSandbox> = answer
        .sandboxes
        .iter()
        .map(listed)
        .filter(|s| template.as_ref().is_none_or(|t| *t == s.template_id))
        .collect();
    let mut response = reply::json(StatusCode::OK, &sandboxes);
    if !answer.next_page_token.is_empty() {
        if let Ok(value) = HeaderValue::from_str(&answer.next_page_token) {
            response.headers_mut().insert(NEXT_TOKEN_HEADER, value);
        }
    }
    Ok(response)
}

/// Every running sandbox of the caller (E2B's first list), with the
/// metadata filter.
pub(super) async fn all(ctl: &Ctl<'_>, query: Option<&str>) -> Result<Response<Body>, Failure> {
    let pairs = query::pairs(query)?;
    let metadata: std::collections::HashMap<String, String> =
        query::metadata(&pairs)?.into_iter().collect();
    let mut sandboxes = Vec::new();
    let mut page_token = String::new();
    loop {
        let answer = list(
            ctl,
            api::ListSandboxesRequest {
                metadata: metadata.clone(),
                states: vec![api::SandboxState::Running.into()],
                page_size: 1000,
                page_token,
            },
        )
        .await?;
        sandboxes.extend(answer.sandboxes.iter().map(listed));
        if answer.next_page_token.is_empty() {
            break;
        }
        page_token = answer.next_page_token;
    }
    Ok(reply::json(StatusCode::OK, &sandboxes))
}

/// The server's templates and images, each as an E2B template (the
/// default image as `base`).
pub(super) async fn templates(ctl: &Ctl<'_>) -> Result<Response<Body>, Failure> {
    let services = &ctl.front.services;
    let templates = services
        .list_templates(ctl.request(api::ListTemplatesRequest {}))
        .await
        .map_err(|status| fail::from_status(&status))?
        .into_inner()
        .templates;
    let images = services
        .list_images(ctl.request(api::ListImagesRequest {}))
        .await
        .map_err(|status| fail::from_status(&status))?
        .into_inner()
        .images;
    let mut listed: Vec<Template> = templates
        .iter()
        .map(|t| template(&t.name, t.size_bytes, t.created_at_ms, &t.image))
        .collect();
    listed.extend(images.iter().map(|image| {
        let name = if image.name == "default" {
            BASE_TEMPLATE
        } else {
            &image.name
        };
        template(name, image.size_bytes, 0, &image.source)
    }));
    Ok(reply::json(StatusCode::OK, &listed))
}

fn template(name: &str, size_bytes: u64, created_at_ms: u64, from: &str) -> Template {
    Template {
        template_id: name.to_owned(),
        build_id: name.to_owned(),
        cpu_count: 1,
        memory_mb: 256,
        disk_size_mb: size_bytes / (1024 * 1024),
        public: false,
        aliases: vec![name.to_owned()],
        names: vec![name.to_owned()],
        created_at: rfc3339(created_at_ms),
        updated_at: rfc3339(created_at_ms),
        created_by: None,
        last_spawned_at: None,
        spawn_count: 0,
        build_count: 1,
        envd_version: ENVD_VERSION,
        build_status: "ready",
        description: if from.is_empty() {
            String::new()
        } else {
            format!("from {from}")
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e2b_states_become_airlock_states() {
        assert_eq!(states(&[]).expect("all").len(), 3);
        assert_eq!(
            states(&["running".to_owned()]).expect("running"),
            vec![i32::from(api::SandboxState::Running)]
        );
        assert!(states(&["gone".to_owned()])
            .unwrap_err()
            .message
            .starts_with("state"));
    }
}
