//! Argument parsing and dispatch for the `airlock` binary.
//!
//! - `run`: boot a fresh sandbox, run one command, stream its output, tear
//!   down; `changes` lists (and downloads) what the command changed.
//! - `image`: list and remove the root filesystem images in the image store.
//! - `shell`: an interactive shell on a terminal in a fresh sandbox (the
//!   host terminal handled by `terminal`).
//! - `gc`: kill and remove the sandboxes whose owner process died.
//! - `logging`: the subscriber every command logs through (text, or
//!   `serve --log-format json`), and `telemetry`, `serve --otlp-endpoint`'s
//!   OTLP exporter (the `otlp` feature).
//! - `serve`: the Airlock server (crate `airlock-server`) in the foreground;
//!   `sandbox` and `key`: clients of it (crate `airlock-client`), local or
//!   remote (`remote` says where the server is and maps its messages);
//!   `run_code` is `sandbox run-code`, a cell of code in a sandbox's
//!   persistent context; `copy` is `sandbox cp`; `workspace` is `workspace
//!   create|ls|rm`, the server's named workspaces; `snapshot` is `snapshot
//!   ls|rm`, the named snapshots `sandbox snapshot` takes; `usage` is the
//!   server's usage ledger, by sandbox, key or day; `events` prints the
//!   server's lifecycle events and `webhook` registers URLs for them.
//! - `mcp`: the MCP server (crate `airlock-mcp`) over stdio or streamable
//!   HTTP, a client of the same server.
//! - `program_options`: [`ProgramOptions`], how to run the program (env,
//!   cwd, user, timeout, limits, privilege), flattened into `run`, `shell`
//!   and `sandbox exec` (which carries them in its start).
//! - `session`: the one loop that drives a program for `run` (a local
//!   execution) and `sandbox exec` (a server's process stream): host stdin,
//!   Ctrl-C, output, the exit message and code.
//! - `program`: the pieces the sessions share (output on the host's
//!   streams, host stdin, exit code); `shell` reads the host's stdin with
//!   it too.
//! - `vm_options`: the VM options of `run`, `shell` and `sandbox create`, and
//!   the sandbox builder they describe; `net_options` is their network
//!   (`--allow-net`, `--secret`), and `net` is `sandbox net`, a running
//!   sandbox's policy and audit.

mod changes;
mod copy;
mod events;
mod gc;
mod image;
mod key;
mod logging;
mod mcp;
mod net;
mod net_options;
mod ports;
mod program;
mod program_options;
mod remote;
mod run;
mod run_code;
mod sandbox;
mod serve;
mod session;
mod shell;
mod snapshot;
mod stdout;
mod telemetry;
mod template;
mod template_build;
mod template_remote;
mod terminal;
mod transfer;
mod usage;
mod vm_options;
mod webhook;
mod workspace;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

pub use program_options::{ProgramOptions, ProgramOptionsError};
pub use telemetry::Telemetry;
use vm_options::BootOptions;

/// Exit code when Airlock itself failed (not the command): as docker run does.
pub const EXIT_AIRLOCK_ERROR: u8 = 125;

/// Run untrusted code in disposable microVMs.
#[derive(Debug, Parser)]
#[command(name = "airlock", version, about)]
pub struct Args {
    /// Log what Airlock does and print where the time went.
    #[arg(short, long, global = true)]
    pub verbose: bool,

    #[command(subcommand)]
    pub command: Commands,
}

#[derive(Debug, Subcommand)]
pub enum Commands {
    /// Boot a fresh sandbox, run a command in it, and exit with its exit code.
    Run(Box<RunArgs>),
    /// Open an interactive shell (or CMD) on a terminal in a fresh sandbox,
    /// and exit with its exit code.
    Shell(Box<shell::ShellArgs>),
    /// Manage root filesystem images (built by `airlock-rootfs image build`).
    #[command(subcommand)]
    Image(ImageCommand),
    /// Build, list or remove templates (named ones, and the snapshots
    /// that starts clone).
    #[command(subcommand)]
    Template(template::TemplateCommand),
    /// Kill and remove the sandboxes whose owner process died (under
    /// AIRLOCK_STATE_DIR, else $XDG_RUNTIME_DIR/airlock or /tmp/airlock),
    /// and the templates nothing can use any more.
    Gc(gc::GcArgs),
    /// Sandboxes that outlive one command, kept by a server (the local one,
    /// started on demand, or --host/AIRLOCK_HOST): create, ls, exec,
    /// run-code, cp, net, pause, resume, fork, snapshot, kill.
    Sandbox(sandbox::SandboxArgs),
    /// The named snapshots a server keeps for you (what `sandbox snapshot`
    /// takes and `sandbox create --snapshot NAME` starts from): ls, rm.
    Snapshot(snapshot::SnapshotArgs),
    /// Run the Airlock server in the foreground: the local Unix socket,
    /// and with --listen TCP with TLS and API keys.
    Serve(serve::ServeArgs),
    /// Manage the API keys remote clients present (the local owner's).
    Key(key::KeyArgs),
    /// The named workspaces a server keeps for you (what `sandbox create
    /// --workspace NAME` attaches): create, ls, rm.
    Workspace(workspace::WorkspaceArgs),
    /// What sandboxes used, from the server's usage ledger: running,
    /// paused and on-disk time, vCPU-seconds, memory and disk GiB-seconds,
    /// egress and ingress bytes; by sandbox, key or day.
    Usage(Box<usage::UsageArgs>),
    /// Lifecycle events of the server's sandboxes (created, paused,
    /// resumed, snapshotted, forked, timed out, killed, lost, ended), from
    /// its log and with --follow as they happen.
    Events(events::EventsArgs),
    /// The URLs the server posts your sandboxes' events to, signed: add,
    /// ls, rm.
    Webhook(webhook::WebhookArgs),
    /// Serve the Model Context Protocol, so agent hosts run code in
    /// sandboxes: over stdio (what desktop and IDE hosts start), or with
    /// --http over streamable HTTP for callers with an API key.
    Mcp(Box<mcp::McpArgs>),
}

#[derive(Debug, Subcommand)]
pub enum ImageCommand {
    /// List the images in the store.
    Ls,
    /// Remove names or ids; an image goes when no name points at it.
    Rm {
        /// Image names or ids.
        #[arg(required = true, value_name = "NAME")]
        names: Vec<String>,
    },
}

/// `airlock run` options.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub boot: BootOptions,

    #[command(flatten)]
    pub program: ProgramOptions,

    /// Copy a host file or directory into the guest before the command
    /// (directories keep modes and symlinks). Repeatable.
    #[arg(long, value_name = "HOST:GUEST", value_parser = transfer::parse_upload)]
    pub upload: Vec<transfer::Transfer>,

    /// Copy a guest file or directory to the host after the command
    /// (whatever its exit status). Repeatable.
    #[arg(long, value_name = "GUEST:HOST", value_parser = transfer::parse_download)]
    pub download: Vec<transfer::Transfer>,

    /// After the command, print on stderr what it created, modified and
    /// deleted under these guest directories (comma-separated; default
    /// /root and /tmp), with sizes.
    #[arg(
        long,
        value_name = "DIRS",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "",
        value_parser = parse_roots,
    )]
    pub changes: Option<changes::Roots>,

    /// Download the files the command created or modified (see --changes)
    /// into HOSTDIR, each under its guest path.
    #[arg(long, value_name = "HOSTDIR")]
    pub download_changes: Option<PathBuf>,

    /// The program and its arguments.
    #[arg(required = true, last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Parses `--changes=DIR,DIR`: absolute guest directories (none: the
/// defaults).
fn parse_roots(text: &str) -> Result<changes::Roots, String> {
    text.split(',')
        .filter(|part| !part.is_empty())
        .map(|part| {
            if part.starts_with('/') {
                Ok(PathBuf::from(part))
            } else {
                Err(format!("{part:?} is not an absolute guest directory"))
            }
        })
        .collect::<Result<_, _>>()
        .map(changes::Roots)
}

/// Parses a size with an optional binary suffix: `4G`, `512M`, `65536`.
fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (digits, shift) = match text.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => return Err(format!("unknown size suffix in {text:?}; use K, M, G or T")),
            };
            (&text[..i], shift)
        }
        _ => (text, 0),
    };
    let number: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a size like 4G or 512M"))?;
    number
        .checked_mul(1 << shift)
        .ok_or_else(|| format!("{text:?} is too big"))
}

/// Installs the tracing subscriber (see `logging`): warnings by default,
/// Airlock's own progress with `--verbose`, anything with `RUST_LOG`; as
/// text, or as `serve --log-format` says, with the OTLP exporter `serve
/// --otlp-endpoint` asks for. Call it with the tokio runtime entered; the
/// [`Telemetry`] flushes the traces at the end.
pub fn init_tracing(args: &Args) -> Result<Telemetry, logging::LoggingError> {
    let options = match &args.command {
        Commands::Serve(serve) => Some(&serve.log),
        _ => None,
    };
    logging::init(args.verbose, options)
}

/// Runs the parsed command and returns the process exit code.
pub async fn main(args: Args) -> u8 {
    match args.command {
        Commands::Run(run) => run::run(*run, args.verbose).await,
        Commands::Shell(shell) => shell::run(*shell, args.verbose).await,
        Commands::Image(command) => image::run(command),
        Commands::Template(command) => template::run(command).await,
        Commands::Gc(gc_args) => gc::run(gc_args).await,
        Commands::Sandbox(sandbox_args) => sandbox::run(sandbox_args).await,
        Commands::Serve(serve_args) => serve::run(serve_args).await,
        Commands::Key(key_args) => key::run(key_args).await,
        Commands::Workspace(args) => workspace::run(args).await,
        Commands::Snapshot(args) => snapshot::run(args).await,
        Commands::Usage(args) => usage::run(*args).await,
        Commands::Events(args) => events::run(args).await,
        Commands::Webhook(args) => webhook::run(args).await,
        Commands::Mcp(mcp_args) => mcp::run(*mcp_args).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_suffixes() {
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert_eq!(parse_size("512m"), Ok(512 << 20));
        assert_eq!(parse_size("65536"), Ok(65536));
        assert!(parse_size("4X").is_err());
        assert!(parse_size("G").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn run_takes_env_cwd_user_and_timeout() {
        let args = Args::try_parse_from([
            "airlock",
            "run",
            "-e",
            "A=1",
            "--env",
            "B=2",
            "--cwd",
            "/tmp",
            "--user",
            "1000",
            "--timeout",
            "2.5",
            "--",
            "env",
        ])
        .unwrap();
        let Commands::Run(run) = args.command else {
            panic!("not run")
        };
        assert_eq!(
            run.program.env,
            [("A".into(), "1".into()), ("B".into(), "2".into())]
        );
        assert_eq!(run.program.cwd.as_deref(), Some("/tmp"));
        assert_eq!(run.program.user.as_deref(), Some("1000"));
        assert_eq!(run.program.timeout, Some(2.5));
    }

    #[test]
    fn run_takes_limits_and_privileged() {
        let args = Args::try_parse_from([
            "airlock",
            "run",
            "--limit-memory",
            "64M",
            "--limit-pids",
            "32",
            "--limit-cpus",
            "0.5",
            "--privileged",
            "--",
            "true",
        ])
        .unwrap();
        let Commands::Run(run) = args.command else {
            panic!("not run")
        };
        assert_eq!(run.program.limit_memory, Some(64 << 20));
        assert_eq!(run.program.limit_pids, Some(32));
        assert_eq!(run.program.limit_cpus, Some(500));
        assert!(run.program.privileged);
    }

    #[test]
    fn run_shell_and_sandbox_exec_take_the_same_program_options() {
        let options = [
            "-e",
            "A=1",
            "--cwd",
            "/tmp",
            "-u",
            "1000",
            "--timeout",
            "5",
            "--limit-memory",
            "64M",
            "--limit-pids",
            "16",
            "--limit-cpus",
            "1",
            "--privileged",
        ];
        let parse = |command: &[&str]| {
            let argv = [&["airlock"], command, &options, &["--", "sh"]].concat();
            match Args::try_parse_from(&argv).unwrap().command {
                Commands::Run(run) => run.program,
                Commands::Shell(shell) => shell.program,
                Commands::Sandbox(sandbox::SandboxArgs {
                    command: sandbox::SandboxCommand::Exec(exec),
                    ..
                }) => exec.program,
                other => panic!("{other:?}"),
            }
        };
        let run = parse(&["run"]);
        assert_eq!(run.limit_memory, Some(64 << 20));
        assert!(run.privileged);
        assert_eq!(parse(&["shell"]), run);
        assert_eq!(parse(&["sandbox", "exec", "sandbox-x"]), run);
    }

    #[test]
    fn gc_takes_dry_run_and_grace() {
        let args = Args::try_parse_from(["airlock", "gc", "--dry-run", "--grace", "5"]).unwrap();
        let Commands::Gc(gc) = args.command else {
            panic!("not gc")
        };
        assert!(gc.dry_run);
        assert_eq!(gc.grace, 5);
        let args = Args::try_parse_from(["airlock", "gc"]).unwrap();
        let Commands::Gc(gc) = args.command else {
            panic!("not gc")
        };
        assert!(!gc.dry_run);
        assert_eq!(gc.grace, airlock::gc::DEFAULT_GRACE.as_secs());
    }

    #[test]
    fn shell_takes_vm_options_and_an_optional_command() {
        let args = Args::try_parse_from(["airlock", "shell", "--no-image", "-e", "A=1"]).unwrap();
        let Commands::Shell(shell) = args.command else {
            panic!("not shell")
        };
        assert!(shell.boot.vm.no_image);
        assert!(shell.command.is_empty(), "sh by default");
        assert_eq!(shell.program.env, [("A".into(), "1".into())]);
        let args = Args::try_parse_from([
            "airlock",
            "shell",
            "--workspace",
            "w.img",
            "--",
            "python3",
            "-q",
        ])
        .unwrap();
        let Commands::Shell(shell) = args.command else {
            panic!("not shell")
        };
        assert_eq!(
            shell.boot.vm.workspace.as_deref(),
            Some(std::path::Path::new("w.img"))
        );
        assert_eq!(shell.command, ["python3", "-q"]);
    }

    #[test]
    fn run_takes_changes_with_or_without_roots() {
        let parse = |args: &[&str]| {
            let argv = [&["airlock", "run"], args, &["--", "true"]].concat();
            match Args::try_parse_from(&argv).unwrap().command {
                Commands::Run(run) => (run.changes.map(|r| r.0), run.download_changes),
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(parse(&[]), (None, None));
        assert_eq!(parse(&["--changes"]), (Some(vec![]), None));
        assert_eq!(
            parse(&["--changes=/root,/work", "--download-changes", "out"]),
            (
                Some(vec![PathBuf::from("/root"), PathBuf::from("/work")]),
                Some(PathBuf::from("out"))
            )
        );
        assert!(Args::try_parse_from(["airlock", "run", "--changes=tmp", "--", "true"]).is_err());
    }

    #[test]
    fn sandbox_run_code_takes_code_or_a_file() {
        let parse = |args: &[&str]| {
            let argv = [&["airlock", "sandbox", "run-code"], args].concat();
            Args::try_parse_from(&argv).map(|args| match args.command {
                Commands::Sandbox(sandbox::SandboxArgs {
                    command: sandbox::SandboxCommand::RunCode(run),
                    ..
                }) => run,
                other => panic!("{other:?}"),
            })
        };
        let run = parse(&["sb", "-c", "1 + 1"]).unwrap();
        assert_eq!(run.code.as_deref(), Some("1 + 1"));
        assert_eq!(run.lang, airlock::Language::Python);
        let run = parse(&[
            "sb",
            "--lang",
            "bash",
            "--json",
            "--timeout",
            "5",
            "cell.sh",
        ])
        .unwrap();
        assert_eq!(run.file.as_deref(), Some(std::path::Path::new("cell.sh")));
        assert_eq!(run.lang, airlock::Language::Bash);
        assert!(run.json);
        assert!(parse(&["sb"]).is_err(), "code or a file is needed");
        assert!(parse(&["sb", "-c", "x", "file"]).is_err(), "not both");
    }

    #[test]
    fn run_defaults_to_the_default_image() {
        let args = Args::try_parse_from(["airlock", "run", "--", "true"]).unwrap();
        let Commands::Run(run) = args.command else {
            panic!("not run")
        };
        assert_eq!(run.boot.vm.image, "default");
        assert!(!run.boot.vm.no_image);
        assert!(Args::try_parse_from([
            "airlock",
            "run",
            "--no-image",
            "--workspace",
            "w",
            "--",
            "true"
        ])
        .is_err());
    }
}
