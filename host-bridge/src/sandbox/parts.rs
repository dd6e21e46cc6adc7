//! The one constructor of a [`Sandbox`]: every way of starting one (a
//! cold boot, a clone, a restore, a fork's child, an adoption) ends in
//! [`Sandbox::from_parts`] with the VM it made whole.

use std::sync::Arc;

use tonic::transport::Channel;

use super::builder::SandboxBuilder;
use super::network::SandboxNetwork;
use super::started::{BootTimings, Origin};
use super::Sandbox;
use crate::features::AgentFeatures;
use crate::lifecycle::channel::AgentChannel;
use crate::lifecycle::vm::VmShared;
use crate::lifecycle::watchdog;
use crate::state_dir::StateDir;
use crate::workspace::Workspace;
use crate::Accel;
use airlock_gateway::audit::AuditLog;

/// What a [`Sandbox`] is made of, besides the builder it was started with.
pub(super) struct SandboxParts {
    /// The VM, its clock and its policies set (lifetime ceiling, adoption
    /// record, saved record).
    pub vm: Arc<VmShared>,
    /// The agent's gRPC channel.
    pub channel: Channel,
    /// The workspace's lock, held until the VM ends.
    pub workspace: Option<Workspace>,
    pub id: String,
    pub timings: BootTimings,
    pub origin: Origin,
    pub accel: Accel,
    pub agent_version: String,
    pub features: AgentFeatures,
    /// The guest's network, when it has one.
    pub network: Option<SandboxNetwork>,
    pub dir: StateDir,
}

impl Sandbox {
    /// Makes the sandbox of a VM that is whole: the VM holds its
    /// workspace, a watchdog enforces `builder`'s policy, and every call
    /// goes through a channel that counts it.
    pub(super) fn from_parts(builder: SandboxBuilder, parts: SandboxParts) -> Sandbox {
        let SandboxParts {
            vm,
            channel,
            workspace,
            id,
            timings,
            origin,
            accel,
            agent_version,
            features,
            network,
            dir,
        } = parts;
        vm.hold_workspace(workspace);
        let watchdog = watchdog::spawn(&vm, builder.watchdog_policy());
        let env = default_env(&builder.env, network.as_ref().map(|n| n.env.as_slice()));
        Sandbox {
            channel: AgentChannel::new(channel, Arc::clone(&vm), builder.paused_calls),
            vm,
            watchdog,
            id,
            timings,
            origin,
            accel,
            agent_version,
            features,
            default_limits: builder.default_limits,
            default_user: builder.default_user.clone(),
            default_cwd: builder.default_cwd.clone(),
            env,
            defaults_made: Arc::default(),
            ingress_meter: Arc::default(),
            ingress_audit: Arc::new(ingress_audit(
                builder.adoptable && network.is_none(),
                dir.path(),
            )),
            network,
            builder,
            state_dir: dir,
        }
    }
}

impl SandboxBuilder {
    /// What the watchdog enforces (the lifetime ceiling is the VM's).
    fn watchdog_policy(&self) -> watchdog::Policy {
        watchdog::Policy {
            idle: self.idle,
            console_log_budget: self.console_log_budget,
            unresponsive_after: self.unresponsive_after,
        }
    }
}

/// What every program gets under its own variables: the builder's
/// environment first (it wins), then the network's.
fn default_env(
    builder: &[(String, String)],
    network: Option<&[(String, String)]>,
) -> Arc<[(String, String)]> {
    builder
        .iter()
        .chain(network.unwrap_or_default())
        .cloned()
        .collect()
}

/// The audit log of a sandbox without a network (its ingress records):
/// kept in its state directory `dir` too when `on_disk` (an adoptable
/// sandbox's), as a network's is.
fn ingress_audit(on_disk: bool, dir: &std::path::Path) -> AuditLog {
    match on_disk {
        true => AuditLog::kept_in(dir),
        false => AuditLog::default(),
    }
}
