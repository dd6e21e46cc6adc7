//! A per-user daemon that keeps sandboxes alive between `airlock`
//! invocations (`airlock serve`, and the `airlock sandbox ...` clients).
//!
//! - `protocol`: the frames on the wire: length-prefixed JSON, one request
//!   per connection, exec as a stream of output frames one way and input
//!   frames the other.
//! - `server`: [`DaemonSocket`] (the private, exclusively held Unix socket)
//!   and [`serve`], which answers requests from a [`Sandboxes`](airlock::Sandboxes)
//!   manager until told to stop, then kills every sandbox.
//! - `exec`: running one program for a client.
//! - `client`: [`Connection`], which starts a daemon on demand.
//! - `error`: [`DaemonError`].
//!
//! ```text
//! airlock sandbox exec ──frames over <state base>/daemon.sock──> airlock serve
//!     ──Sandboxes──> Sandbox ──gRPC over vsock──> agent (PID 1)
//! ```

mod client;
mod error;
mod exec;
pub mod protocol;
mod server;

pub use client::{default_socket, Connection, ExecStream};
pub use error::DaemonError;
pub use server::{serve, DaemonSocket};
