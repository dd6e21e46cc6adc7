//! `airlock workspace create|ls|rm`: the named workspaces a server keeps
//! for you (what `sandbox create --workspace NAME` attaches), through its
//! API like `airlock sandbox ...`: the local server, or a remote one with
//! `--host`/`AIRLOCK_HOST` and a key. Each is a disk of a fixed size that
//! counts in the key's quota; `rm` deletes it and gives its space back.

use airlock_client::{api, Client};
use clap::Subcommand;
use serde::Serialize;

use super::remote::{message, ServerOptions};
use super::session::fail;

/// `airlock workspace` and its options.
#[derive(Debug, clap::Args)]
pub struct WorkspaceArgs {
    #[command(flatten)]
    pub server: ServerOptions,

    /// The owner only: the workspaces of this API key instead of the
    /// owner's own.
    #[arg(long, global = true, value_name = "NAME")]
    pub key: Option<String>,

    #[command(subcommand)]
    pub command: WorkspaceCommand,
}

#[derive(Debug, Subcommand)]
pub enum WorkspaceCommand {
    /// Make an empty workspace (`sandbox create --workspace NAME` also
    /// makes one on first use).
    Create {
        name: String,
        /// Its size, e.g. 512M, 4G (default 4G; sparse: the host's disk
        /// holds what the guest writes, up to this).
        #[arg(long, value_name = "SIZE", value_parser = super::parse_size)]
        size: Option<u64>,
    },
    /// List the workspaces: size, host disk used, the sandbox holding it.
    Ls {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Remove workspaces and what they hold (not while a sandbox holds
    /// one: kill it first).
    Rm {
        #[arg(required = true, value_name = "NAME")]
        names: Vec<String>,
    },
}

/// One workspace as `ls` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct Entry {
    name: String,
    size_bytes: u64,
    used_bytes: u64,
    /// The sandbox holding it.
    sandbox: Option<String>,
    in_use: bool,
    created_at_ms: u64,
}

impl From<api::WorkspaceInfo> for Entry {
    fn from(info: api::WorkspaceInfo) -> Entry {
        Entry {
            name: info.name,
            size_bytes: info.size_bytes,
            used_bytes: info.used_bytes,
            sandbox: (!info.sandbox_id.is_empty()).then_some(info.sandbox_id),
            in_use: info.in_use,
            created_at_ms: info.created_at_ms,
        }
    }
}

/// Runs a `workspace` subcommand and returns the exit code.
pub async fn run(args: WorkspaceArgs) -> u8 {
    let client = match args.server.connect().await {
        Ok(client) => client,
        Err(message) => return fail(&message),
    };
    let key = args.key.unwrap_or_default();
    match call(&client, key, args.command).await {
        Ok(()) => 0,
        Err(message) => fail(&message),
    }
}

async fn call(client: &Client, key: String, command: WorkspaceCommand) -> Result<(), String> {
    let mut workspaces = client.workspaces();
    match command {
        WorkspaceCommand::Create { name, size } => {
            let size_mib = match size {
                None => 0,
                Some(bytes) => whole_mib(bytes)?,
            };
            let made = workspaces
                .create_workspace(api::CreateWorkspaceRequest {
                    name,
                    size_mib,
                    key,
                })
                .await
                .map_err(|status| message(status.into()))?
                .into_inner();
            eprintln!(
                "airlock: workspace {} made, {}",
                made.name,
                mib(made.size_bytes)
            );
            Ok(())
        }
        WorkspaceCommand::Ls { json } => {
            let listed: Vec<Entry> = workspaces
                .list_workspaces(api::ListWorkspacesRequest { key })
                .await
                .map_err(|status| message(status.into()))?
                .into_inner()
                .workspaces
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
        WorkspaceCommand::Rm { names } => {
            let mut failed = None;
            for name in names {
                let removed = workspaces
                    .remove_workspace(api::RemoveWorkspaceRequest {
                        name: name.clone(),
                        key: key.clone(),
                    })
                    .await;
                match removed {
                    Ok(answer) => println!(
                        "removed {name} ({} freed)",
                        mib(answer.into_inner().freed_bytes)
                    ),
                    Err(status) => {
                        let text = message(status.into());
                        eprintln!("airlock: {text}");
                        failed = Some(text);
                    }
                }
            }
            // Each failure is printed; the exit code says there was one.
            match failed {
                None => Ok(()),
                Some(_) => Err("not every workspace was removed".into()),
            }
        }
    }
}

/// `bytes` as the API's MiB, refusing a size that is not whole MiB.
pub fn whole_mib(bytes: u64) -> Result<u64, String> {
    if bytes.is_multiple_of(1 << 20) {
        Ok(bytes >> 20)
    } else {
        Err(format!(
            "a workspace's size is whole MiB (such as 512M or 4G), not {bytes} bytes"
        ))
    }
}

fn mib(bytes: u64) -> String {
    format!("{}M", bytes.div_ceil(1 << 20))
}

/// The `ls` table.
fn table(workspaces: &[Entry]) -> String {
    let width = workspaces
        .iter()
        .map(|w| w.name.len())
        .max()
        .unwrap_or(0)
        .max(4);
    let mut out = format!(
        "{:<width$}  {:>9}  {:>9}  {:<19}  IN USE BY\n",
        "NAME", "SIZE", "ON DISK", "CREATED (UTC)"
    );
    for w in workspaces {
        let by = match (&w.sandbox, w.in_use) {
            (Some(id), _) => id.as_str(),
            (None, true) => "(a sandbox starting)",
            (None, false) => "-",
        };
        let created = match w.created_at_ms {
            0 => "-".to_owned(),
            ms => super::template::utc(ms / 1000),
        };
        out.push_str(&format!(
            "{:<width$}  {:>9}  {:>9}  {created:<19}  {by}\n",
            w.name,
            mib(w.size_bytes),
            mib(w.used_bytes)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_the_holder_and_sizes_in_mib() {
        let entry = Entry {
            name: "notes".into(),
            size_bytes: 64 << 20,
            used_bytes: (3 << 20) + 1,
            sandbox: Some("sandbox-abc".into()),
            in_use: true,
            created_at_ms: 86_400_000,
        };
        let free = Entry {
            name: "spare".into(),
            sandbox: None,
            in_use: false,
            created_at_ms: 0,
            ..entry.clone()
        };
        let table = table(&[entry, free]);
        let lines: Vec<_> = table.lines().collect();
        assert!(lines[0].starts_with("NAME "), "{table}");
        assert!(lines[1].starts_with("notes"), "{table}");
        assert!(
            lines[1].contains("64M") && lines[1].contains("4M"),
            "{table}"
        );
        assert!(lines[1].contains("1970-01-02 00:00:00"), "{table}");
        assert!(lines[1].ends_with("sandbox-abc"), "{table}");
        assert!(lines[2].ends_with(" -"), "{table}");
    }

    #[test]
    fn sizes_are_whole_mib() {
        assert_eq!(whole_mib(512 << 20), Ok(512));
        assert!(whole_mib(1000).is_err());
    }
}
