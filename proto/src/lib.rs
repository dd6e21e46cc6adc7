//! The `airlock.agent.v1` protocol: the one contract between the host bridge
//! (`airlock`) and the guest agent (`airlock-agent`); and `airlock.daemon.v1`
//! ([`daemon::v1`]), the API of the per-user daemon.
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

/// The `airlock.daemon.v1` API of the per-user daemon (`airlock serve`),
/// from `proto/airlock/daemon/v1/daemon.proto`: the `Sandboxes` service
/// (`sandboxes_client`, `sandboxes_server`) and its messages. Program
/// events are the agent's [`v1::ProcessEvent`].
#[cfg(feature = "grpc")]
pub mod daemon {
    pub mod v1 {
        tonic::include_proto!("airlock.daemon.v1");

        /// Never shows the value, so a logged request cannot leak it.
        impl std::fmt::Debug for Secret {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct("Secret")
                    .field("name", &self.name)
                    .field("value", &"<redacted>")
                    .field("hosts", &self.hosts)
                    .finish()
            }
        }
    }
}

/// `airlock.agent.v1` under its package path, which the daemon's generated
/// code names (`super::super::agent::v1`); use [`v1`].
#[cfg(feature = "grpc")]
#[doc(hidden)]
pub mod agent {
    pub use crate::v1;
}

pub mod contract;
pub mod opening;

pub use contract::{
    Feature, DEFAULT_AGENT_PORT, PROTOCOL_REVISION, READY_ANNOUNCEMENT, READY_PORT,
};
