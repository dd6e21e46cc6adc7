//! A per-user daemon that keeps sandboxes alive between `airlock`
//! invocations (`airlock serve`, and the `airlock sandbox ...` clients).
//!
//! It speaks gRPC: the `airlock.daemon.v1.Sandboxes` service
//! (`proto/airlock/daemon/v1/daemon.proto`, generated in
//! [`airlock_proto::daemon::v1`]) on a private Unix socket.
//!
//! - `server`: [`DaemonSocket`] (the private, exclusively held Unix socket)
//!   and [`serve`], which serves the service from a
//!   [`Sandboxes`](airlock::Sandboxes) manager until told to stop, then
//!   kills every sandbox.
//! - `exec`: streaming one program to a client.
//! - `code`: streaming one cell of code to a client.
//! - `network`: a sandbox's network policy, its change, its audit.
//! - `client`: [`Connection`], which starts a daemon on demand.
//! - `wire`: the messages mapped to and from the library's types, and
//!   errors as statuses.
//! - `error`: [`DaemonError`].
//!
//! ```text
//! airlock sandbox exec ──gRPC over <state base>/daemon.sock──> airlock serve
//!     ──Sandboxes──> Sandbox ──gRPC over vsock──> agent (PID 1)
//! ```

mod client;
mod code;
mod error;
mod exec;
mod network;
mod server;
pub mod wire;

pub use client::{default_socket, Connection, ExecInputs, ExecStream};
pub use error::DaemonError;
pub use server::{serve, DaemonSocket, PoolConfig};
