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

/// The host vsock port on which the agent announces that it serves.
///
/// Once its gRPC listener is bound, the agent connects to the host (CID 2)
/// on this port, writes [`READY_ANNOUNCEMENT`] and closes. The host dials
/// the agent only after that: a host that knocks while the guest's vsock
/// driver is still setting up its queues can wedge a vhost-user vsock
/// device, and waiting for the guest's word also removes the host's
/// polling from every start. Hybrid-vsock devices (vhost-device-vsock,
/// Firecracker, Cloud Hypervisor) deliver it to the Unix socket
/// `<uds-path>_<port>`.
pub const READY_PORT: u32 = 1025;

/// What the agent writes on [`READY_PORT`]: one line, then end of stream.
pub const READY_ANNOUNCEMENT: &[u8] = b"airlock-agent ready\n";
