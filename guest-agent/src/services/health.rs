//! `airlock.agent.v1.Health`: identity, timings and resource use (the
//! guest's memory, what all programs used from their parent cgroup, the
//! agent's own RSS), answered without ever touching user work: a few small
//! reads of /proc and cgroupfs. It also reports the sandbox id that
//! `System.Personalize` recorded.

use std::path::PathBuf;
use std::sync::Arc;

use airlock_proto::v1::{health_server, CheckRequest, CheckResponse};
use tonic::{Request, Response, Status};

use crate::clock;
use crate::personalize::SandboxId;
use crate::services::process::cgroup::{parse_meminfo, MEMINFO};
use crate::small_file::Kept;

/// The Health service.
#[derive(Debug, Clone)]
pub struct HealthService {
    init_started_us: u64,
    serving_since_us: u64,
    files: Arc<Files>,
    sandbox_id: SandboxId,
}

/// The files every answer reads, kept open between answers: on an
/// emulated vCPU, opening and closing four files was a third of a
/// `Check`'s time in the guest.
#[derive(Debug)]
struct Files {
    meminfo: Kept,
    statm: Kept,
    /// `cpu.stat` and `memory.current` of the programs' cgroup, if any.
    programs: Option<(Kept, Kept)>,
}

impl Files {
    fn new(programs_cgroup: Option<PathBuf>) -> Self {
        Self {
            meminfo: Kept::new(MEMINFO),
            statm: Kept::new("/proc/self/statm"),
            programs: programs_cgroup.map(|dir| {
                (
                    Kept::new(dir.join("cpu.stat")),
                    Kept::new(dir.join("memory.current")),
                )
            }),
        }
    }
}

impl HealthService {
    /// A service reporting when the agent started and began serving, both
    /// as guest uptime in microseconds.
    pub fn new(init_started_us: u64, serving_since_us: u64) -> Self {
        Self {
            init_started_us,
            serving_since_us,
            files: Arc::new(Files::new(None)),
            sandbox_id: SandboxId::default(),
        }
    }

    /// Reports the sandbox id recorded in `sandbox_id`.
    pub fn with_sandbox_id(mut self, sandbox_id: SandboxId) -> Self {
        self.sandbox_id = sandbox_id;
        self
    }

    /// Reports the use of the programs below cgroup `dir`.
    pub fn with_programs_cgroup(mut self, dir: Option<PathBuf>) -> Self {
        self.files = Arc::new(Files::new(dir));
        self
    }

    fn answer(&self) -> CheckResponse {
        let files = &self.files;
        let (memory_total_bytes, memory_available_bytes) = files
            .meminfo
            .read()
            .and_then(|text| parse_meminfo(&text))
            .unwrap_or_default();
        let programs = files.programs.as_ref();
        let programs_cpu_us = programs
            .and_then(|(cpu_stat, _)| cpu_stat.read())
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("usage_usec ")?.trim().parse().ok())
            })
            .unwrap_or(0);
        let programs_memory_bytes = programs
            .and_then(|(_, memory_current)| memory_current.read())
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0);
        let (disk_total_bytes, disk_used_bytes) = disk("/").unwrap_or_default();
        CheckResponse {
            disk_total_bytes,
            disk_used_bytes,
            memory_total_bytes,
            memory_available_bytes,
            programs_cpu_us,
            programs_memory_bytes,
            agent_rss_bytes: agent_rss_bytes(&files.statm).unwrap_or(0),
            agent_version: env!("CARGO_PKG_VERSION").to_owned(),
            init_started_us: self.init_started_us,
            serving_since_us: self.serving_since_us,
            uptime_us: clock::boottime_us(),
            protocol_revision: airlock_proto::PROTOCOL_REVISION,
            sandbox_id: self.sandbox_id.get(),
        }
    }
}

/// The agent's resident memory, from `/proc/self/statm` (its second
/// field, in pages: what `status` shows as VmRSS, without the fifty other
/// lines `status` formats).
fn agent_rss_bytes(statm: &Kept) -> Option<u64> {
    let statm = statm.read()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * rustix::param::page_size() as u64)
}

#[tonic::async_trait]
impl health_server::Health for HealthService {
    async fn check(&self, _: Request<CheckRequest>) -> Result<Response<CheckResponse>, Status> {
        Ok(Response::new(self.answer()))
    }
}

/// The size of the filesystem holding `path` and what is used of it, in
/// bytes (`statvfs`); `None` when it cannot be read.
fn disk(path: &str) -> Option<(u64, u64)> {
    let stats = nix::sys::statvfs::statvfs(path).ok()?;
    let block = stats.fragment_size();
    let total = stats.blocks().saturating_mul(block);
    let free = stats.blocks_free().saturating_mul(block);
    Some((total, total.saturating_sub(free)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answer_reports_version_revision_and_ordered_times() {
        let start = clock::boottime_us();
        let answer = HealthService::new(start, start + 1).answer();
        assert_eq!(answer.agent_version, env!("CARGO_PKG_VERSION"));
        assert_eq!(answer.protocol_revision, airlock_proto::PROTOCOL_REVISION);
        assert_eq!(answer.init_started_us, start);
        assert_eq!(answer.serving_since_us, start + 1);
        assert!(answer.uptime_us >= start);
        assert!(answer.agent_rss_bytes > 0);
        assert!(answer.memory_total_bytes >= answer.memory_available_bytes);
        assert!(answer.disk_total_bytes > 0, "the root is measured");
        assert!(answer.disk_total_bytes >= answer.disk_used_bytes);
        assert_eq!(answer.sandbox_id, "");
    }

    #[test]
    fn answer_reports_the_sandbox_id_once_recorded() {
        let id = SandboxId::default();
        let health = HealthService::new(1, 2).with_sandbox_id(id.clone());
        id.set("sb-42".to_owned());
        assert_eq!(health.answer().sandbox_id, "sb-42");
    }
}
