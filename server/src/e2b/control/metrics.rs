//! `GET /sandboxes/{id}/metrics` (a list of one reading, now) and
//! `GET /sandboxes/metrics?sandbox_ids=...`, as `Sandboxes.GetMetrics` of
//! the caller. Airlock reads a sandbox's use when asked, so there is no
//! history to range over (`start`, `end` are accepted and the reading is
//! the current one).

use std::collections::BTreeMap;

use airlock_api::v1::sandboxes_server::Sandboxes as _;
use airlock_api::v1::{self as api};
use http::{Response, StatusCode};

use super::time::rfc3339;
use super::wire::{SandboxMetric, SandboxesWithMetrics};
use super::{fail, query, Ctl};
use crate::e2b::reply::{self, Body, Failure};

/// The most sandboxes one `GET /sandboxes/metrics` names.
const MAX_IDS: usize = 100;

async fn reading(ctl: &Ctl<'_>, id: &str) -> Result<SandboxMetric, Failure> {
    let info = ctl.info(id).await?;
    let metrics = ctl
        .front
        .services
        .get_metrics(ctl.request(api::GetMetricsRequest {
            sandbox_id: id.to_owned(),
        }))
        .await
        .map_err(|status| fail::from_status(&status))?
        .into_inner();
    Ok(metric(&info, &metrics))
}

/// One reading as E2B's: CPU use is the guest's CPU time over its running
/// time, per virtual CPU.
pub fn metric(info: &api::SandboxInfo, metrics: &api::SandboxMetrics) -> SandboxMetric {
    let usage = metrics.usage.unwrap_or_default();
    let vcpus = info.vcpus.max(1);
    let cpu_used_pct = if usage.running_ms == 0 {
        0.0
    } else {
        (usage.guest_cpu_ms as f64 / usage.running_ms as f64 * 100.0 / f64::from(vcpus))
            .clamp(0.0, 100.0)
    };
    SandboxMetric {
        timestamp: rfc3339(metrics.at_ms),
        timestamp_unix: metrics.at_ms / 1000,
        cpu_count: vcpus,
        cpu_used_pct,
        mem_used: metrics
            .memory_total_bytes
            .saturating_sub(metrics.memory_available_bytes),
        mem_total: metrics.memory_total_bytes,
        mem_cache: 0,
        disk_used: metrics.disk_used_bytes,
        disk_total: metrics.disk_total_bytes,
    }
}

pub(super) async fn one(ctl: &Ctl<'_>, id: &str) -> Result<Response<Body>, Failure> {
    Ok(reply::json(StatusCode::OK, &[reading(ctl, id).await?]))
}

pub(super) async fn several(ctl: &Ctl<'_>, query: Option<&str>) -> Result<Response<Body>, Failure> {
    let pairs = query::pairs(query)?;
    let ids = query::list(&pairs, "sandbox_ids");
    if ids.len() > MAX_IDS {
        return Err(fail::invalid(
            "sandbox_ids",
            format!("at most {MAX_IDS} at once"),
        ));
    }
    let mut sandboxes = BTreeMap::new();
    for id in ids {
        // A sandbox the caller does not have is left out, as E2B does.
        match reading(ctl, &id).await {
            Ok(metric) => {
                sandboxes.insert(id, metric);
            }
            Err(failure) if failure.status == StatusCode::NOT_FOUND => {}
            Err(failure) => return Err(failure),
        }
    }
    Ok(reply::json(
        StatusCode::OK,
        &SandboxesWithMetrics { sandboxes },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reading_is_e2b_shaped() {
        let info = api::SandboxInfo {
            vcpus: 2,
            ..Default::default()
        };
        let metrics = api::SandboxMetrics {
            usage: Some(api::SandboxUsage {
                wall_ms: 1000,
                running_ms: 1000,
                guest_cpu_ms: 500,
            }),
            memory_total_bytes: 1000,
            memory_available_bytes: 400,
            at_ms: 1_000_000,
            ..Default::default()
        };
        let m = metric(&info, &metrics);
        assert_eq!((m.cpu_count, m.mem_used, m.mem_total), (2, 600, 1000));
        assert!((m.cpu_used_pct - 25.0).abs() < 1e-9);
        assert_eq!(m.timestamp_unix, 1000);
    }
}
