//! `airlock.agent.v1.Health`: identity and timings, answered without ever
//! touching user work.

use airlock_proto::v1::{health_server, CheckRequest, CheckResponse};
use tonic::{Request, Response, Status};

use crate::clock;

/// The Health service.
#[derive(Debug, Clone)]
pub struct HealthService {
    init_started_us: u64,
    serving_since_us: u64,
}

impl HealthService {
    /// A service reporting when the agent started and began serving, both
    /// as guest uptime in microseconds.
    pub fn new(init_started_us: u64, serving_since_us: u64) -> Self {
        Self {
            init_started_us,
            serving_since_us,
        }
    }

    fn answer(&self) -> CheckResponse {
        CheckResponse {
            agent_version: env!("CARGO_PKG_VERSION").to_owned(),
            init_started_us: self.init_started_us,
            serving_since_us: self.serving_since_us,
            uptime_us: clock::boottime_us(),
            protocol_revision: airlock_proto::PROTOCOL_REVISION,
        }
    }
}

#[tonic::async_trait]
impl health_server::Health for HealthService {
    async fn check(&self, _: Request<CheckRequest>) -> Result<Response<CheckResponse>, Status> {
        Ok(Response::new(self.answer()))
    }
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
    }
}
