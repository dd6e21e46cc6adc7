//! How a sandbox came to run ([`Origin`]) and where its start-up time
//! went ([`BootTimings`]).

use std::time::{Duration, Instant};

use airlock_proto::v1::CheckResponse;

/// How a sandbox came to run.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Origin {
    /// Booted from the kernel.
    Cold,
    /// Restored from the template `key`; `built` when this start made it.
    Clone { key: String, built: bool },
    /// A template was asked for, but this start booted cold instead.
    ColdFallback { reason: String },
    /// Restored from its own snapshot generation `generation` (after the
    /// process that saved it ended).
    Restored { generation: u64 },
    /// Forked from the running sandbox `parent`.
    Fork { parent: String },
    /// A clone of the snapshot `id` ([`SandboxBuilder::snapshot`](crate::SandboxBuilder::snapshot)).
    Snapshot { id: String },
    /// Taken over, still running, from an owner that died or detached it
    /// ([`SandboxBuilder::adopt`](crate::SandboxBuilder::adopt)).
    Adopted,
}

/// Where a sandbox's start-up time went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BootTimings {
    /// Host: from `start()` until the VMM processes were running.
    pub vmm_started: Duration,
    /// Of a VM booted by this start (`Origin::Cold` and
    /// `Origin::ColdFallback`), the time from `start()` until the guest's
    /// clock began: the VMM's start, its firmware, and the kernel's set-up
    /// and decompression before it keeps time. It is what the host saw
    /// until the first answer less what the guest's clock counted, so it
    /// also holds that answer's way back to the host (a fraction of a
    /// millisecond). `None` for a restored VM, whose clock is its
    /// snapshot's.
    pub before_guest_clock: Option<Duration>,
    /// Guest: kernel boot until the agent (PID 1) started (a clone reports
    /// its template's).
    pub kernel_to_init: Duration,
    /// Guest: agent start (mounts, modules) until it served gRPC.
    pub init_to_serving: Duration,
    /// Guest: from serving gRPC until it answered the host's first Health
    /// (the host's connection, its opening and HTTP/2's set-up included),
    /// for a VM booted by this start; `None` for a restored VM.
    pub serving_to_answer: Option<Duration>,
    /// Host: from `start()` until the agent's first Health answer arrived.
    pub answered: Duration,
    /// Host: from `start()` until the sandbox was ready (after the answer,
    /// the guest's identity, entropy and clock, and its network if any).
    pub ready: Duration,
}

impl BootTimings {
    /// The timings of a start that began at `begin`, whose VMM processes
    /// ran at `vmm_started` (`None`: they ran before this start, as an
    /// adopted sandbox's) and whose agent answered `health` at `answered`;
    /// `booted_here` when this start booted the guest's kernel. Measured
    /// now: `ready` is the time since `begin`.
    pub(super) fn measure(
        begin: Instant,
        vmm_started: Option<Instant>,
        answered: Instant,
        health: &CheckResponse,
        booted_here: bool,
    ) -> Self {
        let answered = answered.saturating_duration_since(begin);
        BootTimings {
            vmm_started: vmm_started
                .map_or(Duration::ZERO, |at| at.saturating_duration_since(begin)),
            before_guest_clock: booted_here
                .then(|| answered.saturating_sub(Duration::from_micros(health.uptime_us))),
            kernel_to_init: Duration::from_micros(health.init_started_us),
            init_to_serving: Duration::from_micros(
                health
                    .serving_since_us
                    .saturating_sub(health.init_started_us),
            ),
            serving_to_answer: booted_here.then(|| {
                Duration::from_micros(health.uptime_us.saturating_sub(health.serving_since_us))
            }),
            answered,
            ready: begin.elapsed(),
        }
    }
}
