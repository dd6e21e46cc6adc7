//! `network_log`: the sandbox's network decisions (`Network.Audit`).

use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::service::RequestContext;
use rmcp::{schemars, tool, tool_router, RoleServer};
use serde::Deserialize;
use serde_json::json;

use airlock_client::api::{AuditRecord, AuditRequest, ErrorReason, GetPolicyRequest};
use airlock_client::ClientError;

use super::AirlockTools;
use crate::outcome::{finish, Reply, Stop};

/// Records shown at most (the newest).
const RECORDS_SHOWN: usize = 200;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = super::schema::one_line)]
pub struct NetworkLog {
    /// The sandbox. Default: this session's own sandbox.
    pub sandbox_id: Option<String>,
    /// Only records after this sequence number (each record starts with
    /// #N): pass the last one you saw to get only what is new.
    pub after: Option<u64>,
}

#[tool_router(router = network_router, vis = "pub(super)")]
impl AirlockTools {
    #[tool(
        description = "The network rules of a sandbox and every connection and DNS query its \
        programs made, allowed or refused and why, and the connections made to its exposed \
        ports. Use it when a download or an API call fails in a sandbox created with \
        allow_net: it names the host that was refused (add it with a new sandbox's allow_net).",
        annotations(title = "Network log", read_only_hint = true, open_world_hint = false)
    )]
    async fn network_log(
        &self,
        Parameters(params): Parameters<NetworkLog>,
        context: RequestContext<RoleServer>,
    ) -> Reply {
        let _busy = self.session.busy(&context);
        finish(self.do_network_log(params, context).await)
    }
}

impl AirlockTools {
    async fn do_network_log(
        &self,
        params: NetworkLog,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, Stop> {
        let target = self.session.target(&context, params.sandbox_id).await?;
        let mut network = target.client.network();
        let policy = match network
            .get_policy(GetPolicyRequest {
                sandbox_id: target.id.clone(),
            })
            .await
        {
            Ok(policy) => Some(policy.into_inner()),
            Err(status) => {
                let error = ClientError::from(status);
                // A sandbox without network has no rules, but its log
                // still holds the connections made to it (ingress).
                if error.reason() != Some(ErrorReason::NoNetwork) {
                    return Err(self
                        .session
                        .failed(&target, "cannot read the network log", error)
                        .await);
                }
                None
            }
        };
        let records = match network
            .audit(AuditRequest {
                sandbox_id: target.id.clone(),
                after_seq: params.after.unwrap_or(0),
            })
            .await
        {
            Ok(audit) => audit.into_inner().records,
            Err(status) => {
                return Err(self
                    .session
                    .failed(&target, "cannot read the network log", status.into())
                    .await)
            }
        };
        let mut text = String::new();
        match &policy {
            None => text.push_str(
                "no network: the sandbox was created without allow_net (create_sandbox with \
                 allow_net makes one that has it)\n",
            ),
            Some(policy) if policy.rules.is_empty() => {
                text.push_str("rules: none (everything is refused)\n")
            }
            Some(policy) => text.push_str(&format!("rules: allow {}\n", policy.rules.join(", "))),
        }
        for secret in policy.iter().flat_map(|p| &p.secrets) {
            text.push_str(&format!(
                "secret ${} is sent only to {}\n",
                secret.name,
                secret.hosts.join(", ")
            ));
        }
        let skipped = records.len().saturating_sub(RECORDS_SHOWN);
        if skipped > 0 {
            text.push_str(&format!(
                "[{skipped} older records not shown: network_log with after for fewer]\n"
            ));
        }
        if records.is_empty() {
            text.push_str("No connections or DNS queries recorded");
            text.push_str(if params.after.is_some() {
                " after that record.\n"
            } else {
                ".\n"
            });
        }
        for record in records.iter().skip(skipped) {
            text.push_str(&record_line(record));
            text.push('\n');
        }
        let refused = records.iter().filter(|r| !r.allowed).count();
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        result.structured_content = Some(json!({
            "sandbox_id": target.id,
            "records": records.len(),
            "refused": refused,
            "last": records.last().map(|r| r.seq),
        }));
        Ok(result)
    }
}

/// `#3 tls api.example.com 93.184.215.14:443 allowed`.
fn record_line(record: &AuditRecord) -> String {
    let mut line = format!("#{} {}", record.seq, record.protocol);
    if !record.name.is_empty() {
        line.push(' ');
        line.push_str(&record.name);
    }
    match (record.addr.is_empty(), record.port) {
        (false, 0) => line.push_str(&format!(" {}", record.addr)),
        (false, port) => line.push_str(&format!(" {}:{port}", record.addr)),
        (true, 0) => {}
        (true, port) => line.push_str(&format!(" port {port}")),
    }
    line.push(' ');
    line.push_str(&record.verdict);
    line
}
