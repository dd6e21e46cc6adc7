//! `airlock sandbox create|ls|exec|run-code|cp|net|pause|resume|kill`: sandboxes that
//! outlive one invocation, kept by the daemon (`airlock serve`, see
//! `airlock::daemon`). A client that finds no daemon on the socket starts
//! one in the background (its log is `daemon.log` beside the socket).
//!
//! The daemon speaks gRPC (`airlock.daemon.v1.Sandboxes`, see
//! `crate::daemon`); its refusals print as the daemon worded them.
//!
//! `exec` behaves like `airlock run`: it takes the same program options
//! ([`ProgramOptions`], carried to the daemon as they are) and is driven by
//! the same [`Session`]: output on the matching host stream, piped stdin
//! forwarded, the first Ctrl-C forwarded as SIGINT (a second one, or
//! SIGTERM, ends the client and with it the program), and the exit code is
//! the program's (128+N for signal N, 124 for `--timeout`, 125 when
//! Airlock failed).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::daemon::{self, wire, Connection};
use airlock_proto::daemon::v1 as pb;
use clap::{Subcommand, ValueEnum};
use serde::Serialize;

use super::session::{fail, Ending, Program, Session};
use super::vm_options::VmOptions;
use super::ProgramOptions;

/// `airlock sandbox` and its options.
#[derive(Debug, clap::Args)]
pub struct SandboxArgs {
    /// The daemon's socket (default: daemon.sock under AIRLOCK_STATE_DIR,
    /// else $XDG_RUNTIME_DIR/airlock or /tmp/airlock).
    #[arg(long, global = true, value_name = "PATH")]
    pub socket: Option<PathBuf>,

    #[command(subcommand)]
    pub command: SandboxCommand,
}

#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Start a sandbox in the daemon and print its id.
    Create(CreateArgs),
    /// List the daemon's sandboxes: state, wall, running and guest CPU time.
    Ls {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Run a command in a sandbox and exit with its exit code.
    Exec(ExecArgs),
    /// Run code in a persistent context (Python or bash): print its output,
    /// rich outputs (images saved to files) and value, or --json.
    RunCode(super::run_code::RunCodeArgs),
    /// Copy a file or directory between the host and a sandbox; exactly one
    /// side is ID:/guest/path (write ./a:b for a host path with a colon).
    Cp {
        #[arg(value_name = "SRC")]
        src: String,
        #[arg(value_name = "DST")]
        dst: String,
    },
    /// Print a sandbox's network rules and every connection and DNS query
    /// its guest made, allowed or refused (or --json); --allow and --deny
    /// change the rules.
    Net(super::net::NetArgs),
    /// Stop a sandbox's CPUs; the next exec or cp resumes it.
    Pause {
        id: String,
        /// Save the whole sandbox (memory, programs, files) to disk and end
        /// its VM process, freeing its memory; resume, exec or cp restores
        /// it, also after the daemon or the host restarted.
        #[arg(long)]
        to_disk: bool,
    },
    /// Restart a paused sandbox's CPUs.
    Resume { id: String },
    /// Kill a sandbox and forget it (one saved to disk: remove its files).
    Kill { id: String },
    /// Make N new sandboxes with a running sandbox's memory, programs and
    /// files; each gets its own id, hostname and entropy. Prints their ids.
    Fork {
        id: String,
        /// How many.
        #[arg(short = 'n', long = "count", default_value_t = 1,
              value_parser = clap::value_parser!(u32).range(1..))]
        count: u32,
    },
}

/// `airlock sandbox create` options.
#[derive(Debug, clap::Args)]
// The shared `--no-image` and `--workspace`, their help worded for `sandbox create`.
#[command(
    mut_arg("no_image", |arg| arg.help(
        "No root image: the initramfs's busybox environment"
    )),
    mut_arg("workspace", |arg| arg.help(
        "Keep what the sandbox writes (outside /tmp) in this disk file; \
         created on first use. One sandbox at a time"
    )),
)]
pub struct CreateArgs {
    #[command(flatten)]
    pub vm: VmOptions,

    /// Kill the sandbox SECS seconds after it started, whatever it does
    /// (default one hour; 0 for no ceiling).
    #[arg(long, value_name = "SECS")]
    pub max_lifetime: Option<u64>,

    /// Pause or stop the sandbox (see --idle) after SECS seconds without
    /// a call.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout: Option<u64>,

    /// What --idle-timeout does.
    #[arg(long, value_enum, default_value_t = Idle::Pause, requires = "idle_timeout")]
    pub idle: Idle,
}

/// `--idle pause|pause-to-disk|stop`: the daemon's `IdlePolicy`, as clap
/// parses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Idle {
    Pause,
    PauseToDisk,
    Stop,
}

impl From<Idle> for pb::IdlePolicy {
    fn from(idle: Idle) -> pb::IdlePolicy {
        match idle {
            Idle::Pause => pb::IdlePolicy::Pause,
            Idle::PauseToDisk => pb::IdlePolicy::PauseToDisk,
            Idle::Stop => pb::IdlePolicy::Stop,
        }
    }
}

/// `airlock sandbox exec` options.
#[derive(Debug, clap::Args)]
pub struct ExecArgs {
    /// The sandbox, as `create` printed it.
    pub id: String,

    /// `run`'s, carried to the daemon as they are.
    #[command(flatten)]
    pub program: ProgramOptions,

    /// The program and its arguments.
    #[arg(required = true, last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Runs a `sandbox` subcommand and returns the exit code.
pub async fn run(args: SandboxArgs) -> u8 {
    let socket = args.socket.unwrap_or_else(daemon::default_socket);
    let outcome = match args.command {
        SandboxCommand::Create(create) => create_sandbox(&socket, create).await,
        SandboxCommand::Ls { json } => list(&socket, json).await,
        SandboxCommand::Exec(exec) => return exec_in(&socket, exec).await,
        SandboxCommand::RunCode(args) => return super::run_code::run(&socket, args).await,
        SandboxCommand::Cp { src, dst } => copy(&socket, &src, &dst).await,
        SandboxCommand::Net(args) => super::net::run(&socket, args).await,
        SandboxCommand::Pause { id, to_disk } => match connect(&socket).await {
            Ok(mut daemon) => daemon.pause(&id, to_disk).await.map_err(message),
            Err(message) => Err(message),
        },
        SandboxCommand::Resume { id } => match connect(&socket).await {
            Ok(mut daemon) => daemon.resume(&id).await.map_err(message),
            Err(message) => Err(message),
        },
        SandboxCommand::Kill { id } => match connect(&socket).await {
            Ok(mut daemon) => daemon.kill(&id).await.map_err(message),
            Err(message) => Err(message),
        },
        SandboxCommand::Fork { id, count } => match connect(&socket).await {
            Ok(mut daemon) => daemon.fork(&id, count).await.map_err(message).map(|ids| {
                for id in ids {
                    println!("{id}");
                }
            }),
            Err(message) => Err(message),
        },
    };
    match outcome {
        Ok(()) => 0,
        Err(message) => fail(&message),
    }
}

/// Connects to the daemon, starting it if needed.
pub(super) async fn connect(socket: &Path) -> Result<Connection, String> {
    let program = std::env::current_exe()
        .map_err(|e| format!("cannot find the airlock binary to start the daemon: {e}"))?;
    Connection::connect_or_start(socket, &program)
        .await
        .map_err(message)
}

/// What the user reads of a failed call.
pub(super) fn message(error: daemon::DaemonError) -> String {
    airlock::error_chain(&error)
}

async fn create_sandbox(socket: &Path, args: CreateArgs) -> Result<(), String> {
    let request = create_request(args)?;
    let id = connect(socket)
        .await?
        .create(request)
        .await
        .map_err(message)?;
    println!("{id}");
    Ok(())
}

/// What `airlock sandbox create` with no options asks the daemon for: the
/// configuration `airlock serve --pool` keeps warm.
pub fn default_create_request() -> Result<pb::CreateRequest, String> {
    #[derive(clap::Parser)]
    struct Defaults {
        #[command(flatten)]
        create: CreateArgs,
    }
    let defaults =
        <Defaults as clap::Parser>::try_parse_from(["create"]).map_err(|e| e.to_string())?;
    create_request(defaults.create)
}

/// The daemon's request for `args`.
fn create_request(args: CreateArgs) -> Result<pb::CreateRequest, String> {
    let image = args.vm.image_file()?.as_deref().map(absolute).transpose()?;
    let workspace = args.vm.workspace.as_deref().map(absolute).transpose()?;
    // The daemon checks them too; a mistake shows before a round trip.
    args.vm.net.network()?;
    let net = &args.vm.net;
    Ok(pb::CreateRequest {
        image: image.map(|path| path.to_string_lossy().into_owned()),
        workspace: workspace.map(|path| path.to_string_lossy().into_owned()),
        memory_mib: args.vm.memory,
        vcpus: args.vm.vcpus,
        cold: args.vm.cold,
        max_lifetime_secs: args.max_lifetime,
        idle: args.idle_timeout.map(|timeout_secs| pb::Idle {
            timeout_secs,
            policy: pb::IdlePolicy::from(args.idle).into(),
        }),
        allow_net: net.allow_net.iter().map(ToString::to_string).collect(),
        secrets: net.secrets.iter().map(pb::Secret::from).collect(),
    })
}

/// One line of `airlock sandbox ls` (and one object of `--json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
struct SandboxEntry {
    id: String,
    /// `running`, `paused`, `on-disk` or `ended`.
    state: &'static str,
    /// Why it ended, once it has.
    ended: Option<String>,
    wall_ms: u64,
    running_ms: u64,
    guest_cpu_ms: u64,
}

impl From<pb::SandboxInfo> for SandboxEntry {
    fn from(info: pb::SandboxInfo) -> SandboxEntry {
        SandboxEntry {
            state: wire::state_name(info.state()),
            id: info.id,
            ended: info.ended,
            wall_ms: info.wall_ms,
            running_ms: info.running_ms,
            guest_cpu_ms: info.guest_cpu_ms,
        }
    }
}

async fn list(socket: &Path, json: bool) -> Result<(), String> {
    let sandboxes: Vec<SandboxEntry> = connect(socket)
        .await?
        .list()
        .await
        .map_err(message)?
        .into_iter()
        .map(SandboxEntry::from)
        .collect();
    if json {
        let text = serde_json::to_string_pretty(&sandboxes).map_err(|e| e.to_string())?;
        println!("{text}");
    } else {
        print!("{}", table(&sandboxes));
    }
    Ok(())
}

/// The `ls` table.
fn table(sandboxes: &[SandboxEntry]) -> String {
    let secs = |ms: u64| format!("{:.1}s", Duration::from_millis(ms).as_secs_f64());
    let width = sandboxes
        .iter()
        .map(|s| s.id.len())
        .max()
        .unwrap_or(0)
        .max(2);
    let mut out = format!(
        "{:<width$}  {:<8}  {:>9}  {:>9}  {:>9}\n",
        "ID", "STATE", "WALL", "RUNNING", "GUEST CPU"
    );
    for s in sandboxes {
        out.push_str(&format!(
            "{:<width$}  {:<8}  {:>9}  {:>9}  {:>9}\n",
            s.id,
            s.state,
            secs(s.wall_ms),
            secs(s.running_ms),
            secs(s.guest_cpu_ms)
        ));
    }
    out
}

/// One side of `cp`.
#[derive(Debug, PartialEq, Eq)]
enum Side {
    Host(PathBuf),
    Guest { id: String, path: PathBuf },
}

/// `ID:/path` is a guest side (the id has no '/'); anything else is a host
/// path.
fn side(text: &str) -> Result<Side, String> {
    match text.split_once(':') {
        Some((id, path)) if !id.is_empty() && !id.contains('/') => {
            if !path.starts_with('/') {
                return Err(format!(
                    "the guest path in {text:?} must be absolute (ID:/path); write ./{text} for a \
                     host path"
                ));
            }
            Ok(Side::Guest {
                id: id.to_owned(),
                path: PathBuf::from(path),
            })
        }
        _ if text.is_empty() => Err("an empty path".into()),
        _ => Ok(Side::Host(PathBuf::from(text))),
    }
}

/// What `cp SRC DST` asks for; the host path is absolute.
#[derive(Debug, PartialEq, Eq)]
enum Copy {
    In {
        id: String,
        host: PathBuf,
        guest: PathBuf,
    },
    Out {
        id: String,
        guest: PathBuf,
        host: PathBuf,
    },
}

/// The copy for `cp SRC DST`.
fn copy_request(src: &str, dst: &str) -> Result<Copy, String> {
    match (side(src)?, side(dst)?) {
        (Side::Host(host), Side::Guest { id, path }) => Ok(Copy::In {
            id,
            host: absolute(&host)?,
            guest: path,
        }),
        (Side::Guest { id, path }, Side::Host(host)) => Ok(Copy::Out {
            id,
            guest: path,
            host: absolute(&host)?,
        }),
        _ => Err("exactly one side of cp must be ID:/guest/path".into()),
    }
}

async fn copy(socket: &Path, src: &str, dst: &str) -> Result<(), String> {
    let request = copy_request(src, dst)?;
    let copied = match connect(socket).await {
        Ok(mut daemon) => match &request {
            Copy::In { id, host, guest } => daemon.copy_in(id, host, guest).await,
            Copy::Out { id, guest, host } => daemon.copy_out(id, guest, host).await,
        }
        .map_err(message),
        Err(message) => Err(message),
    };
    copied.map_err(|message| format!("cannot copy {src} to {dst}: {message}"))
}

/// Runs a program in a sandbox; returns airlock's exit code.
async fn exec_in(socket: &Path, args: ExecArgs) -> u8 {
    let mut session = match Session::new() {
        Ok(session) => session,
        Err(message) => return fail(&message),
    };
    let timeout = match args.program.timeout() {
        Ok(timeout) => timeout,
        Err(error) => return fail(&error.to_string()),
    };
    let start = pb::ExecStart {
        id: args.id,
        argv: args.command,
        options: Some(pb::ProgramOptions::from(&args.program)),
        stdin: session.stdin_piped(),
    };
    let started = async { connect(socket).await?.exec(start).await.map_err(message) };
    let stream = tokio::select! {
        started = started => match started {
            Ok(stream) => stream,
            Err(message) => return fail(&message),
        },
        signal = session.signalled() => return Ending::Signalled(signal).report(None),
    };
    let ran = session
        .drive(Program::Daemon(Box::new(stream)), timeout)
        .await;
    ran.ending.report(timeout)
}

/// `path` made absolute against the current directory (the daemon has
/// its own).
fn absolute(path: &Path) -> Result<PathBuf, String> {
    std::path::absolute(path).map_err(|e| format!("cannot resolve {}: {e}", path.display()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn cp_needs_exactly_one_guest_side() {
        let request = copy_request("data.txt", "sandbox-x1:/tmp/data").unwrap();
        let Copy::In { id, host, guest } = request else {
            panic!("not copy in")
        };
        assert_eq!(id, "sandbox-x1");
        assert!(host.is_absolute() && host.ends_with("data.txt"));
        assert_eq!(guest, PathBuf::from("/tmp/data"));
        let request = copy_request("sb:/etc", "./out:dir").unwrap();
        assert!(matches!(request, Copy::Out { .. }), "{request:?}");
        assert!(copy_request("a", "b").is_err());
        assert!(copy_request("sb:/a", "sb:/b").is_err());
        assert!(copy_request("sb:rel", "b")
            .unwrap_err()
            .contains("absolute"));
    }

    #[test]
    fn the_table_has_a_line_per_sandbox() {
        let entry = SandboxEntry {
            id: "sandbox-abc".into(),
            state: "paused",
            ended: None,
            wall_ms: 12_340,
            running_ms: 10_000,
            guest_cpu_ms: 1_500,
        };
        let table = table(&[entry]);
        let lines: Vec<_> = table.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with("ID"), "{table}");
        assert!(lines[1].starts_with("sandbox-abc  paused"), "{table}");
        assert!(
            lines[1].contains("12.3s") && lines[1].ends_with("1.5s"),
            "{table}"
        );
    }
}
