//! `airlock sandbox net ID [--allow RULE]... [--deny RULE]... [--json]`: a
//! running sandbox's network policy and audit, and changes to its rules.
//!
//! Rules are parsed here as `--allow-net` parses them, so a bad one is a
//! usage error before the server is asked. The server removes the `--deny`
//! rules, then appends the `--allow` rules, at once
//! (`Network.ChangePolicy`); then this prints the rules in force, one
//! `allow RULE` line each, and the audit, one line per record as the
//! library writes an [`AuditRecord`](airlock::AuditRecord); `--json` prints
//! both as one object.

use airlock::NetRule;
use airlock_client::{api, Client};
use serde::Serialize;

use super::net_options::parse_rule;
use super::remote::message;

/// `airlock sandbox net` options.
#[derive(Debug, clap::Args)]
pub struct NetArgs {
    /// The sandbox, as `create` printed it.
    pub id: String,

    /// Add an allow rule (as --allow-net takes it). Repeatable.
    #[arg(long, value_name = "RULE", value_parser = parse_rule)]
    pub allow: Vec<NetRule>,

    /// Remove an allow rule, as listed (removed before --allow adds);
    /// what no rule allows is refused. Repeatable.
    #[arg(long, value_name = "RULE", value_parser = parse_rule)]
    pub deny: Vec<NetRule>,

    /// Print JSON instead of lines.
    #[arg(long)]
    pub json: bool,
}

/// What `sandbox net --json` prints.
#[derive(Debug, Serialize)]
struct Report {
    rules: Vec<String>,
    audit: Vec<AuditEntry>,
}

/// One audit record of `--json`.
#[derive(Debug, Serialize)]
struct AuditEntry {
    seq: u64,
    at_unix_ms: u64,
    protocol: String,
    name: Option<String>,
    addr: Option<String>,
    port: u32,
    allowed: bool,
    /// `allowed`, or `refused: ` and why.
    verdict: String,
}

impl From<api::AuditRecord> for AuditEntry {
    fn from(record: api::AuditRecord) -> AuditEntry {
        AuditEntry {
            seq: record.seq,
            at_unix_ms: record.at_ms,
            protocol: record.protocol,
            name: (!record.name.is_empty()).then_some(record.name),
            addr: (!record.addr.is_empty()).then_some(record.addr),
            port: record.port,
            allowed: record.allowed,
            verdict: record.verdict,
        }
    }
}

pub async fn run(client: &Client, args: NetArgs) -> Result<(), String> {
    let texts = |rules: &[NetRule]| rules.iter().map(ToString::to_string).collect::<Vec<_>>();
    let mut network = client.network();
    let policy = match args.allow.is_empty() && args.deny.is_empty() {
        true => {
            network
                .get_policy(api::GetPolicyRequest {
                    sandbox_id: args.id.clone(),
                })
                .await
        }
        false => {
            network
                .change_policy(api::ChangePolicyRequest {
                    sandbox_id: args.id.clone(),
                    allow: texts(&args.allow),
                    deny: texts(&args.deny),
                })
                .await
        }
    }
    .map_err(|status| message(status.into()))?
    .into_inner();
    let rules = policy.rules;
    let audit: Vec<AuditEntry> = network
        .audit(api::AuditRequest {
            sandbox_id: args.id.clone(),
            after_seq: 0,
        })
        .await
        .map_err(|status| message(status.into()))?
        .into_inner()
        .records
        .into_iter()
        .map(AuditEntry::from)
        .collect();
    if args.json {
        let report = Report { rules, audit };
        let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        println!("{text}");
    } else {
        print!("{}", lines(&rules, &audit));
    }
    Ok(())
}

/// The rules, one `allow RULE` line each (or a line saying there are
/// none), then a line per audit record.
fn lines(rules: &[String], audit: &[AuditEntry]) -> String {
    let mut out = String::new();
    if rules.is_empty() {
        out.push_str("no rules: every connection and DNS query is refused\n");
    }
    for rule in rules {
        out.push_str(&format!("allow {rule}\n"));
    }
    for record in audit {
        out.push_str(&audit_line(record));
        out.push('\n');
    }
    out
}

/// A record's line, as the library's `Display` writes an
/// [`AuditRecord`](airlock::AuditRecord): `#SEQ SECONDS.MILLIS PROTOCOL
/// DESTINATION VERDICT`.
fn audit_line(record: &AuditEntry) -> String {
    let port = record.port;
    let destination = match (&record.name, &record.addr) {
        (Some(name), Some(addr)) => format!("{name}:{port} ({addr})"),
        (Some(name), None) => format!("{name}:{port}"),
        (None, Some(addr)) if addr.contains(':') => format!("[{addr}]:{port}"),
        (None, Some(addr)) => format!("{addr}:{port}"),
        (None, None) => format!("?:{port}"),
    };
    format!(
        "#{} {}.{:03} {} {destination} {}",
        record.seq,
        record.at_unix_ms / 1000,
        record.at_unix_ms % 1000,
        record.protocol,
        record.verdict
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use clap::Parser;

    use super::super::{sandbox, Args, Commands};
    use super::*;

    fn parse(args: &[&str]) -> Result<NetArgs, clap::Error> {
        let argv = [&["airlock", "sandbox", "net"], args].concat();
        Args::try_parse_from(argv).map(|args| match args.command {
            Commands::Sandbox(sandbox::SandboxArgs {
                command: sandbox::SandboxCommand::Net(net),
                ..
            }) => net,
            other => panic!("{other:?}"),
        })
    }

    #[test]
    fn net_takes_rules_to_allow_and_deny() {
        let net = parse(&[
            "sb",
            "--allow",
            "192.0.2.9/32:80",
            "--deny",
            "index.example.com",
            "--json",
        ])
        .unwrap();
        assert_eq!(net.id, "sb");
        assert_eq!(net.allow[0].to_string(), "192.0.2.9:80");
        assert_eq!(net.deny[0].to_string(), "index.example.com");
        assert!(net.json);
        let error = parse(&["sb", "--allow", "*.*.test"])
            .unwrap_err()
            .to_string();
        assert!(error.contains("\"*.*.test\""), "{error}");
    }

    #[test]
    fn rules_then_a_line_per_record() {
        let record = AuditEntry::from(api::AuditRecord {
            seq: 3,
            at_ms: 1_754_000_000_042,
            protocol: "tcp".into(),
            addr: "192.0.2.9".into(),
            port: 80,
            verdict: "refused: no rule allows it".into(),
            ..Default::default()
        });
        assert_eq!(
            lines(&["127.0.0.1".into()], &[record]),
            "allow 127.0.0.1\n#3 1754000000.042 tcp 192.0.2.9:80 refused: no rule allows it\n"
        );
        assert!(lines(&[], &[]).starts_with("no rules"));
    }
}
