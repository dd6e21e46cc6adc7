//! `airlock key create|ls|rm`: the API keys of the local server, which
//! clients on TCP present (`AIRLOCK_API_KEY`). Only the machine's owner
//! manages them, on the server's Unix socket.

use airlock_client::api;
use airlock_client::limits;
use clap::Subcommand;

use super::remote::message;
use super::session::fail;

/// `airlock key` and its options.
#[derive(Debug, clap::Args)]
pub struct KeyArgs {
    /// The local server's socket (default: daemon.sock under
    /// AIRLOCK_STATE_DIR, else $XDG_RUNTIME_DIR/airlock or /tmp/airlock).
    #[arg(long, global = true, value_name = "PATH")]
    pub socket: Option<std::path::PathBuf>,

    #[command(subcommand)]
    pub command: KeyCommand,
}

#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Make a key and print it, once, on the last line of stdout.
    Create {
        /// Its name: letters, digits, '.', '_', '-'.
        name: String,
        /// Live sandboxes it may hold at once (default: no limit of its own).
        #[arg(long, value_name = "N", default_value_t = 0)]
        max_sandboxes: u32,
        /// Guest memory, MiB, its sandboxes may use in all.
        #[arg(long, value_name = "MIB", default_value_t = 0)]
        max_memory: u64,
        /// Calls it may have in flight at once (default: the server's).
        #[arg(long, value_name = "N", default_value_t = 0)]
        max_calls: u32,
        /// Named workspaces it may keep (default: 8).
        #[arg(long, value_name = "N", default_value_t = 0)]
        max_workspaces: u32,
        /// The sum of its workspaces' sizes, MiB: what its guests can fill
        /// on the host's disk (default: 32768).
        #[arg(long, value_name = "MIB", default_value_t = 0)]
        max_workspace_mib: u64,
        /// Snapshots it may keep (default: 16).
        #[arg(long, value_name = "N", default_value_t = 0)]
        max_snapshots: u32,
        /// What its snapshots and the templates it builds may take on the
        /// host's disk, MiB (default: 32768).
        #[arg(long, value_name = "MIB", default_value_t = 0)]
        max_storage_mib: u64,
    },
    /// List the keys (never the keys themselves).
    Ls,
    /// Remove a key: its next call is refused.
    Rm { name: String },
}

/// Runs a `key` subcommand; returns the exit code.
pub async fn run(args: KeyArgs) -> u8 {
    // Keys are the local owner's: never a remote server.
    let socket = args.socket.unwrap_or_else(super::remote::default_socket);
    let program = match std::env::current_exe() {
        Ok(program) => program,
        Err(e) => return fail(&format!("cannot find the airlock binary: {e}")),
    };
    let client = match airlock_client::Client::connect_or_start(&socket, &program).await {
        Ok(client) => client,
        Err(error) => return fail(&message(error)),
    };
    let mut keys = client.keys();
    let outcome = match args.command {
        KeyCommand::Create {
            name,
            max_sandboxes,
            max_memory,
            max_calls,
            max_workspaces,
            max_workspace_mib,
            max_snapshots,
            max_storage_mib,
        } => keys
            .create_key(api::CreateKeyRequest {
                name,
                quota: Some(api::KeyQuota {
                    max_sandboxes,
                    max_memory_mib: max_memory,
                    max_concurrent_calls: max_calls,
                    max_workspaces,
                    max_workspace_mib,
                    max_snapshots,
                    max_storage_mib,
                }),
            })
            .await
            .map(|answer| {
                let answer = answer.into_inner();
                if let Some(key) = answer.key {
                    eprintln!("airlock: key {} made; it is shown this once", key.name);
                }
                println!("{}", answer.secret);
            }),
        KeyCommand::Ls => keys.list_keys(api::ListKeysRequest {}).await.map(|answer| {
            println!(
                "{:<24}  {:>9}  {:>10}  {:>9}  {:>10}  {:>14}  {:>9}  {:>11}",
                "NAME",
                "SANDBOXES",
                "MAX",
                "MAX MIB",
                "WORKSPACES",
                "WORKSPACE MIB",
                "SNAPSHOTS",
                "STORAGE MIB"
            );
            for key in answer.into_inner().keys {
                let quota = key.quota.unwrap_or_default();
                let limit = |n: u64| {
                    if n == 0 {
                        "-".to_owned()
                    } else {
                        n.to_string()
                    }
                };
                // Workspaces: held of the most (0: the server's default).
                let of = |held: u64, max: u64, default: u64| {
                    format!("{held}/{}", if max == 0 { default } else { max })
                };
                println!(
                    "{:<24}  {:>9}  {:>10}  {:>9}  {:>10}  {:>14}  {:>9}  {:>11}",
                    key.name,
                    key.sandboxes,
                    limit(u64::from(quota.max_sandboxes)),
                    limit(quota.max_memory_mib),
                    of(
                        u64::from(key.workspaces),
                        u64::from(quota.max_workspaces),
                        u64::from(limits::DEFAULT_MAX_WORKSPACES)
                    ),
                    of(
                        key.workspace_bytes >> 20,
                        quota.max_workspace_mib,
                        limits::DEFAULT_MAX_WORKSPACE_MIB
                    ),
                    of(
                        u64::from(key.snapshots),
                        u64::from(quota.max_snapshots),
                        u64::from(limits::DEFAULT_MAX_SNAPSHOTS)
                    ),
                    of(
                        key.storage_bytes >> 20,
                        quota.max_storage_mib,
                        limits::DEFAULT_MAX_STORAGE_MIB
                    ),
                );
            }
        }),
        KeyCommand::Rm { name } => keys
            .remove_key(api::RemoveKeyRequest { name: name.clone() })
            .await
            .map(|answer| {
                let left = answer.into_inner().sandbox_ids;
                if !left.is_empty() {
                    eprintln!(
                        "airlock: key {name} removed; its sandboxes run on, the owner's to end: {}",
                        left.join(" ")
                    );
                }
            }),
    };
    match outcome {
        Ok(()) => 0,
        Err(status) => fail(&message(status.into())),
    }
}
