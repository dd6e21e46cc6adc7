//! E2B's JSON, as the control plane's OpenAPI contract names it: the request
//! bodies it reads and the answers it writes. Field names are E2B's
//! (`sandboxID`, `envVars`, `allow_internet_access`); unknown fields are
//! ignored, as E2B's own API ignores them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `POST /sandboxes` and `POST /v2/sandboxes`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewSandbox {
    #[serde(rename = "templateID")]
    pub template_id: Option<String>,
    pub timeout: Option<u64>,
    pub auto_pause: Option<bool>,
    pub auto_pause_memory: Option<bool>,
    pub auto_resume: Option<AutoResume>,
    // `secure` is not read: every sandbox's envd needs its access token.
    #[serde(rename = "allow_internet_access")]
    pub allow_internet_access: Option<bool>,
    pub network: Option<NetworkConfig>,
    pub metadata: Option<BTreeMap<String, String>>,
    pub env_vars: Option<BTreeMap<String, String>>,
    pub mcp: Option<serde_json::Value>,
    pub iam: Option<serde_json::Value>,
    pub volume_mounts: Option<Vec<serde_json::Value>>,
}

/// `autoResume`.
#[derive(Debug, Default, Deserialize)]
pub struct AutoResume {
    pub enabled: bool,
}

/// `network` of a create, and the body of `PUT /sandboxes/{id}/network`
/// (which also carries `allow_internet_access`).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkConfig {
    #[serde(rename = "allow_internet_access")]
    pub allow_internet_access: Option<bool>,
    pub allow_out: Option<Vec<String>>,
    pub deny_out: Option<Vec<String>>,
    pub allow_public_traffic: Option<bool>,
    pub mask_request_host: Option<String>,
    pub rules: Option<serde_json::Value>,
    pub dns_servers: Option<serde_json::Value>,
    pub egress_proxy: Option<serde_json::Value>,
    pub https_ports: Option<serde_json::Value>,
}

/// `POST /sandboxes/{id}/timeout`.
#[derive(Debug, Default, Deserialize)]
pub struct TimeoutRequest {
    pub timeout: Option<u64>,
}

/// `POST /sandboxes/{id}/refreshes`.
#[derive(Debug, Default, Deserialize)]
pub struct RefreshRequest {
    pub duration: Option<u64>,
}

/// `POST /sandboxes/{id}/connect` (both versions) and `/resume`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConnectRequest {
    pub timeout: Option<u64>,
}

/// `POST /sandboxes/{id}/pause`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PauseRequest {
    pub memory: Option<serde_json::Value>,
    // `requireHealthyGuest` is not read: a pause here never needs the guest.
}

/// `POST /sandboxes/{id}/fork`.
#[derive(Debug, Default, Deserialize)]
pub struct ForkRequest {
    pub count: Option<u32>,
    pub timeout: Option<u64>,
}

/// `POST /sandboxes/{id}/snapshots` (`SandboxSnapshotRequest`).
#[derive(Debug, Default, Deserialize)]
pub struct SnapshotRequest {
    pub name: Option<String>,
    /// `false` is the SDKs' `mode="filesystem"`.
    pub memory: Option<serde_json::Value>,
}

/// A snapshot (`SnapshotInfo`): what a create's `templateID` names to
/// start from it, and its names.
#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    #[serde(rename = "snapshotID")]
    pub snapshot_id: String,
    pub names: Vec<String>,
}

/// A created, connected, resumed or forked sandbox (`Sandbox`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Sandbox {
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    #[serde(rename = "templateID")]
    pub template_id: String,
    #[serde(rename = "clientID")]
    pub client_id: &'static str,
    pub envd_version: &'static str,
    pub envd_access_token: String,
    /// The same token: E2B's code-interpreter SDKs send only this one
    /// (`E2B-Traffic-Access-Token`) on their `/contexts` calls.
    pub traffic_access_token: String,
    pub domain: String,
}

/// `GET /sandboxes/{id}` (`SandboxDetail`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxDetail {
    #[serde(flatten)]
    pub listed: ListedSandbox,
    pub envd_access_token: String,
    pub domain: String,
    pub allow_internet_access: bool,
}

/// One sandbox of a list (`ListedSandbox`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListedSandbox {
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    #[serde(rename = "templateID")]
    pub template_id: String,
    #[serde(rename = "clientID")]
    pub client_id: &'static str,
    pub started_at: String,
    pub end_at: String,
    pub cpu_count: u32,
    #[serde(rename = "memoryMB")]
    pub memory_mb: u32,
    #[serde(rename = "diskSizeMB")]
    pub disk_size_mb: u64,
    pub metadata: BTreeMap<String, String>,
    pub state: &'static str,
    pub envd_version: &'static str,
}

/// One reading of a sandbox's use (`SandboxMetric`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxMetric {
    pub timestamp: String,
    pub timestamp_unix: u64,
    pub cpu_count: u32,
    pub cpu_used_pct: f64,
    pub mem_used: u64,
    pub mem_total: u64,
    pub mem_cache: u64,
    pub disk_used: u64,
    pub disk_total: u64,
}

/// `GET /sandboxes/metrics` (`SandboxesWithMetrics`).
#[derive(Debug, Clone, Serialize)]
pub struct SandboxesWithMetrics {
    pub sandboxes: BTreeMap<String, SandboxMetric>,
}

/// One result of a fork (`SandboxForkResult`).
#[derive(Debug, Clone, Serialize)]
pub struct ForkResult {
    pub sandbox: Sandbox,
}

/// One template of `GET /templates` (`Template`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Template {
    #[serde(rename = "templateID")]
    pub template_id: String,
    #[serde(rename = "buildID")]
    pub build_id: String,
    pub cpu_count: u32,
    #[serde(rename = "memoryMB")]
    pub memory_mb: u32,
    #[serde(rename = "diskSizeMB")]
    pub disk_size_mb: u64,
    pub public: bool,
    pub aliases: Vec<String>,
    pub names: Vec<String>,
    pub created_at: String,
    pub updated_at: String,
    pub created_by: Option<()>,
    pub last_spawned_at: Option<String>,
    pub spawn_count: u64,
    pub build_count: u64,
    pub envd_version: &'static str,
    pub build_status: &'static str,
    pub description: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_create_reads_e2b_field_names() {
        let create: NewSandbox = serde_json::from_str(
            r#"{"templateID":"base","timeout":60,"autoPause":false,
                "allow_internet_access":false,"metadata":{"a":"b"},
                "envVars":{"X":"1"},"network":{"allowOut":["example.com"]},
                "somethingNew":1}"#,
        )
        .expect("a create");
        assert_eq!(create.template_id.as_deref(), Some("base"));
        assert_eq!(create.timeout, Some(60));
        assert_eq!(create.allow_internet_access, Some(false));
        assert_eq!(create.env_vars.map(|e| e.len()), Some(1));
        assert_eq!(
            create.network.and_then(|n| n.allow_out),
            Some(vec!["example.com".to_owned()])
        );
    }

    #[test]
    fn a_sandbox_writes_e2b_field_names() {
        let sandbox = Sandbox {
            sandbox_id: "s".into(),
            template_id: "base".into(),
            client_id: "airlock",
            envd_version: "0.6.4",
            envd_access_token: "t".into(),
            traffic_access_token: "t".into(),
            domain: "e2b.localhost".into(),
        };
        let json = serde_json::to_value(&sandbox).expect("json");
        for field in [
            "sandboxID",
            "templateID",
            "clientID",
            "envdVersion",
            "envdAccessToken",
            "domain",
        ] {
            assert!(json.get(field).is_some(), "{field} in {json}");
        }
    }
}
