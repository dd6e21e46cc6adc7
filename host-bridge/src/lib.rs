//! Airlock's host library: run untrusted code in disposable microVMs.
//!
//! A [`Sandbox`] is one QEMU `-M microvm` guest whose PID 1 is the Airlock
//! agent. Data flows like this:
//!
//! ```text
//! Sandbox::exec ──gRPC (tonic, HTTP/2)──> transport ──hybrid vsock (Unix socket)──>
//!     vhost-device-vsock ──virtio-vsock──> guest kernel ──> airlock-agent (PID 1) ──> program
//! ```
//!
//! Modules:
//! - `sandbox`: the builder, boot sequence, exec and teardown.
//! - [`fs`]: [`Files`] from [`Sandbox::fs`]: streamed reads and atomic writes,
//!   metadata and tree operations, watch, directories as tar streams, and
//!   what a run changed ([`fs::ChangeTracker`]).
//! - [`code`]: [`Sandbox::run_code`] and [`Contexts`]: cells in persistent
//!   Python or bash contexts, with values, rich outputs and errors.
//! - `exec`: [`Command`], [`Execution`] (a running program's events and controls),
//!   [`ProcessHandle`] (stdin and signals by pid or tag), [`Output`], [`ProcessInfo`].
//! - `vmm`: the VMM seam (`Backend`): QEMU with vhost-device-vsock (and QMP), or
//!   the agent as a plain process for tests of the lifecycle.
//! - `transport`: how the host reaches the agent (`AgentTransport`: hybrid vsock
//!   or a Unix socket), the hybrid-vsock handshake, and the gRPC channel.
//! - `accel`: choosing KVM or TCG.
//! - `artifacts` and `state_dir`: where kernels, images and per-VM state live;
//!   each state directory records its owner process and VMM processes.
//! - [`gc`]: finding sandboxes whose owner died and ending them (`airlock gc`).
//! - [`adopt`]: sandboxes that outlive their owner: the adoption record,
//!   the orphans waiting, and the checks an adoption makes
//!   ([`SandboxBuilder::adopt`]).
//! - [`images`] and [`artifacts`]: the image store and the Airlock home,
//!   re-exported from the `airlock-images` crate, which `airlock-rootfs`
//!   shares without depending on this library.
//! - `manager`: [`Sandboxes`], many sandboxes under one maximum, with a warm
//!   pool of frozen ones to hand out.
//! - `workspace`: the persistent, exclusively locked disk behind `.workspace()`
//!   (and [`workspace::remove`]).
//! - [`template`]: snapshots of booted guests that starts clone, and named
//!   templates: a [`template::TemplateSpec`] (read from a Dockerfile subset
//!   or built in code) built by [`template::build()`] into an environment whose
//!   `START` program is already running in every sandbox
//!   ([`SandboxBuilder::template`]).
//! - [`network`]: the `airlock-gateway` crate, which decides and carries
//!   every connection and DNS query of a sandbox with a network; `sandbox`
//!   makes its `Gateway` and carriers and reads its audit log.
//! - [`random`]: the `airlock-random` crate, the host's one random source.
//! - [`trust`]: CA certificates the guest trusts ([`CaCert`],
//!   `.ca_cert()`, `.trust_host_roots()`), installed at every start.
//!
//! ```no_run
//! # async fn demo() -> Result<(), airlock::Error> {
//! use airlock::{Command, Sandbox};
//!
//! let sandbox = Sandbox::builder().memory_mib(512).start().await?;
//! let output = sandbox
//!     .exec(&Command::new("sh").arg("-c").arg("echo hello"))
//!     .await?
//!     .output()
//!     .await?;
//! assert_eq!(output.stdout, b"hello\n");
//! sandbox.shutdown(std::time::Duration::from_secs(5)).await?;
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]

mod accel;
pub mod adopt;
pub mod code;
mod error;
mod exec;
mod features;
pub mod fs;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod gc;
mod lifecycle;
mod manager;
mod sandbox;
pub mod saved;
pub mod snapshot;
pub mod state_dir;
pub mod template;
pub mod transport;
pub mod trust;
mod vmm;
pub mod workspace;

pub use accel::{detect as detect_accel, Accel, ParseAccelError, ACCEL_ENV};
/// The network gateway (the `airlock-gateway` crate): policy, audit,
/// secrets and the rest of what a sandbox's network is made of.
pub use airlock_gateway as network;
pub use airlock_gateway::audit::{
    refusals_in_process as network_refusals_in_process, AuditRecord, Protocol as NetProtocol,
    Refusal, Verdict,
};
pub use airlock_gateway::policy::{NetRule, NetworkPolicy};
pub use airlock_gateway::resolver::{Resolve, StaticResolver, SystemResolver};
pub use airlock_gateway::secrets::Secret;
pub use airlock_gateway::{GuestPort, HostAccess, NetworkOptions};
/// The image store (the `airlock-images` crate).
pub use airlock_images as images;
/// Where the guest kernel and initramfs live (the `airlock-images` crate).
pub use airlock_images::artifacts;
/// A protocol feature an agent may lack (see [`Error::AgentTooOld`]).
pub use airlock_proto::Feature;
/// The host's one source of random values (the `airlock-random` crate).
pub use airlock_random as random;
/// Output chunks and stdin data are [`bytes::Bytes`].
pub use bytes::Bytes;
pub use code::{
    Cell, CellDone, CellError, CellEvent, CellExecution, CellOutput, CellStatus, ContextInfo,
    ContextOptions, Contexts, Language, MimeBundle,
};
pub use error::{error_chain, Error, ErrorKind, Reason, Result};
pub use exec::{
    Command, Event, ExecStamps, Execution, Exit, ExitStatus, Limits, Output, ProcessHandle,
    ProcessInfo, ProcessState, Signal, Stdin, Target, TerminalSize, Usage,
};
pub use fs::Files;
pub use lifecycle::{EndReason, IdlePolicy, PausedCalls, SandboxState, SandboxUsage, Traffic};
pub use manager::{
    PoolConfig, PoolError, PoolStatus, SandboxInfo, Sandboxes, WarmUp, WarmUpError,
    WARM_UP_CHECKED_ROOTS,
};
pub use sandbox::{
    BootTimings, ConfigError, GuestChannel, NamedTemplateError, Origin, Sandbox, SandboxBuilder,
    TakenSnapshot, DEFAULT_CONSOLE_LOG_BUDGET, DEFAULT_MAX_LIFETIME, DEFAULT_UNRESPONSIVE_AFTER,
};
/// gRPC status codes, as returned by [`Error::agent_code`].
pub use tonic::Code;
pub use trust::{CaCert, CaCertError, CA_CERTS_ENV};
pub use vmm::qmp::{Qmp, QmpError};
pub use vmm::{VmmError, VmmUser};
pub use workspace::{WorkspaceError, DEFAULT_WORKSPACE_BYTES};

/// The README's Rust examples, compiled by `cargo test --doc` so they keep up with the API.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeExamples;

/// docs/library.md's Rust examples, compiled the same way.
#[cfg(doctest)]
#[doc = include_str!("../../docs/library.md")]
struct LibraryExamples;
