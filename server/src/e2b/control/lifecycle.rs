//! One sandbox's calls: get, kill, timeout, refresh, pause, resume, connect
//! (resuming a paused one) and fork, each as `Sandboxes` calls of the
//! caller. Another key's sandbox is not found, exactly as one that does not
//! exist (the services' tenancy).

use std::time::{SystemTime, UNIX_EPOCH};

use airlock_api::v1::network_server::Network as _;
use airlock_api::v1::sandboxes_server::Sandboxes as _;
use airlock_api::v1::{self as api};
use http::{Response, StatusCode};
use hyper::body::Incoming;

use super::shape::state_name;
use super::wire::{
    ConnectRequest, ForkRequest, ForkResult, NetworkConfig, PauseRequest, RefreshRequest,
    TimeoutRequest,
};
use super::{body, empty, fail, Ctl};
use crate::e2b::reply::{self, Body, Failure};

/// What `refreshes` extends the life by without a `duration` (E2B's).
const DEFAULT_REFRESH_SECS: u64 = 15;

impl Ctl<'_> {
    /// The caller's sandbox `id`; an ended one is not found, as for E2B.
    pub async fn info(&self, id: &str) -> Result<api::SandboxInfo, Failure> {
        let info = self
            .front
            .services
            .get(self.request(api::GetSandboxRequest {
                sandbox_id: id.to_owned(),
            }))
            .await
            .map_err(|status| fail::from_status(&status))?
            .into_inner();
        if state_name(info.state).is_none() {
            return Err(Failure::new(
                StatusCode::NOT_FOUND,
                format!("sandbox {id} not found: it ended ({})", info.end_reason),
            ));
        }
        Ok(info)
    }

    /// Sets the life of `id` to `secs` from now.
    async fn timeout(&self, id: &str, secs: u64) -> Result<api::SandboxInfo, Failure> {
        self.front
            .services
            .set_timeout(self.request(api::SetTimeoutRequest {
                sandbox_id: id.to_owned(),
                timeout_secs: secs,
            }))
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| fail::from_status(&status))
    }

    /// Makes the life of `id` at least `secs` from now (never shorter).
    async fn extend(&self, info: &api::SandboxInfo, secs: u64) -> Result<(), Failure> {
        let wanted = now_ms().saturating_add(secs.saturating_mul(1000));
        if info.ends_at_ms != 0 && info.ends_at_ms < wanted {
            self.timeout(&info.sandbox_id, secs).await?;
        }
        Ok(())
    }

    async fn resume_sandbox(&self, id: &str) -> Result<api::SandboxInfo, Failure> {
        self.front
            .services
            .resume(self.request(api::ResumeSandboxRequest {
                sandbox_id: id.to_owned(),
            }))
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| fail::from_status(&status))
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

pub(super) async fn get(ctl: &Ctl<'_>, id: &str) -> Result<Response<Body>, Failure> {
    let info = ctl.info(id).await?;
    Ok(reply::json(StatusCode::OK, &ctl.detail(&info)?))
}

pub(super) async fn kill(ctl: &Ctl<'_>, id: &str) -> Result<Response<Body>, Failure> {
    ctl.info(id).await?;
    ctl.front
        .services
        .kill(ctl.request(api::KillSandboxRequest {
            sandbox_id: id.to_owned(),
        }))
        .await
        .map_err(|status| fail::from_status(&status))?;
    Ok(empty(StatusCode::NO_CONTENT))
}

pub(super) async fn set_timeout(
    ctl: &Ctl<'_>,
    id: &str,
    body: Incoming,
) -> Result<Response<Body>, Failure> {
    let request: TimeoutRequest = body::json(body).await?;
    let secs = request
        .timeout
        .ok_or_else(|| fail::invalid("timeout", "required: seconds from now"))?;
    ctl.info(id).await?;
    ctl.timeout(id, secs).await?;
    Ok(empty(StatusCode::NO_CONTENT))
}

pub(super) async fn refresh(
    ctl: &Ctl<'_>,
    id: &str,
    body: Incoming,
) -> Result<Response<Body>, Failure> {
    let request: RefreshRequest = body::json(body).await?;
    let info = ctl.info(id).await?;
    ctl.extend(&info, request.duration.unwrap_or(DEFAULT_REFRESH_SECS))
        .await?;
    Ok(empty(StatusCode::NO_CONTENT))
}

pub(super) async fn pause(
    ctl: &Ctl<'_>,
    id: &str,
    body: Incoming,
) -> Result<Response<Body>, Failure> {
    let request: PauseRequest = body::json(body).await?;
    if request.memory == Some(serde_json::Value::Bool(false)) {
        return Err(fail::unsupported(
            "memory: false",
            "a paused sandbox keeps its memory",
        ));
    }
    let info = ctl.info(id).await?;
    if state_name(info.state) == Some("paused") {
        return Err(Failure::new(
            StatusCode::CONFLICT,
            format!("sandbox {id} is already paused"),
        ));
    }
    ctl.front
        .services
        .pause(ctl.request(api::PauseSandboxRequest {
            sandbox_id: id.to_owned(),
            to_disk: false,
        }))
        .await
        .map_err(|status| fail::from_status(&status))?;
    Ok(empty(StatusCode::NO_CONTENT))
}

pub(super) async fn resume(
    ctl: &Ctl<'_>,
    id: &str,
    body: Incoming,
) -> Result<Response<Body>, Failure> {
    let request: ConnectRequest = body::json(body).await?;
    let info = ctl.info(id).await?;
    if state_name(info.state) == Some("running") {
        return Err(Failure::new(
            StatusCode::CONFLICT,
            format!("sandbox {id} is already running"),
        ));
    }
    let mut info = ctl.resume_sandbox(id).await?;
    if let Some(secs) = request.timeout {
        info = ctl.timeout(id, secs).await?;
    }
    Ok(reply::json(StatusCode::CREATED, &ctl.sandbox(&info)?))
}

/// Connect: the sandbox, resumed if it was paused (201) or as it runs
/// (200), its life extended to `timeout` from now if that is longer.
pub(super) async fn connect(
    ctl: &Ctl<'_>,
    id: &str,
    body: Incoming,
) -> Result<Response<Body>, Failure> {
    let request: ConnectRequest = body::json(body).await?;
    let mut info = ctl.info(id).await?;
    let mut status = StatusCode::OK;
    if state_name(info.state) == Some("paused") {
        info = ctl.resume_sandbox(id).await?;
        status = StatusCode::CREATED;
    }
    if let Some(secs) = request.timeout {
        ctl.extend(&info, secs).await?;
    }
    Ok(reply::json(status, &ctl.sandbox(&info)?))
}

pub(super) async fn fork(
    ctl: &Ctl<'_>,
    id: &str,
    body: Incoming,
) -> Result<Response<Body>, Failure> {
    let request: ForkRequest = body::json(body).await?;
    ctl.info(id).await?;
    let children = ctl
        .front
        .services
        .fork(ctl.request(api::ForkSandboxRequest {
            sandbox_id: id.to_owned(),
            count: request.count.unwrap_or(1),
        }))
        .await
        .map_err(|status| fail::from_status(&status))?
        .into_inner()
        .sandboxes;
    let mut results = Vec::with_capacity(children.len());
    for mut child in children {
        if let Some(secs) = request.timeout {
            child = ctl.timeout(&child.sandbox_id, secs).await?;
        }
        results.push(ForkResult {
            sandbox: ctl.sandbox(&child)?,
        });
    }
    Ok(reply::json(StatusCode::CREATED, &results))
}

/// `update_network`: the sandbox's allow rules replaced by those of the
/// body (as a create reads them), with `Network.ReplacePolicy`. A sandbox
/// made without a network has none to change (409, naming it).
pub(super) async fn update_network(
    ctl: &Ctl<'_>,
    id: &str,
    body: Incoming,
) -> Result<Response<Body>, Failure> {
    let mut update: NetworkConfig = body::json(body).await?;
    let internet = update.allow_internet_access.take();
    let rules = super::create::network(internet, Some(update))?;
    ctl.info(id).await?;
    ctl.front
        .services
        .replace_policy(ctl.request(api::ReplacePolicyRequest {
            sandbox_id: id.to_owned(),
            rules,
        }))
        .await
        .map_err(|status| fail::from_status(&status))?;
    Ok(empty(StatusCode::NO_CONTENT))
}
