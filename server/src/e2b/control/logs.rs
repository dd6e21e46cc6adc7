//! A sandbox's logs (`GET /sandboxes/{id}/logs`, `GET /v2/sandboxes/{id}/logs`):
//! what Airlock records of a sandbox, its network and ingress decisions
//! (`Network.Audit`), one entry per decision: a refused connection is a
//! `warn`, an allowed one `info`, with the protocol, name, address, port
//! and verdict as fields. Airlock keeps no log of a guest daemon; a
//! program's output is its process's (commands).
//!
//! The query's `start` (milliseconds since the epoch: entries from then)
//! and `limit` (at most [`MAX_LIMIT`], default [`DEFAULT_LIMIT`]) bound the
//! answer; v1 answers `logs` (`timestamp`, `line`) and `logEntries`, v2
//! `logs` as entries.

use airlock_api::v1::network_server::Network as _;
use airlock_api::v1::{self as api};
use http::{Response, StatusCode};
use serde::Serialize;
use serde_json::json;

use super::{fail, query, time, Ctl};
use crate::e2b::reply::{self, Body, Failure};

/// Entries answered without a `limit`.
pub const DEFAULT_LIMIT: u64 = 1000;
/// The most entries one answer carries.
pub const MAX_LIMIT: u64 = 10_000;

/// One entry, as E2B's `SandboxLogEntry`.
#[derive(Debug, Serialize)]
struct Entry {
    timestamp: String,
    level: &'static str,
    message: String,
    fields: serde_json::Value,
}

/// Which shape the answer takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    V1,
    V2,
}

/// The logs of the caller's sandbox `id`.
pub(super) async fn logs(
    ctl: &Ctl<'_>,
    id: &str,
    query: Option<&str>,
    shape: Shape,
) -> Result<Response<Body>, Failure> {
    let pairs = query::pairs(query)?;
    let start = query::number(&pairs, "start")?.unwrap_or(0);
    let limit = query::number(&pairs, "limit")?.unwrap_or(DEFAULT_LIMIT);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(fail::invalid("limit", format!("1 to {MAX_LIMIT}")));
    }
    ctl.info(id).await?;
    let records = ctl
        .front
        .services
        .audit(ctl.request(api::AuditRequest {
            sandbox_id: id.to_owned(),
            after_seq: 0,
        }))
        .await
        .map_err(|status| fail::from_status(&status))?
        .into_inner()
        .records;
    let entries: Vec<Entry> = records
        .iter()
        .filter(|record| record.at_ms >= start)
        .take(usize::try_from(limit).unwrap_or(usize::MAX))
        .map(entry)
        .collect();
    let body = match shape {
        Shape::V2 => json!({ "logs": entries }),
        Shape::V1 => {
            let lines: Vec<_> = entries
                .iter()
                .map(|e| json!({ "timestamp": e.timestamp, "line": e.message }))
                .collect();
            json!({ "logs": lines, "logEntries": entries })
        }
    };
    Ok(reply::json(StatusCode::OK, &body))
}

fn entry(record: &api::AuditRecord) -> Entry {
    let target = match (record.name.as_str(), record.addr.as_str()) {
        ("", "") => String::new(),
        (name, "") | ("", name) => format!(" {name}"),
        (name, addr) => format!(" {name} ({addr})"),
    };
    let port = if record.port == 0 {
        String::new()
    } else {
        format!(" port {}", record.port)
    };
    Entry {
        timestamp: time::rfc3339(record.at_ms),
        level: if record.allowed { "info" } else { "warn" },
        message: format!("{}{target}{port}: {}", record.protocol, record.verdict),
        fields: json!({
            "protocol": record.protocol,
            "name": record.name,
            "addr": record.addr,
            "port": record.port,
            "verdict": record.verdict,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_a_warning_naming_what_and_why() {
        let record = api::AuditRecord {
            seq: 1,
            at_ms: 0,
            protocol: "ingress".into(),
            name: "from 127.0.0.1".into(),
            addr: String::new(),
            port: 8080,
            allowed: false,
            verdict: "refused: no token".into(),
        };
        let entry = entry(&record);
        assert_eq!(entry.level, "warn");
        assert_eq!(
            entry.message,
            "ingress from 127.0.0.1 port 8080: refused: no token"
        );
        assert_eq!(entry.timestamp, time::rfc3339(0));
    }
}
