//! `airlock.api.v1`: Airlock's public API, the one contract between the
//! server (`airlock serve`, crate `airlock-server`) and its clients (the
//! `airlock` CLI through `airlock-client`, the Python and TypeScript SDKs,
//! the MCP server).
//!
//! The `.proto` files under `proto/airlock/api/v1/` are the reference;
//! `build.rs` compiles them with protox and tonic into [`v1`] (messages, plus
//! a client and a server module per service: `sandboxes_client`,
//! `processes_server`, ...). Besides the generated code this crate names
//! what both sides must agree on and the `.proto` files cannot say:
//!
//! - [`reason`]: how a failure is told (the gRPC code that goes with each
//!   [`v1::ErrorReason`], and the `airlock-error` / `airlock-field` metadata);
//! - [`limits`]: the bounds the server enforces and clients may check first;
//! - [`auth`]: the `authorization` header and the keys' form;
//! - [`codec`]: the generated code's codec (a message that does not decode
//!   is INVALID_ARGUMENT);
//! - [`REVISION`] and [`features`]: what `Ping` reports.
//!
//! Nothing here is the guest's: the guest agent speaks `airlock.agent.v1`
//! (crate `airlock-proto`) and never compiles this crate.

#![forbid(unsafe_code)]
#![allow(missing_debug_implementations)]

pub mod auth;
pub mod codec;
pub mod limits;
pub mod reason;
pub mod throttle;

/// Generated code for package `airlock.api.v1`.
pub mod v1 {
    tonic::include_proto!("airlock.api.v1");

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

    /// Never shows the key.
    impl std::fmt::Debug for CreateKeyResponse {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("CreateKeyResponse")
                .field("key", &self.key)
                .field("secret", &"<redacted>")
                .finish()
        }
    }
}

/// The API revision this crate describes: 1, and one more whenever v1
/// grows (fields, messages, values and RPCs are only ever added).
///
/// - 2: a write's explicit end (`WriteHeader.require_end`,
///   `WriteFileRequest.end`).
/// - 3: ingress (the `Ingress` service, `CreateSandboxRequest.public_ports`,
///   `SandboxInfo.public_ports`, `ErrorReason.PORT_CLOSED`).
/// - 4: named workspaces (the `Workspaces` service,
///   `CreateSandboxRequest.workspace_size_mib`, `SandboxInfo.workspace`,
///   `KeyQuota.max_workspaces` and `max_workspace_mib`, `KeyInfo.workspaces`
///   and `workspace_bytes`).
/// - 5: disk figures (`SandboxMetrics.disk_total_bytes`, `disk_used_bytes`).
/// - 6: snapshots (`Sandboxes.Snapshot`, `ListSnapshots`, `GetSnapshot`,
///   `DeleteSnapshot`, `CreateSandboxRequest.snapshot`,
///   `SandboxInfo.snapshot`), templates built through the API (the
///   `Templates` service, `TemplateInfo.owner`, `memory_mib`, `vcpus`), and
///   storage quotas (`KeyQuota.max_snapshots`, `max_storage_mib`,
///   `KeyInfo.snapshots`, `templates`, `storage_bytes`).
/// - 7: lifecycle events and webhooks (the `Events` service: `Watch`,
///   `SetWebhook`, `ListWebhooks`, `RemoveWebhook`), and the usage ledger
///   (the `Usage` service: `Query`, `UsageGrouping`, `UsageRow`).
pub const REVISION: u32 = 7;

/// Names of optional parts a server may serve, as `Ping` lists them.
pub mod features {
    /// A TCP listener with TLS (keys required).
    pub const TLS: &str = "tls";
    /// API keys and per-key tenancy.
    pub const KEYS: &str = "keys";
    /// gRPC-Web on the TCP listener (for browsers and edge runtimes).
    pub const GRPC_WEB: &str = "grpc-web";
    /// A warm pool of frozen sandboxes.
    pub const POOL: &str = "pool";
    /// Sandboxes survive a restart of the server (adoption).
    pub const ADOPTION: &str = "adoption";
    /// HTTP ingress into sandboxes (`Ingress.GetHost` answers).
    pub const INGRESS: &str = "ingress";
}

#[cfg(test)]
mod tests {
    use super::v1;

    #[test]
    fn secrets_never_show_in_debug() {
        let secret = v1::Secret {
            name: "TOKEN".into(),
            value: "hunter2".into(),
            hosts: vec!["api.example".into()],
        };
        let create = v1::CreateSandboxRequest {
            secrets: vec![secret],
            ..Default::default()
        };
        let shown = format!("{create:?}");
        assert!(shown.contains("TOKEN"), "{shown}");
        assert!(!shown.contains("hunter2"), "{shown}");
        let key = v1::CreateKeyResponse {
            key: None,
            secret: "ak_verysecret".into(),
        };
        assert!(!format!("{key:?}").contains("verysecret"));
    }
}
