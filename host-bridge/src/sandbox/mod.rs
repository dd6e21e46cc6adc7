//! [`Sandbox`]: one microVM with the agent running as its PID 1.
//!
//! [`SandboxBuilder::start`] locks the workspace if there is one (see
//! `workspace`), creates the private state directory, starts the VMM (see
//! `vmm`) with the root image and the workspace as disks, then waits for the
//! agent to announce itself and connects to it over hybrid vsock (see
//! `connect` and `transport`). After that, [`Sandbox::exec`] runs programs. Dropping the
//! sandbox kills the VM and removes its state directory;
//! [`Sandbox::shutdown`] powers it off gracefully first.
//!
//! Once running, the VM belongs to `lifecycle`: a watchdog enforces the
//! lifetime ceiling and the idle timeout, [`Sandbox::pause`] and
//! [`Sandbox::resume`] park it, and every call goes through a channel that
//! counts it and holds it back while the VM is paused.
//!
//! A start runs in a `sandbox_start` span (`sandbox_restore` for a restore,
//! `fork_child` for a fork's child), with a span for each of its parts:
//! `open_workspace`, `collect_orphans`, `make_template`, `launch_vmm`,
//! `restore_template` (a clone's state loaded; `restore_saved` for a saved
//! sandbox or a fork), `connect_agent` (`wait_for_agent`, which on a cold
//! boot is the guest's boot, then `dial_agent`), `personalize`,
//! `install_ca` and `enable_network`.
//!
//! - `builder`: [`SandboxBuilder`], its checks, the kernel command line and
//!   the disks it describes.
//! - `boot`: [`SandboxBuilder::start`], from the state directory to a
//!   running, watched VM.
//! - `connect`: waiting for the agent's announcement, then dialling it.
//! - `launched`: a VMM that runs and an agent that answered, what every
//!   way of starting has before it becomes a sandbox.
//! - `parts`: [`Sandbox::from_parts`], the one constructor every way of
//!   starting (boot, clone, restore, fork, adoption) ends in.
//! - `started`: [`Origin`] and [`BootTimings`], how a sandbox came to run.
//! - `dial`: [`Sandbox::connect_port`], connections into the guest
//!   (ingress).
//! - `adopt`: taking over a sandbox whose owner died or detached it, and
//!   detaching one (see [`crate::adopt`]).
//! - `workspace`: [`SandboxBuilder::create_workspace`], and the group a
//!   workspace the library creates is given to.
//! - this file: [`Sandbox`], the handle on a running VM.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::state_dir::StateDir;
use airlock_proto::v1::health_client::HealthClient;
use airlock_proto::v1::process_client::ProcessClient;
use airlock_proto::v1::system_client::SystemClient;
use airlock_proto::v1::{
    CheckRequest, CheckResponse, ConnectRequest, ListRequest, ShutdownRequest,
};
use airlock_proto::Feature;
use tokio::task::JoinHandle;

use crate::code::{Cell, CellExecution, ContextDefaults, Contexts, DefaultContexts};
use crate::error::{Error, Result};
use crate::exec::{Command, Execution, Limits, ProcessHandle, ProcessInfo, Target};
use crate::features::AgentFeatures;
use crate::fs::Files;
use crate::lifecycle::channel::AgentChannel;
use crate::lifecycle::vm::VmShared;
use crate::lifecycle::{EndReason, SandboxState, SandboxUsage};
use crate::transport::{self, AgentTransport, CapMessages};
use crate::Accel;
use network::SandboxNetwork;

mod adopt;
mod boot;
mod builder;
mod clone;
mod connect;
mod dial;
mod error;
mod fork;
mod launched;
mod named;
mod network;
mod parts;
mod restore;
mod snapshot;
mod started;
mod trust;
mod workspace;

pub use builder::{
    GuestChannel, SandboxBuilder, DEFAULT_CONSOLE_LOG_BUDGET, DEFAULT_MAX_LIFETIME,
    DEFAULT_UNRESPONSIVE_AFTER,
};
pub(crate) use clone::WARM_UP as TEMPLATE_WARM_UP;
pub use error::{ConfigError, NamedTemplateError};
pub use snapshot::TakenSnapshot;
pub use started::{BootTimings, Origin};

/// A running microVM with the Airlock agent as PID 1.
///
/// Dropping it kills the VM and removes its state directory.
#[derive(Debug)]
pub struct Sandbox {
    // `Drop` kills the VM; then the fields go, the directory among the last.
    vm: Arc<VmShared>,
    channel: AgentChannel,
    watchdog: JoinHandle<()>,
    id: String,
    timings: BootTimings,
    origin: Origin,
    accel: Accel,
    agent_version: String,
    features: AgentFeatures,
    default_limits: Limits,
    default_user: Option<String>,
    default_cwd: Option<String>,
    /// What every program and context gets under its own variables: the
    /// builder's environment over the network's.
    env: Arc<[(String, String)]>,
    /// The default contexts made with `env`.
    defaults_made: Arc<DefaultContexts>,
    /// The guest's network, when the builder gave it one.
    network: Option<SandboxNetwork>,
    /// Where ingress decisions go when there is no network (with one,
    /// they go to its audit log, beside the egress records).
    ingress_audit: Arc<airlock_gateway::audit::AuditLog>,
    /// The bytes of connections into the guest's ports.
    ingress_meter: Arc<airlock_gateway::ByteMeter>,
    /// What it was started with: a fork's children get the same policies.
    builder: SandboxBuilder,
    state_dir: StateDir,
}

impl Sandbox {
    /// A builder with the default configuration.
    pub fn builder() -> SandboxBuilder {
        SandboxBuilder::default()
    }

    /// Starts `command` (by value or by reference) and returns once the
    /// guest has started it; the returned [`Execution`] streams its output
    /// and controls it.
    ///
    /// A program that cannot start (not found, not executable, bad working
    /// directory, unknown user) is an [`Error::Agent`] whose
    /// [`Error::agent_code`] tells why.
    pub async fn exec(&self, command: impl std::borrow::Borrow<Command>) -> Result<Execution> {
        let command = command.borrow().with_defaults(
            &self.default_limits,
            self.default_user.as_deref(),
            self.default_cwd.as_deref(),
            &self.env,
        );
        self.features.require_all(command.required_feature())?;
        let events = ProcessClient::new(self.channel.clone())
            .capped()
            .start(command.to_request())
            .await
            .map_err(|status| Error::agent("Process.Start", status))?
            .into_inner();
        Execution::begin(
            "Process.Start",
            self.channel.clone(),
            events,
            self.features,
            Some(Arc::clone(&self.vm)),
        )
        .await
    }

    /// Attaches to a program started earlier (by pid or tag), running or
    /// recently finished: replays the output the agent still holds (an
    /// [`Event::Dropped`](crate::Event::Dropped) first if some was lost),
    /// then follows it live. Takes over from any client attached before.
    pub async fn attach(&self, target: impl Into<Target>) -> Result<Execution> {
        self.attach_from(target, 0).await
    }

    /// Like [`attach`](Sandbox::attach), replaying from output offset
    /// `offset` on: pass [`Execution::offset`] to resume a broken stream
    /// without gaps or repeats.
    pub async fn attach_from(&self, target: impl Into<Target>, offset: u64) -> Result<Execution> {
        self.features.require(Feature::Attach)?;
        let events = ProcessClient::new(self.channel.clone())
            .capped()
            .connect(ConnectRequest {
                process: target.into().selector(),
                from_offset: offset,
            })
            .await
            .map_err(|status| Error::agent("Process.Connect", status))?
            .into_inner();
        Execution::begin(
            "Process.Connect",
            self.channel.clone(),
            events,
            self.features,
            Some(Arc::clone(&self.vm)),
        )
        .await
    }

    /// The controls (stdin, signals) of a program by pid or tag, without
    /// attaching to its output.
    pub fn process(&self, target: impl Into<Target>) -> ProcessHandle {
        ProcessHandle::new(self.channel.clone(), target.into(), self.features)
    }

    /// Running and recently finished programs, oldest first.
    pub async fn list(&self) -> Result<Vec<ProcessInfo>> {
        self.features.require(Feature::List)?;
        let answer = ProcessClient::new(self.channel.clone())
            .capped()
            .list(ListRequest {})
            .await
            .map_err(|status| Error::agent("Process.List", status))?
            .into_inner();
        answer
            .processes
            .into_iter()
            .map(ProcessInfo::from_proto)
            .collect()
    }

    /// The guest's filesystem: read, write, list, watch, and move whole
    /// directories (needs protocol revision 3); track what a run changed
    /// (revision 7).
    pub fn fs(&self) -> Files {
        Files::new(self.channel.clone(), self.features)
    }

    /// Runs a cell of code in a persistent context (the default Python one
    /// unless the [`Cell`] says otherwise) and streams what it produces;
    /// [`CellExecution::output`] collects its output, value, rich outputs
    /// and error. Needs protocol revision 7 and, in the guest, `python3`.
    pub async fn run_code(&self, cell: impl Into<Cell>) -> Result<CellExecution> {
        self.contexts().run(cell).await
    }

    /// The sandbox's interpreter contexts: create, list, interrupt,
    /// restart, delete.
    pub fn contexts(&self) -> Contexts {
        Contexts::new(
            self.channel.clone(),
            self.features,
            Arc::clone(&self.vm),
            ContextDefaults {
                env: Arc::clone(&self.env),
                user: self.default_user.clone(),
                cwd: self.default_cwd.clone(),
            },
            Arc::clone(&self.defaults_made),
        )
    }

    /// Asks the agent for its health report.
    pub async fn health(&self) -> Result<CheckResponse> {
        Ok(HealthClient::new(self.channel.clone())
            .capped()
            .check(CheckRequest {})
            .await
            .map_err(|status| Error::agent("Health.Check", status))?
            .into_inner())
    }

    /// What the agent can do.
    pub(crate) fn features(&self) -> AgentFeatures {
        self.features
    }

    /// Makes the guest its own machine again, as at its start (fresh
    /// entropy, the host's clock, its hostname and id): a pool's handout,
    /// which also proves the agent answers. An agent without
    /// `System.Personalize`, or on the process backend, is asked for its
    /// `Health` instead.
    pub(crate) async fn personalize_again(&self) -> Result<()> {
        let personalizes = matches!(self.builder.backend, crate::vmm::BackendKind::Qemu)
            && self.features.has(Feature::Personalize);
        if !personalizes {
            return self.health().await.map(drop);
        }
        let request = boot::personalize_request(&self.id)?;
        let answer = SystemClient::new(self.channel.clone())
            .capped()
            .personalize(request)
            .await
            .map_err(|status| Error::agent("System.Personalize", status))?
            .into_inner();
        boot::check_personalized(&answer);
        Ok(())
    }

    /// Where the start-up time went.
    pub fn boot_timings(&self) -> BootTimings {
        self.timings
    }

    /// How this sandbox came to run: a cold boot or a clone of a template
    /// (and whether a template that was asked for could not be used).
    pub fn origin(&self) -> &Origin {
        &self.origin
    }

    /// The accelerator the VM runs with.
    pub fn accel(&self) -> Accel {
        self.accel
    }

    /// The agent's version.
    pub fn agent_version(&self) -> &str {
        &self.agent_version
    }

    /// The private state directory (console log, sockets).
    pub fn state_dir(&self) -> &std::path::Path {
        self.state_dir.path()
    }

    /// Opens a raw stream to a guest vsock `port` that a program in the
    /// guest listens on (the agent's own port is taken by gRPC).
    pub async fn connect_vsock(&self, port: u32) -> Result<tokio::net::UnixStream> {
        let AgentTransport::HybridVsock { uds, .. } = self.vm.transport() else {
            return Err(ConfigError::NoVsockPorts { port }.into());
        };
        transport::connect_hybrid(uds, port)
            .await
            .map_err(|e| Error::Protocol(format!("vsock port {port}: {}", crate::error_chain(&e))))
    }

    /// The guest console so far (kernel and agent logs), at most `max_bytes`
    /// from the end.
    pub fn console_tail(&self, max_bytes: usize) -> String {
        self.vm.console_tail(max_bytes)
    }

    /// The sandbox's name: its state directory's, unique on the host.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Running, paused, or ended (and why).
    pub fn state(&self) -> SandboxState {
        self.vm.state()
    }

    /// Why the sandbox ended, once it has.
    pub fn end_reason(&self) -> Option<EndReason> {
        self.vm.end_reason()
    }

    /// Wall time, running (unpaused) time and guest CPU time so far.
    pub fn usage(&self) -> SandboxUsage {
        self.vm.usage()
    }

    /// When the sandbox's life began, on the wall clock: its start (an
    /// adopted sandbox's original start; a pooled sandbox's handout).
    pub fn started_at(&self) -> SystemTime {
        self.vm.started_at()
    }

    /// When the lifetime ceiling will end the sandbox, if it has one: its
    /// start plus the ceiling, plus any time it spent saved to disk (which
    /// the ceiling leaves out, so this moves later while it is on disk).
    pub fn ends_at(&self) -> Option<SystemTime> {
        self.vm.ends_at()
    }

    /// Sets the lifetime ceiling (see [`SandboxBuilder::max_lifetime`]),
    /// still counted from the sandbox's start: a longer one extends its
    /// life, `None` removes the ceiling, and one already passed ends the
    /// sandbox now ([`EndReason::LifetimeExceeded`]). An adoptable
    /// sandbox's record keeps the new ceiling.
    pub fn set_max_lifetime(&self, limit: Option<Duration>) {
        self.vm.set_max_lifetime(limit);
    }

    /// Moves the end of the sandbox's life to `from_now` from now (what an
    /// API's "set timeout" means), or removes the ceiling with `None`:
    /// [`set_max_lifetime`](Sandbox::set_max_lifetime) with the sandbox's
    /// age so far added, so time saved to disk still does not count.
    pub fn set_timeout(&self, from_now: Option<Duration>) {
        self.set_max_lifetime(from_now.map(|after| self.vm.age().saturating_add(after)));
    }

    /// Whether the sandbox keeps an adoption record, so that it can be
    /// [detached](Sandbox::detach) or outlive this process (see
    /// [`SandboxBuilder::adoptable`]). A pool's member becomes adoptable at
    /// its handout.
    pub fn is_adoptable(&self) -> bool {
        self.vm.adoption().is_some_and(|keeper| keeper.is_active())
    }

    /// Starts the sandbox's wall clock and lifetime again (a pool's
    /// handout; see [`Sandboxes`](crate::Sandboxes#the-warm-pool)).
    pub(crate) fn restart_clock(&self) {
        self.vm.restart_clock();
    }

    /// Freezes the VM (QEMU's process, with SIGSTOP): the guest uses no CPU and its
    /// memory stays as it is. Calls meanwhile resume it, wait or fail, as
    /// [`SandboxBuilder::paused_calls`] says. Pausing twice does nothing.
    pub async fn pause(&self) -> Result<()> {
        self.vm.pause().await
    }

    /// Saves the whole sandbox to disk (its memory with every program in
    /// it, `/tmp` and the root's writable layer; a workspace disk is
    /// flushed) and ends its VM process, which frees its memory. The
    /// sandbox is then [`SandboxState::OnDisk`]: [`resume`](Sandbox::resume),
    /// or a call as [`SandboxBuilder::paused_calls`] says, restores it into
    /// a new VM process, and programs go on where they were. Open output
    /// streams re-attach from their offsets, without a gap; any other call
    /// open at the save (an upload, say) fails with
    /// [`Error::SavedDuringCall`], having changed nothing half-way.
    ///
    /// Dropping the handle of a sandbox on disk leaves it there: a
    /// [`SandboxBuilder::restore`] by id (in this process or another, also
    /// after a reboot) brings it back. Any other end removes its files.
    ///
    /// Each save is a new snapshot generation (0600, in
    /// [`SandboxBuilder::saved_dir`]), written under a temporary name and
    /// renamed when complete; the newest two are kept, and a restore takes
    /// the newest that passes its checks (see [`last_restore`](Sandbox::last_restore)).
    /// Needs QEMU and the serial channel (the default).
    pub async fn pause_to_disk(&self) -> Result<()> {
        self.vm.pause_to_disk().await
    }

    /// What the last restore from disk loaded, and which newer snapshot
    /// generations it refused and why.
    pub fn last_restore(&self) -> Option<crate::saved::Restored> {
        self.vm.last_restore()
    }

    /// Restarts the VM's CPUs and sets the guest's clock to the host's, so
    /// timestamps and certificate checks are right after the pause.
    /// A sandbox on disk is restored first. Resuming a running sandbox does
    /// nothing.
    pub async fn resume(&self) -> Result<()> {
        self.vm.resume().await
    }

    /// Kills the VM now; the sandbox ends as [`EndReason::Stopped`] and
    /// every open call on it fails. The state directory goes when the
    /// sandbox is dropped.
    pub fn kill(&self) {
        self.vm.kill(EndReason::Stopped);
    }

    /// Ends the sandbox as a drop does: one on disk stays there (for a
    /// restore by id), any other is killed.
    pub(crate) fn release(&self) {
        self.vm.keep_if_on_disk();
        self.vm.kill(EndReason::Stopped);
    }

    /// Holds a manager's slot until the VM ends.
    pub(crate) fn hold_slot(&self, slot: tokio::sync::OwnedSemaphorePermit) {
        self.vm.hold_slot(slot);
    }

    /// Powers the VM off gracefully: the agent syncs and powers off; after
    /// `grace` the VM is killed regardless. The state directory is removed.
    pub async fn shutdown(self, grace: Duration) -> Result<()> {
        self.power_off(grace).await
    }

    /// [`shutdown`](Sandbox::shutdown) through a shared handle (the manager
    /// stops sandboxes that callers still hold); the state directory goes
    /// when the last handle is dropped.
    #[tracing::instrument(skip_all)]
    pub(crate) async fn power_off(&self, grace: Duration) -> Result<()> {
        if let Some(reason) = self.vm.end_reason() {
            tracing::debug!(%reason, "already ended");
            return Ok(());
        }
        // A paused guest cannot power itself off.
        if self.vm.state().is_paused() {
            self.vm.resume().await?;
        }
        self.vm.begin_stop();
        let asked = tokio::time::timeout(
            grace,
            SystemClient::new(self.channel.clone())
                .capped()
                .shutdown(ShutdownRequest {}),
        )
        .await;
        if let Ok(Err(status)) = &asked {
            tracing::warn!(%status, "agent refused to shut down");
        }
        if self.vm.wait_exit(grace).await {
            tracing::debug!("VM powered off");
        } else {
            tracing::warn!(
                ?grace,
                "VM did not power off in time; asking the VMM to quit"
            );
            self.vm.quit().await;
            self.vm.wait_exit(Duration::from_secs(1)).await;
        }
        self.vm.kill(EndReason::Stopped);
        Ok(())
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.watchdog.abort();
        // A sandbox on disk stays there, for a restore by id later.
        self.vm.keep_if_on_disk();
        self.vm.kill(EndReason::Stopped);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn handles_are_send_and_sync() {
        assert_send_sync::<Sandbox>();
        assert_send_sync::<Execution>();
        assert_send_sync::<ProcessHandle>();
        assert_send_sync::<SandboxBuilder>();
    }

    #[test]
    fn missing_kernel_names_the_setup_command() {
        let err = Sandbox::builder()
            .kernel("/nonexistent/vmlinuz")
            .validate()
            .unwrap_err()
            .to_string();
        assert!(err.contains("/nonexistent/vmlinuz"), "{err}");
        assert!(err.contains("scripts/setup"), "{err}");
    }

    #[test]
    fn silly_sizes_are_refused() {
        assert!(Sandbox::builder().memory_mib(8).validate().is_err());
        assert!(Sandbox::builder().vcpus(0).validate().is_err());
    }

    #[test]
    fn cmdline_carries_the_agent_port_and_extra_args() {
        let line = Sandbox::builder()
            .kernel_arg("airlock.log=debug")
            .kernel_cmdline(Accel::Kvm);
        assert!(line.contains("airlock.port=1024"), "{line}");
        assert!(line.contains(" reboot=t "), "{line}");
        assert!(line.ends_with("airlock.log=debug"), "{line}");
        assert!(!line.contains("tsc_early_khz"), "{line}");
    }

    #[test]
    fn image_and_workspace_are_named_on_the_command_line() {
        let plain = Sandbox::builder().kernel_cmdline(Accel::Kvm);
        assert!(!plain.contains("airlock.root"), "{plain}");
        let builder = Sandbox::builder().image("/i/rootfs.ext4");
        let line = builder.kernel_cmdline(Accel::Kvm);
        assert!(line.contains(" airlock.root=/dev/vda"), "{line}");
        assert!(!line.contains("airlock.workspace"), "{line}");
        let builder = builder.workspace("/w/ws.img");
        let line = builder.kernel_cmdline(Accel::Kvm);
        assert!(line.contains(" airlock.root=/dev/vda"), "{line}");
        assert!(line.contains(" airlock.workspace=/dev/vdb"), "{line}");
        let disks = builder.disks();
        assert_eq!(disks.len(), 2);
        assert!(disks[0].read_only && !disks[1].read_only);
    }

    #[test]
    fn a_workspace_needs_an_image() {
        let err = Sandbox::builder()
            .kernel("/bin/sh")
            .initramfs("/bin/sh")
            .workspace("/tmp/ws")
            .validate()
            .unwrap_err()
            .to_string();
        assert!(err.contains("workspace needs a root image"), "{err}");
    }

    #[test]
    fn tcg_guests_get_the_host_tsc_rate_and_trust_it() {
        let line = Sandbox::builder().kernel_cmdline(Accel::Tcg);
        assert!(line.contains(" tsc=reliable"), "{line}");
        let kvm = Sandbox::builder().kernel_cmdline(Accel::Kvm);
        assert!(!kvm.contains("tsc="), "{kvm}");
        if crate::accel::host_tsc_khz().is_some() {
            assert!(line.contains(" tsc_early_khz="), "{line}");
        }
    }
}
