//! The `airlock.agent.v1` protocol: the one contract between the host bridge
//! (`airlock`) and the guest agent (`airlock-agent`).
//!
//! The `.proto` files under `proto/airlock/agent/v1/` are the source of truth;
//! `build.rs` compiles them with protox and tonic, so this crate exposes the
//! generated messages plus a client and a server module per service
//! (`health_client`, `health_server`, `process_client`, ...).
//!
//! Compatibility rule for v1: fields and RPCs are only ever added, never
//! renumbered or removed. `PROTOCOL_REVISION` counts the additions.

#![forbid(unsafe_code)]
#![allow(missing_debug_implementations)]

/// Generated code for package `airlock.agent.v1`.
pub mod v1 {
    tonic::include_proto!("airlock.agent.v1");
}

/// The revision of `airlock.agent.v1` that this crate describes.
pub const PROTOCOL_REVISION: u32 = 5;

/// The vsock port the agent listens on unless the kernel command line says
/// otherwise (`airlock.port=N`).
pub const DEFAULT_AGENT_PORT: u32 = 1024;
