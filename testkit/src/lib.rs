//! What the workspace's tests share, in one crate that every test crate
//! lists as a dev-dependency (`airlock-tests` re-exports it).
//!
//! - [`bins`]: the workspace's binaries built beside the running test
//!   ([`agent_bin`], [`airlock_bin`]), failing with the build command when
//!   one is missing.
//! - [`process`]: a sandbox builder on the library's process backend (the
//!   agent binary as a host process, no VM) for tests of the lifecycle.
//! - [`server`]: [`TestServer`], a real Airlock server in the test's own
//!   process: its Unix socket, a TCP listener (plain on loopback, or TLS)
//!   and the HTTP ingress, every sandbox from the process backend or from
//!   a builder of the caller's; clients of `airlock-client` for the owner
//!   and for keys.
//! - [`tls`]: a throwaway CA and a certificate it signed, in memory, as PEM
//!   files or served by a TLS acceptor.
//! - [`api`]: calls through the public API a test makes again and again
//!   (create a sandbox, run a program to its exit, read a refusal).
//! - [`peer`]: connections from another loopback address, so a test can be
//!   another client.
//!
//! A harness fails the test that uses it: each helper panics with what it
//! was doing when the system under test or the host refuses.
#![forbid(unsafe_code)]
#![allow(clippy::expect_used)]

pub mod api;
pub mod bins;
pub mod peer;
pub mod process;
pub mod server;
pub mod tls;

pub use api::{create, create_sandbox, refusal, run, start};
pub use bins::{agent_bin, airlock_bin};
pub use peer::{channel_from, sandboxes_with_key, tcp_from};
pub use process::process_builder;
pub use server::{Options, TestServer};
