//! `POST /sandboxes` and `POST /v2/sandboxes`: E2B's create, as a
//! `Sandboxes.Create` of the caller.
//!
//! - `templateID`: a template of the server (`airlock template build`) by
//!   name, else a root image by name, else a snapshot of the caller's by
//!   name (a snapshot's `snapshotID`: the sandbox starts as its clone);
//!   `base` is the server's default image.
//! - `timeout`: the sandbox's life in seconds (E2B's defaults: 15 for v1,
//!   300 for v2).
//! - `autoPause`: an idle policy of pausing after `timeout` seconds without
//!   a call, in place of the kill at `timeout`.
//! - `metadata`, `envVars`: labels and environment variables.
//! - `allow_internet_access`, `network.allowOut` / `denyOut`: Airlock's
//!   network refuses what no rule allows, so `allowOut` becomes its allow
//!   rules, `allow_internet_access: true` (without `allowOut`) allows every
//!   address, and `denyOut` may only name everything (`0.0.0.0/0`), which
//!   is what is left after the allow rules anyway.
//! - `secure` is always so; `autoResume` is always on (the next call on a
//!   paused sandbox resumes it). What Airlock lacks (`mcp`, `iam`,
//!   `volumeMounts`, `allowPublicTraffic: false` ...) is refused, named.

use airlock_api::limits;
use airlock_api::v1::sandboxes_server::Sandboxes as _;
use airlock_api::v1::{self as api};
use http::{Response, StatusCode};
use hyper::body::Incoming;

use super::shape::BASE_TEMPLATE;
use super::wire::{NetworkConfig, NewSandbox};
use super::{body, fail, Ctl};
use crate::e2b::reply::{self, Body, Failure};

/// Which create: their defaults differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

impl Version {
    fn default_timeout(self) -> u64 {
        match self {
            Version::V1 => 15,
            Version::V2 => 300,
        }
    }
}

/// Every address, for `allow_internet_access: true`.
const EVERYWHERE: [&str; 2] = ["0.0.0.0/0", "::/0"];

pub(super) async fn create(
    ctl: &Ctl<'_>,
    body: Incoming,
    version: Version,
) -> Result<Response<Body>, Failure> {
    let new: NewSandbox = body::json(body).await?;
    let templates = ctl.template_names().await?;
    let names: Vec<&str> = templates.iter().map(String::as_str).collect();
    let mut request = translate(new, &names, version)?;
    // A name no image has may be a snapshot of the caller's.
    if !request.image.is_empty()
        && !ctl.image_names().await?.contains(&request.image)
        && ctl.has_snapshot(&request.image).await?
    {
        request.snapshot = std::mem::take(&mut request.image);
    }
    let template = [&request.template, &request.snapshot, &request.image]
        .into_iter()
        .find(|name| !name.is_empty())
        .cloned()
        .unwrap_or_default();
    let info = ctl
        .front
        .services
        .create(ctl.request(request))
        .await
        .map_err(|status| {
            let mut failure = fail::from_status(&status);
            if failure.status == StatusCode::NOT_FOUND {
                failure.message = format!(
                    "templateID: no template, image or snapshot {template:?} on this server \
                     (GET /templates lists the templates and images, GET /snapshots your \
                     snapshots): {}",
                    failure.message
                );
            }
            failure
        })?
        .into_inner();
    tracing::info!(id = info.sandbox_id, principal = %ctl.principal, "e2b: created");
    Ok(reply::json(StatusCode::CREATED, &ctl.sandbox(&info)?))
}

impl Ctl<'_> {
    /// The names of the templates the caller may start from.
    pub async fn template_names(&self) -> Result<Vec<String>, Failure> {
        Ok(self
            .front
            .services
            .list_templates(self.request(api::ListTemplatesRequest {}))
            .await
            .map_err(|status| fail::from_status(&status))?
            .into_inner()
            .templates
            .into_iter()
            .map(|t| t.name)
            .collect())
    }

    /// The names of the server's root images.
    pub async fn image_names(&self) -> Result<Vec<String>, Failure> {
        Ok(self
            .front
            .services
            .list_images(self.request(api::ListImagesRequest {}))
            .await
            .map_err(|status| fail::from_status(&status))?
            .into_inner()
            .images
            .into_iter()
            .map(|i| i.name)
            .collect())
    }
}

/// E2B's create as Airlock's; `templates` are the server's template names.
pub fn translate(
    new: NewSandbox,
    templates: &[&str],
    version: Version,
) -> Result<api::CreateSandboxRequest, Failure> {
    let template_id = new
        .template_id
        .filter(|t| !t.trim().is_empty())
        .ok_or_else(|| fail::invalid("templateID", "required: a template or image name"))?;
    let mut request = api::CreateSandboxRequest::default();
    if templates.contains(&template_id.as_str()) {
        request.template = template_id;
    } else if template_id != BASE_TEMPLATE {
        request.image = template_id;
    }
    let timeout = new.timeout.unwrap_or(version.default_timeout());
    if timeout == 0 {
        return Err(fail::invalid("timeout", "must be at least 1 second"));
    }
    if new.auto_pause == Some(true) {
        if new.auto_pause_memory == Some(false) {
            return Err(fail::unsupported(
                "autoPauseMemory: false",
                "a paused sandbox keeps its memory",
            ));
        }
        request.idle = Some(api::Idle {
            timeout_secs: timeout,
            policy: api::IdlePolicy::Pause.into(),
        });
        request.timeout_secs = Some(limits::MAX_TIMEOUT_SECS);
    } else {
        request.timeout_secs = Some(timeout);
    }
    if let Some(resume) = &new.auto_resume {
        if !resume.enabled {
            return Err(fail::unsupported(
                "autoResume.enabled: false",
                "the next call on a paused sandbox always resumes it",
            ));
        }
    }
    request.metadata = new.metadata.unwrap_or_default().into_iter().collect();
    request.envs = new.env_vars.unwrap_or_default().into_iter().collect();
    request.allow_net = network(new.allow_internet_access, new.network)?;
    if new.mcp.as_ref().is_some_and(|m| !m.is_null()) {
        return Err(fail::unsupported("mcp", "no MCP gateway in the sandbox"));
    }
    if new.iam.as_ref().is_some_and(|i| !is_empty(i)) {
        return Err(fail::unsupported("iam", "no workload identity tokens"));
    }
    if new.volume_mounts.as_ref().is_some_and(|v| !v.is_empty()) {
        return Err(fail::unsupported(
            "volumeMounts",
            "Airlock's workspaces are not served by this front",
        ));
    }
    Ok(request)
}

/// The allow rules of `allow_internet_access` and `network`.
pub(super) fn network(
    internet: Option<bool>,
    network: Option<NetworkConfig>,
) -> Result<Vec<String>, Failure> {
    let network = network.unwrap_or_default();
    for deny in network.deny_out.iter().flatten() {
        if deny != "0.0.0.0/0" && deny != "::/0" {
            return Err(fail::unsupported(
                &format!("network.denyOut {deny:?}"),
                "its network refuses whatever no rule allows: list what to allow in \
                 network.allowOut, and deny only 0.0.0.0/0",
            ));
        }
    }
    if network.allow_public_traffic == Some(false) {
        return Err(fail::unsupported(
            "network.allowPublicTraffic: false",
            "a sandbox's ports are always reached with its access token",
        ));
    }
    for (field, value) in [
        (
            "network.maskRequestHost",
            network.mask_request_host.is_some(),
        ),
        (
            "network.rules",
            network.rules.as_ref().is_some_and(|v| !is_empty(v)),
        ),
        (
            "network.dnsServers",
            network.dns_servers.as_ref().is_some_and(|v| !is_empty(v)),
        ),
        (
            "network.egressProxy",
            network.egress_proxy.as_ref().is_some_and(|v| !is_empty(v)),
        ),
        (
            "network.httpsPorts",
            network.https_ports.as_ref().is_some_and(|v| !is_empty(v)),
        ),
    ] {
        if value {
            return Err(fail::unsupported(
                field,
                "the gateway takes allow rules only",
            ));
        }
    }
    let allow = network.allow_out.unwrap_or_default();
    if !allow.is_empty() {
        if internet == Some(false) {
            return Err(fail::invalid(
                "allow_internet_access",
                "false with network.allowOut: send one of them",
            ));
        }
        return Ok(allow);
    }
    Ok(match internet {
        Some(true) => EVERYWHERE.iter().map(|&r| r.to_owned()).collect(),
        _ => Vec::new(),
    })
}

/// Whether a JSON value says nothing (null, `{}`, `[]`, "").
fn is_empty(value: &serde_json::Value) -> bool {
    match value {
        serde_json::Value::Null => true,
        serde_json::Value::Object(map) => map.is_empty(),
        serde_json::Value::Array(items) => items.is_empty(),
        serde_json::Value::String(text) => text.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new(json: &str) -> NewSandbox {
        serde_json::from_str(json).expect("a create")
    }

    #[test]
    fn templates_images_and_base_are_told_apart() {
        let base = translate(new(r#"{"templateID":"base"}"#), &["e2b"], Version::V2).expect("ok");
        assert_eq!((base.image.as_str(), base.template.as_str()), ("", ""));
        assert_eq!(base.timeout_secs, Some(300));
        let t = translate(
            new(r#"{"templateID":"e2b","timeout":9}"#),
            &["e2b"],
            Version::V1,
        )
        .expect("ok");
        assert_eq!((t.template.as_str(), t.timeout_secs), ("e2b", Some(9)));
        let i = translate(new(r#"{"templateID":"python"}"#), &["e2b"], Version::V1).expect("ok");
        assert_eq!((i.image.as_str(), i.timeout_secs), ("python", Some(15)));
        let missing = translate(new("{}"), &[], Version::V2).unwrap_err();
        assert!(missing.message.starts_with("templateID"));
    }

    #[test]
    fn the_network_becomes_allow_rules() {
        let open = translate(
            new(r#"{"templateID":"base","allow_internet_access":true}"#),
            &[],
            Version::V2,
        )
        .expect("ok");
        assert_eq!(open.allow_net, vec!["0.0.0.0/0", "::/0"]);
        let some = translate(
            new(r#"{"templateID":"base","network":{"allowOut":["example.com"],"denyOut":["0.0.0.0/0"]}}"#),
            &[],
            Version::V2,
        )
        .expect("ok");
        assert_eq!(some.allow_net, vec!["example.com"]);
        let closed = translate(new(r#"{"templateID":"base"}"#), &[], Version::V2).expect("ok");
        assert!(closed.allow_net.is_empty());
        let deny = translate(
            new(r#"{"templateID":"base","network":{"denyOut":["10.0.0.0/8"]}}"#),
            &[],
            Version::V2,
        )
        .unwrap_err();
        assert_eq!(deny.status, StatusCode::NOT_IMPLEMENTED);
        assert!(deny.message.contains("denyOut"));
    }

    #[test]
    fn auto_pause_is_an_idle_pause() {
        let paused = translate(
            new(r#"{"templateID":"base","timeout":60,"autoPause":true}"#),
            &[],
            Version::V2,
        )
        .expect("ok");
        let idle = paused.idle.expect("an idle policy");
        assert_eq!(idle.timeout_secs, 60);
        assert_eq!(idle.policy, i32::from(api::IdlePolicy::Pause));
        let mcp = translate(
            new(r#"{"templateID":"base","mcp":{"x":{}}}"#),
            &[],
            Version::V2,
        )
        .unwrap_err();
        assert!(mcp.message.starts_with("mcp"));
    }
}
