//! `airlock.api.v1.Usage`: the usage ledger queried, a key's own rows only
//! (see `crate::usage`).

use std::sync::Arc;

use tonic::{Request, Response, Status};

use airlock_api::reason::{self, invalid};
use airlock_api::v1::{self as api, usage_server, ErrorReason};

use super::Services;
use crate::principal::Principal;
use crate::usage::{Grouping, Query, Row};

/// The ledger's name for the owner's own sandboxes in a query's `key`
/// (no key may be named so).
pub const OWNER_KEY: &str = "_owner";

/// Whose rows a query asks for: `None` every key's (the owner only).
fn whose(principal: &Principal, key: &str) -> Result<Option<String>, Status> {
    match principal {
        Principal::Key(own) => {
            if key.is_empty() || key == &**own {
                Ok(Some(own.to_string()))
            } else {
                Err(reason::status(
                    ErrorReason::OwnerOnly,
                    "another key's usage is for the machine's owner, on the server's Unix socket",
                ))
            }
        }
        Principal::Owner => match key {
            "" => Ok(None),
            OWNER_KEY => Ok(Some(String::new())),
            key if crate::keys::is_valid_name(key) => Ok(Some(key.to_owned())),
            key => Err(invalid(
                "key",
                format!("{key:?} is not a key's name (nor {OWNER_KEY:?})"),
            )),
        },
    }
}

fn row(row: Row) -> api::UsageRow {
    let f = row.figures;
    api::UsageRow {
        sandbox_id: row.sandbox_id,
        key: row.key,
        day: row.day,
        sandboxes: row.sandboxes,
        from_ms: row.from_ms,
        to_ms: row.to_ms,
        running_ms: f.running_ms,
        paused_ms: f.paused_ms,
        on_disk_ms: f.on_disk_ms,
        guest_cpu_ms: f.guest_cpu_ms,
        vcpu_ms: f.vcpu_ms,
        memory_mib_ms: f.memory_mib_ms,
        disk_mib_ms: f.disk_mib_ms,
        egress_sent_bytes: f.egress_sent_bytes,
        egress_received_bytes: f.egress_received_bytes,
        ingress_received_bytes: f.ingress_received_bytes,
        ingress_sent_bytes: f.ingress_sent_bytes,
        memory_mib: row.memory_mib,
        vcpus: row.vcpus,
        created_at_ms: row.created_at_ms,
        ended_at_ms: row.ended_at_ms,
    }
}

#[tonic::async_trait]
impl usage_server::Usage for Services {
    async fn query(
        &self,
        request: Request<api::UsageQueryRequest>,
    ) -> Result<Response<api::UsageQueryResponse>, Status> {
        let call = self.admit(&request)?;
        let request = request.into_inner();
        let key = whose(&call.principal, &request.key)?;
        if request.until_ms != 0 && request.until_ms <= request.since_ms {
            return Err(invalid(
                "until_ms",
                format!(
                    "{} is not after since_ms ({})",
                    request.until_ms, request.since_ms
                ),
            ));
        }
        let by = match api::UsageGrouping::try_from(request.by) {
            Ok(api::UsageGrouping::Unspecified | api::UsageGrouping::Sandbox) => Grouping::Sandbox,
            Ok(api::UsageGrouping::Key) => Grouping::Key,
            Ok(api::UsageGrouping::Day) => Grouping::Day,
            Err(_) => return Err(invalid("by", format!("{} is no grouping", request.by))),
        };
        let Some(ledger) = &self.state.usage else {
            return Err(reason::status(
                ErrorReason::Unsupported,
                "this server keeps no usage ledger",
            ));
        };
        let query = Query {
            key,
            since_ms: request.since_ms,
            until_ms: (request.until_ms != 0).then_some(request.until_ms),
            by,
        };
        let store = Arc::clone(ledger.store());
        let rows = tokio::task::spawn_blocking(move || store.query(&query))
            .await
            .map_err(|error| {
                reason::status(
                    ErrorReason::Internal,
                    format!("the usage query failed: {error}"),
                )
            })?
            .map_err(|error| {
                reason::status(
                    ErrorReason::Internal,
                    format!(
                        "cannot read the usage ledger: {}",
                        airlock::error_chain(&error)
                    ),
                )
            })?;
        Ok(Response::new(api::UsageQueryResponse {
            rows: rows.into_iter().map(row).collect(),
        }))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_key_asks_for_its_own_rows_and_the_owner_for_anyones() {
        let alice = Principal::Key(Arc::from("alice"));
        assert_eq!(whose(&alice, "").unwrap(), Some("alice".to_owned()));
        assert_eq!(whose(&alice, "alice").unwrap(), Some("alice".to_owned()));
        let refused = whose(&alice, "bob").unwrap_err();
        assert_eq!(refused.code(), tonic::Code::PermissionDenied);
        assert_eq!(
            whose(&alice, OWNER_KEY).unwrap_err().code(),
            tonic::Code::PermissionDenied
        );
        assert_eq!(whose(&Principal::Owner, "").unwrap(), None);
        assert_eq!(
            whose(&Principal::Owner, OWNER_KEY).unwrap(),
            Some(String::new())
        );
        assert_eq!(
            whose(&Principal::Owner, "bob").unwrap(),
            Some("bob".to_owned())
        );
        let bad = whose(&Principal::Owner, "../x").unwrap_err();
        assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    }
}
