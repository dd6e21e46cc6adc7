//! [`Launched`]: a VMM that runs and an agent that answered, what every
//! way of starting (a cold boot, a clone, a restore, a fork's child, an
//! adoption) has once `connect` reached the agent.

use std::time::Instant;

use airlock_proto::v1::CheckResponse;
use tonic::transport::Channel;

use super::connect::{connect_agent, Deadline};
use crate::error::Result;
use crate::state_dir::StateDir;
use crate::transport::Quiesce;
use crate::vmm::Backend;

/// A VMM that runs and an agent that answered.
pub(super) struct Launched {
    /// When the VMM processes were running.
    pub vmm_started: Instant,
    pub dir: StateDir,
    pub vmm: Backend,
    pub channel: Channel,
    pub health: CheckResponse,
    /// When the Health answer arrived.
    pub answered: Instant,
    pub quiesce: Quiesce,
}

impl Launched {
    /// Waits for the agent of a VMM that runs (started at `vmm_started`).
    pub(super) async fn connect(
        dir: StateDir,
        mut vmm: Backend,
        vmm_started: Instant,
        deadline: Deadline,
    ) -> Result<Self> {
        let reached = connect_agent(&mut vmm, deadline).await?;
        Ok(Launched {
            vmm_started,
            dir,
            vmm,
            channel: reached.channel,
            health: reached.health,
            answered: reached.answered,
            quiesce: reached.quiesce,
        })
    }
}
