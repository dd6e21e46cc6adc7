//! `airlock-rootfs`: command-line front end of the `airlock_rootfs` library.
//!
//! `kernel` calls [`airlock_rootfs::kernel::fetch`]; `initramfs` calls
//! [`airlock_rootfs::initramfs::build`]. Progress goes to stderr through `tracing`
//! (`RUST_LOG` overrides the level); the one-line result goes to stdout.

#![forbid(unsafe_code)]

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use airlock_rootfs::{initramfs, kernel};
use anyhow::Context;
use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

#[derive(Debug, Parser)]
#[command(
    version,
    about = "Builds the kernel directory and initramfs of Airlock guests"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Fetch Debian's cloud kernel and the guest's modules into a directory.
    Kernel {
        /// Directory to write (vmlinuz, version, modules/, modules.order).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Metapackage or concrete kernel image package to resolve through apt.
        #[arg(long, value_name = "NAME", default_value = kernel::DEFAULT_PACKAGE)]
        package: String,
        /// Modules to ship, comma-separated; dependencies are added.
        #[arg(
            long,
            value_name = "m1,m2,...",
            value_delimiter = ',',
            default_values_t = kernel::DEFAULT_MODULES.map(String::from)
        )]
        modules: Vec<String>,
    },
    /// Build a gzip'd cpio initramfs whose /init is the agent.
    Initramfs {
        /// Kernel directory written by `airlock-rootfs kernel`.
        #[arg(long, value_name = "DIR")]
        kernel_dir: PathBuf,
        /// Guest agent binary, installed as /init (should be static).
        #[arg(long, value_name = "PATH")]
        agent: PathBuf,
        /// Output file (.cpio.gz).
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        /// Static busybox binary (Debian's busybox-static).
        #[arg(long, value_name = "PATH", default_value = airlock_rootfs::busybox::DEFAULT_PATH)]
        busybox: PathBuf,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .without_time()
        .init();

    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // `{:#}` prints the whole cause chain on one line, without a backtrace.
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Kernel {
            out,
            package,
            modules,
        } => {
            let options = kernel::KernelOptions::new(out)
                .package(package)
                .modules(modules);
            let build = kernel::fetch(&options).context("building the kernel directory")?;
            println!(
                "{}: kernel {} from {} {}, {} modules{}{}",
                build.dir.display(),
                build.release,
                build.stamp.package,
                build.stamp.version,
                build.modules.len(),
                if build.stamp.builtin.is_empty() {
                    String::new()
                } else {
                    format!(" (built in: {})", build.stamp.builtin.join(", "))
                },
                if build.cached { " (cached)" } else { "" }
            );
        }
        Command::Initramfs {
            kernel_dir,
            agent,
            out,
            busybox,
        } => {
            let options = initramfs::InitramfsOptions::new(kernel_dir, agent, out).busybox(busybox);
            let summary = initramfs::build(&options).context("building the initramfs")?;
            println!(
                "{}: {} entries ({} files, {} modules for {}, {} busybox applets), {} bytes",
                summary.path.display(),
                summary.entries,
                summary.files,
                summary.modules,
                summary.release,
                summary.applets,
                summary.bytes
            );
        }
    }
    Ok(())
}
