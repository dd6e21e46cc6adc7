//! Argument parsing and dispatch for the `airlock` binary.
//!
//! - `run`: boot a fresh sandbox, run one command, stream its output, tear down.
//! - `image`: list and remove the root filesystem images in the image store.
//! - `shell`: an interactive shell on a terminal in a fresh sandbox (the
//!   host terminal handled by `terminal`).
//! - `gc`: kill and remove the sandboxes whose owner process died.
//! - `serve` and `sandbox`: the per-user daemon and the commands that keep
//!   sandboxes alive across invocations through it.
//! - `program`: what `run` and `sandbox exec` share (output, stdin, exit
//!   code); `shell` reads the host's stdin with it too.
//! - `vm_options`: the VM options of `run`, `shell` and `sandbox create`, and
//!   the sandbox builder they describe.

mod gc;
mod image;
mod program;
mod run;
mod sandbox;
mod serve;
mod shell;
mod terminal;
mod transfer;
mod vm_options;

use clap::{Parser, Subcommand};

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
    /// Kill and remove the sandboxes whose owner process died (under
    /// AIRLOCK_STATE_DIR, else $XDG_RUNTIME_DIR/airlock or /tmp/airlock).
    Gc(gc::GcArgs),
    /// Sandboxes that outlive one command, kept by the daemon (started on
    /// demand): create, ls, exec, cp, pause, resume, kill.
    Sandbox(sandbox::SandboxArgs),
    /// Run the per-user daemon behind `airlock sandbox` in the foreground.
    Serve(serve::ServeArgs),
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

    /// Kill the command's process tree after SECS seconds (enforced in the
    /// guest); the output so far is kept and airlock exits 124.
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<f64>,

    /// Set an environment variable in the guest; KEY alone passes the
    /// host's value. Repeatable.
    #[arg(short = 'e', long = "env", value_name = "KEY=VALUE", value_parser = parse_env)]
    pub env: Vec<(String, String)>,

    /// Working directory in the guest (default /).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<String>,

    /// Run the command as this guest user: name, uid, name:group or uid:gid.
    #[arg(short, long, value_name = "USER")]
    pub user: Option<String>,

    /// Copy a host file or directory into the guest before the command
    /// (directories keep modes and symlinks). Repeatable.
    #[arg(long, value_name = "HOST:GUEST", value_parser = transfer::parse_upload)]
    pub upload: Vec<transfer::Transfer>,

    /// Copy a guest file or directory to the host after the command
    /// (whatever its exit status). Repeatable.
    #[arg(long, value_name = "GUEST:HOST", value_parser = transfer::parse_download)]
    pub download: Vec<transfer::Transfer>,

    /// Memory limit for the command's process tree (e.g. 256M); past it
    /// the guest's OOM killer kills in the tree.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub limit_memory: Option<u64>,

    /// Most processes and threads the command's tree may have at once.
    #[arg(long, value_name = "N")]
    pub limit_pids: Option<u32>,

    /// CPU limit for the command's tree, in CPUs (e.g. 0.5).
    #[arg(long, value_name = "CPUS", value_parser = parse_cpus)]
    pub limit_cpus: Option<u32>,

    /// Run with every capability (as root: reboot, mount, load modules)
    /// and without no_new_privs.
    #[arg(long)]
    pub privileged: bool,

    /// The program and its arguments.
    #[arg(required = true, last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Parses `KEY=VALUE`, or `KEY` alone for the host's value of KEY.
fn parse_env(text: &str) -> Result<(String, String), String> {
    let (key, value) = match text.split_once('=') {
        Some((key, value)) => (key, value.to_owned()),
        None => match std::env::var(text) {
            Ok(value) => (text, value),
            Err(_) => return Err(format!("{text} is not set on the host; use {text}=VALUE")),
        },
    };
    if key.is_empty() {
        return Err(format!("{text:?} has no variable name; use KEY=VALUE"));
    }
    Ok((key.to_owned(), value))
}

/// Parses a size with an optional binary suffix: `4G`, `512M`, `65536`.
/// CPUs as thousandths: "0.5" is 500.
fn parse_cpus(text: &str) -> Result<u32, String> {
    match text.trim().parse::<f64>() {
        Ok(cpus) if cpus > 0.0 && cpus <= 1024.0 => Ok(((cpus * 1000.0).round() as u32).max(1)),
        _ => Err(format!("{text:?} is not a CPU count; pass e.g. 0.5 or 2")),
    }
}

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

/// Installs the tracing subscriber: warnings by default, Airlock's own
/// progress with `--verbose`, anything with `RUST_LOG`.
pub fn init_tracing(verbose: bool) {
    let default = if verbose { "airlock=info" } else { "warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// Runs the parsed command and returns the process exit code.
pub async fn main(args: Args) -> u8 {
    match args.command {
        Commands::Run(run) => run::run(*run, args.verbose).await,
        Commands::Shell(shell) => shell::run(*shell, args.verbose).await,
        Commands::Image(command) => image::run(command),
        Commands::Gc(gc_args) => gc::run(gc_args).await,
        Commands::Sandbox(sandbox_args) => sandbox::run(sandbox_args).await,
        Commands::Serve(serve_args) => serve::run(serve_args).await,
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
    fn env_takes_key_value_or_the_hosts_value() {
        assert_eq!(parse_env("A=1=2"), Ok(("A".into(), "1=2".into())));
        assert_eq!(parse_env("EMPTY="), Ok(("EMPTY".into(), String::new())));
        assert!(parse_env("=x").is_err());
        assert!(parse_env("AIRLOCK_SURELY_UNSET_VARIABLE").is_err());
        let path = std::env::var("PATH").unwrap_or_default();
        assert_eq!(parse_env("PATH"), Ok(("PATH".into(), path)));
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
            run.env,
            [("A".into(), "1".into()), ("B".into(), "2".into())]
        );
        assert_eq!(run.cwd.as_deref(), Some("/tmp"));
        assert_eq!(run.user.as_deref(), Some("1000"));
        assert_eq!(run.timeout, Some(2.5));
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
        assert_eq!(run.limit_memory, Some(64 << 20));
        assert_eq!(run.limit_pids, Some(32));
        assert_eq!(run.limit_cpus, Some(500));
        assert!(run.privileged);
        assert!(parse_cpus("0").is_err());
        assert!(parse_cpus("x").is_err());
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
        assert_eq!(shell.env, [("A".into(), "1".into())]);
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
