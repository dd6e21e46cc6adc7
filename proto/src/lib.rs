//! The `airlock.agent.v1` protocol: the one contract between the host bridge
//! (`airlock`) and the guest agent (`airlock-agent`). (The server's public
//! API, `airlock.api.v1`, is the `airlock-api` crate's.)
//!
//! The `.proto` files under `proto/airlock/agent/v1/` are the source of truth;
//! `build.rs` compiles them with protox and tonic, so this crate exposes the
//! generated messages plus a client and a server module per service
//! (`health_client`, `health_server`, `process_client`, ...).
//!
//! Compatibility rule for v1: fields and RPCs are only ever added, never
//! renumbered or removed. `PROTOCOL_REVISION` counts the additions, and
//! [`Feature`] names each addition with its revision.
//!
//! [`contract`] holds everything else host and guest agree on: kernel
//! command line keys, guest paths, kernel modules, ports and the start-up
//! announcement.

#![forbid(unsafe_code)]
#![allow(missing_debug_implementations)]

/// Generated code for package `airlock.agent.v1` (the `grpc` feature, on
/// by default).
#[cfg(feature = "grpc")]
pub mod v1 {
    tonic::include_proto!("airlock.agent.v1");
}

pub mod contract;
pub mod opening;

pub use contract::{
    Feature, DEFAULT_AGENT_PORT, PROTOCOL_REVISION, READY_ANNOUNCEMENT, READY_PORT,
};
