//! `airlock snapshot ls|rm`: the named snapshots a server keeps for you
//! (`airlock sandbox snapshot ID` takes one, `sandbox create --snapshot
//! NAME` starts a clone of one), through its API like `airlock sandbox
//! ...`: the local server, or a remote one with `--host`/`AIRLOCK_HOST` and
//! a key. A snapshot counts in the key's storage quota until `rm`; its
//! files go once no sandbox started from it needs them.

use airlock_client::{api, Client};
use clap::Subcommand;
use serde::Serialize;

use super::remote::{message, ServerOptions};
use super::session::fail;

/// `airlock snapshot` and its options.
#[derive(Debug, clap::Args)]
pub struct SnapshotArgs {
    #[command(flatten)]
    pub server: ServerOptions,

    #[command(subcommand)]
    pub command: SnapshotCommand,
}

#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// List your snapshots: name, content id, the sandbox it was taken of,
    /// size, how long that sandbox was stopped, sandboxes started from it.
    Ls {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Only the snapshots taken of this sandbox.
        #[arg(long, value_name = "ID")]
        sandbox: Option<String>,
    },
    /// Delete snapshots by name (sandboxes started from one run on).
    Rm {
        #[arg(required = true, value_name = "NAME")]
        names: Vec<String>,
    },
}

/// One snapshot as `ls` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct Entry {
    name: String,
    /// The SHA-256 of the saved machine.
    id: String,
    source_sandbox_id: String,
    image: String,
    template: String,
    parent_snapshot: String,
    memory_mib: u32,
    vcpus: u32,
    size_bytes: u64,
    paused_ms: u64,
    took_ms: u64,
    created_at_ms: u64,
    /// Live sandboxes started from it.
    sandboxes: u32,
}

impl From<api::SnapshotInfo> for Entry {
    fn from(info: api::SnapshotInfo) -> Entry {
        Entry {
            name: info.name,
            id: info.id,
            source_sandbox_id: info.source_sandbox_id,
            image: info.image,
            template: info.template,
            parent_snapshot: info.parent_snapshot,
            memory_mib: info.memory_mib,
            vcpus: info.vcpus,
            size_bytes: info.size_bytes,
            paused_ms: info.paused_ms,
            took_ms: info.took_ms,
            created_at_ms: info.created_at_ms,
            sandboxes: info.sandboxes,
        }
    }
}

/// Runs a `snapshot` subcommand and returns the exit code.
pub async fn run(args: SnapshotArgs) -> u8 {
    let client = match args.server.connect().await {
        Ok(client) => client,
        Err(message) => return fail(&message),
    };
    match call(&client, args.command).await {
        Ok(()) => 0,
        Err(message) => fail(&message),
    }
}

async fn call(client: &Client, command: SnapshotCommand) -> Result<(), String> {
    match command {
        SnapshotCommand::Ls { json, sandbox } => {
            let listed: Vec<Entry> = client
                .snapshots(sandbox.as_deref())
                .await
                .map_err(message)?
                .into_iter()
                .map(Entry::from)
                .collect();
            if json {
                let text = serde_json::to_string_pretty(&listed).map_err(|e| e.to_string())?;
                super::stdout::print(&format!("{text}\n"));
            } else {
                super::stdout::print(&table(&listed));
            }
            Ok(())
        }
        SnapshotCommand::Rm { names } => {
            let mut failed = false;
            for name in names {
                match client.delete_snapshot(&name).await {
                    Ok(()) => println!("removed {name}"),
                    Err(error) => {
                        eprintln!("airlock: {}", message(error));
                        failed = true;
                    }
                }
            }
            // Each failure is printed; the exit code says there was one.
            match failed {
                false => Ok(()),
                true => Err("not every snapshot was removed".into()),
            }
        }
    }
}

/// What `sandbox snapshot` says on stderr of the snapshot it took.
pub fn taken(info: &api::SnapshotInfo) -> String {
    format!(
        "snapshot {} of {}: the sandbox stopped {} ms, ready in {:.1} s, {}",
        info.name,
        info.source_sandbox_id,
        info.paused_ms,
        info.took_ms as f64 / 1000.0,
        mib(info.size_bytes)
    )
}

fn mib(bytes: u64) -> String {
    format!("{}M", bytes.div_ceil(1 << 20))
}

/// The content id as `ls` shows it: its first 12 hex digits.
fn short_id(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// The `ls` table.
fn table(snapshots: &[Entry]) -> String {
    let width = |column: fn(&Entry) -> usize, title: &str| {
        snapshots
            .iter()
            .map(column)
            .max()
            .unwrap_or(0)
            .max(title.len())
    };
    let name = width(|s| s.name.len(), "NAME");
    let source = width(|s| s.source_sandbox_id.len(), "SOURCE");
    let mut out = format!(
        "{:<name$}  {:<12}  {:<source$}  {:>9}  {:>9}  SANDBOXES\n",
        "NAME", "ID", "SOURCE", "SIZE", "PAUSED"
    );
    for s in snapshots {
        out.push_str(&format!(
            "{:<name$}  {:<12}  {:<source$}  {:>9}  {:>9}  {}\n",
            s.name,
            short_id(&s.id),
            s.source_sandbox_id,
            mib(s.size_bytes),
            format!("{}ms", s.paused_ms),
            s.sandboxes
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str) -> Entry {
        Entry {
            name: name.into(),
            id: "0123456789abcdef".repeat(4),
            source_sandbox_id: "sandbox-abc".into(),
            image: "default".into(),
            template: String::new(),
            parent_snapshot: String::new(),
            memory_mib: 512,
            vcpus: 1,
            size_bytes: (300 << 20) + 1,
            paused_ms: 85,
            took_ms: 2300,
            created_at_ms: 0,
            sandboxes: 2,
        }
    }

    #[test]
    fn the_table_has_a_line_per_snapshot_with_a_short_id_and_mib() {
        let table = table(&[entry("web"), entry("a-longer-name")]);
        let lines: Vec<_> = table.lines().collect();
        assert_eq!(lines.len(), 3, "{table}");
        assert!(lines[0].starts_with("NAME "), "{table}");
        let columns: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(
            columns,
            ["web", "0123456789ab", "sandbox-abc", "301M", "85ms", "2"],
            "{table}"
        );
        assert!(lines[2].starts_with("a-longer-name  0123"), "{table}");
    }

    #[test]
    fn a_taken_snapshot_says_how_long_its_sandbox_stopped() {
        let info = api::SnapshotInfo {
            name: "web".into(),
            source_sandbox_id: "sandbox-abc".into(),
            paused_ms: 85,
            took_ms: 2300,
            size_bytes: 300 << 20,
            ..api::SnapshotInfo::default()
        };
        assert_eq!(
            taken(&info),
            "snapshot web of sandbox-abc: the sandbox stopped 85 ms, ready in 2.3 s, 300M"
        );
    }
}
