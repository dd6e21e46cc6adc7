//! Argument parsing and dispatch for the `airlock` binary.
//!
//! - `run`: boot a fresh sandbox, run one command, stream its output, tear down.

mod run;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

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
    Run(RunArgs),
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Guest memory in MiB.
    #[arg(long, default_value_t = 512, value_name = "MIB")]
    pub memory: u32,

    /// Number of virtual CPUs.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub vcpus: u32,

    /// Kill the sandbox if the command has not finished after SECS seconds (exit 124).
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<f64>,

    /// CPU accelerator: auto, kvm or tcg (default: AIRLOCK_ACCEL or auto).
    #[arg(long, value_name = "ACCEL")]
    pub accel: Option<airlock::Accel>,

    /// Guest kernel (default: ~/.cache/airlock/kernel/vmlinuz).
    #[arg(long, value_name = "PATH")]
    pub kernel: Option<PathBuf>,

    /// Initramfs with the agent (default: ~/.cache/airlock/initramfs.cpio.gz).
    #[arg(long, value_name = "PATH")]
    pub initramfs: Option<PathBuf>,

    /// The program and its arguments.
    #[arg(required = true, last = true, value_name = "CMD")]
    pub command: Vec<String>,
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
        Commands::Run(run) => run::run(run, args.verbose).await,
    }
}
