//! `airlock-agent`: the guest side of Airlock. It runs as PID 1 inside a
//! microVM and serves `airlock.agent.v1` over a virtio-serial port or vsock.
//!
//! Data flow, in start-up order:
//!
//! 1. [`boot`]: `main` calls [`Boot::begin`], which records the boot clock
//!    ([`clock`]), installs the power-off panic hook and mounts `/proc` when
//!    PID 1, and parses the kernel command line ([`cmdline`]).
//! 2. `main` sets up logging, then calls [`run`], which as PID 1 finishes
//!    [`init`] (mounts, kernel modules, the switch into a root image when
//!    the command line names one, hostname) or else becomes a child
//!    subreaper, and starts the tokio runtime.
//! 3. [`reaper`] takes ownership of `waitpid(-1)` before anything spawns.
//! 4. [`server`] binds the [`Listen`] address, which `--listen` or else the
//!    command line's `airlock.channel` picks ([`default_listen`]): the
//!    virtio-serial port `airlock.agent.0` ([`server::serial`]: one host
//!    connection at a time, each begun with the opening of
//!    `airlock_proto::opening`, for as long as the agent runs), vsock, or a
//!    Unix socket for tests. It serves the [`services`] with HTTP/2
//!    keepalives: `Files`, `Health`, `Process` (spawns via the reaper,
//!    streams output through a bounded channel), `Code` (interpreter
//!    contexts: a driver process per context, started as `Process` starts
//!    programs) and `System` (shutdown, the
//!    clock, [`personalize`]: entropy through [`entropy`], clock,
//!    hostname, and the sandbox id that `Health` reports; and [`trust`]:
//!    CA certificates the guest's programs trust). Once a vsock
//!    listener is bound, [`announce`] tells the host that the agent serves,
//!    so the host never dials a guest that is not ready.
//! 5. Every error that reaches a client becomes a `tonic::Status` in
//!    [`error`]. As PID 1 the agent never exits: errors, panics and
//!    `Shutdown` all end in a synced power-off ([`init::poweroff`]).
//!
//! System calls go through `nix` (processes, signals, users, mounts,
//! modules, inotify, clocks, the serial port, the `RNDRESEEDCRNG` ioctl);
//! `rustix` where nix has no safe wrapper (terminals, the capability
//! bounding set, whose capabilities `caps` names) and for everything a new
//! program's child does before `exec` ([`spawn`]: raw system calls, no
//! libc locks or `errno`). `unsafe` lives in two modules only:
//! `spawn::vfork` (the clone, its stack, signal dispositions and `execve`)
//! and [`entropy`] (the ioctl).

pub mod announce;
pub mod boot;
pub mod clock;
pub mod cmdline;
pub mod entropy;
pub mod error;
pub mod init;
pub mod open_files;
pub mod personalize;
pub mod reaper;
pub mod server;
pub mod services;
pub mod small_file;
pub mod spawn;
pub mod trust;

use std::process::ExitCode;
use std::time::Duration;

use airlock_proto::contract::{serial, Channel};
use tokio::sync::watch;

pub use boot::Boot;
pub use error::AgentError;
pub use server::Listen;

use cmdline::Cmdline;
use init::poweroff;
use personalize::SandboxId;
use server::Listener;
use services::{CodeService, HealthService, ProcessService, Services, ShutdownMode, SystemService};

/// How long a stopping (non-PID 1) agent waits for open calls to finish.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// Runs the agent until shutdown. `listen` overrides the default, which
/// the command line's `airlock.channel` picks ([`default_listen`]).
/// Returns only when not PID 1.
pub fn run(boot: Boot, listen: Option<Listen>) -> ExitCode {
    let pid1 = boot.pid1;
    let result = start(boot, listen);
    match (result, pid1) {
        (Ok(()), false) => ExitCode::SUCCESS,
        (Ok(()), true) => poweroff::power_off_or_exit("agent stopped serving"),
        (Err(e), pid1) => {
            tracing::error!(error = %airlock_report::chain(&e), "agent failed");
            if pid1 {
                poweroff::power_off_or_exit("agent failed");
            }
            ExitCode::FAILURE
        }
    }
}

fn start(boot: Boot, listen: Option<Listen>) -> Result<(), AgentError> {
    if let Err(e) = &boot.proc_mount {
        tracing::warn!(error = %airlock_report::chain(e), "/proc unavailable");
    }
    let cmdline = boot.cmdline?;
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        pid1 = boot.pid1,
        "airlock agent starting"
    );
    open_files::raise(boot.pid1);
    if boot.pid1 {
        init::setup(&cmdline)?;
    } else {
        init::adopt_orphans();
    }
    let listen = listen.unwrap_or_else(|| default_listen(&cmdline));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(AgentError::Runtime)?;
    let served = runtime.block_on(serve(boot.pid1, boot.init_started_us, listen));
    runtime.shutdown_timeout(STOP_GRACE);
    served
}

/// Where to serve when `--listen` does not say: the virtio-serial port
/// [`serial::AGENT_PORT_NAME`] for `airlock.channel=serial`, else vsock on
/// `airlock.port`.
pub fn default_listen(cmdline: &Cmdline) -> Listen {
    match cmdline.channel {
        Channel::Serial => Listen::Serial(serial::AGENT_PORT_NAME.to_owned()),
        Channel::Vsock => Listen::Vsock(cmdline.port),
    }
}

async fn serve(pid1: bool, init_started_us: u64, listen: Listen) -> Result<(), AgentError> {
    let reaper = reaper::Reaper::start()?;
    let listener = Listener::bind(&listen).await?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let mode = if pid1 {
        ShutdownMode::PowerOff
    } else {
        ShutdownMode::Stop(stop_tx)
    };
    let serving_since_us = clock::boottime_us();
    let process = ProcessService::new(reaper.clone());
    let sandbox_id = SandboxId::default();
    let router = services::router(Services {
        code: CodeService::new(reaper.clone(), process.cgroups()),
        files: services::FilesService::new(),
        network: services::NetworkService::new(pid1),
        health: HealthService::new(init_started_us, serving_since_us)
            .with_programs_cgroup(process.cgroup_parent())
            .with_sandbox_id(sandbox_id.clone()),
        process,
        system: SystemService::new(mode).with_sandbox_id(sandbox_id),
    });
    tracing::info!(%listen, "serving");
    announce::spawn(&listen);

    tokio::select! {
        served = listener.serve(router, stopped(stop_rx.clone())) => served?,
        () = async { stopped(stop_rx).await; tokio::time::sleep(STOP_GRACE).await } => {
            tracing::warn!("calls still open after shutdown; stopping anyway");
        }
    }
    tracing::info!("server stopped");
    Ok(())
}

/// Completes once the stop flag is set (never, if its sender is gone).
async fn stopped(mut stop: watch::Receiver<bool>) {
    if stop.wait_for(|stop| *stop).await.is_err() {
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_channel_picks_the_default_listen_address() {
        let serial = Cmdline::parse("airlock.channel=serial airlock.port=7").unwrap();
        assert_eq!(
            default_listen(&serial),
            Listen::Serial("airlock.agent.0".to_owned())
        );
        let vsock = Cmdline::parse("airlock.channel=vsock airlock.port=7").unwrap();
        assert_eq!(default_listen(&vsock), Listen::Vsock(7));
        let unsaid = Cmdline::parse("airlock.port=7").unwrap();
        assert_eq!(default_listen(&unsaid), Listen::Vsock(7));
    }
}
