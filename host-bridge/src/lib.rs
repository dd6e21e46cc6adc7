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
//!   metadata and tree operations, watch, directories as tar streams.
//! - `exec`: [`Command`], [`Execution`] (a running program's events and controls),
//!   [`ProcessHandle`] (stdin and signals by pid or tag), [`Output`], [`ProcessInfo`].
//! - `vmm`: the QEMU and vhost-device-vsock processes and QMP.
//! - `transport`: the hybrid-vsock handshake and the gRPC channel.
//! - `accel`: choosing KVM or TCG.
//! - `artifacts` and `state_dir`: where kernels, images and per-VM state live;
//!   each state directory records its owner process and VMM processes.
//! - [`daemon`]: `airlock serve`, a per-user daemon holding a [`Sandboxes`]
//!   manager behind a Unix socket, and its clients (`airlock sandbox ...`).
//! - [`gc`]: finding sandboxes whose owner died and ending them (`airlock gc`).
//! - [`images`]: the cache of root filesystem images (`airlock image ls|rm`).
//! - `workspace`: the persistent, exclusively locked disk behind `.workspace()`.
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
pub mod artifacts;
pub mod daemon;
mod error;
mod exec;
pub mod fs;
pub mod gc;
pub mod images;
mod lifecycle;
mod manager;
mod sandbox;
pub mod state_dir;
pub mod transport;
mod vmm;
mod workspace;

pub use accel::{detect as detect_accel, Accel, ParseAccelError, ACCEL_ENV};
/// Output chunks and stdin data are [`bytes::Bytes`].
pub use bytes::Bytes;
pub use error::{error_chain, Error, Result};
pub use exec::{
    Command, Event, Execution, Exit, ExitStatus, Limits, Output, ProcessHandle, ProcessInfo,
    ProcessState, Signal, Stdin, Target, TerminalSize, Usage,
};
pub use fs::Files;
pub use lifecycle::{EndReason, IdlePolicy, PausedCalls, SandboxState, SandboxUsage};
pub use manager::{SandboxInfo, Sandboxes};
pub use sandbox::{
    BootTimings, Sandbox, SandboxBuilder, DEFAULT_CONSOLE_LOG_BUDGET, DEFAULT_MAX_LIFETIME,
    DEFAULT_UNRESPONSIVE_AFTER,
};
/// gRPC status codes, as returned by [`Error::agent_code`].
pub use tonic::Code;
pub use vmm::qmp::{Qmp, QmpError};
pub use vmm::{VmmError, VmmUser};
pub use workspace::{WorkspaceError, DEFAULT_WORKSPACE_BYTES};

/// The README's Rust examples, compiled by `cargo test --doc` so they keep up with the API.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeExamples;
