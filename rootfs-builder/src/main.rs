//! `airlock-rootfs`: command-line front end of the `airlock_rootfs` library.
//!
//! `kernel` calls [`airlock_rootfs::kernel::fetch`]; `initramfs` calls
//! [`airlock_rootfs::initramfs::build`]; `image build` calls
//! [`airlock_rootfs::image::build`]. Progress goes to stderr through `tracing`
//! (`RUST_LOG` overrides the level); the one-line result goes to stdout.

#![forbid(unsafe_code)]

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use airlock_rootfs::image::{self, debian, Source};
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
        /// Output file (a newc cpio, not compressed).
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        /// Static busybox binary (Debian's busybox-static).
        #[arg(long, value_name = "PATH", default_value = airlock_rootfs::busybox::DEFAULT_PATH)]
        busybox: PathBuf,
    },
    /// Root filesystem images for `airlock run --image`.
    #[command(subcommand)]
    Image(ImageCommand),
}

#[derive(Debug, Subcommand)]
enum ImageCommand {
    /// Build an ext4 root image into the image store (cached by a hash of
    /// its inputs). Without a source option: Debian bookworm minbase with
    /// python3, ca-certificates and coreutils.
    Build(BuildArgs),
}

#[derive(Debug, clap::Args)]
struct BuildArgs {
    /// Name to give the image (`airlock run --image NAME`); `default` is
    /// what `airlock run` uses.
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// Debian packages to add to the default set, comma-separated (e.g. git,curl).
    #[arg(long, value_name = "p1,p2,...", value_delimiter = ',')]
    include: Vec<String>,
    /// Debian suite.
    #[arg(long, default_value = debian::DEFAULT_SUITE)]
    suite: String,
    /// Debian mirror.
    #[arg(long, default_value = debian::DEFAULT_MIRROR)]
    mirror: String,
    /// Use this directory as the root tree.
    #[arg(long, value_name = "DIR", group = "source")]
    dir: Option<PathBuf>,
    /// Unpack this tarball (plain, gzip or zstd) as the root tree.
    #[arg(long, value_name = "FILE", group = "source")]
    tar: Option<PathBuf>,
    /// Apply the layers of an OCI image layout (skopeo copy ... oci:DIR) or a
    /// `docker save` archive.
    #[arg(long, value_name = "DIR|FILE", group = "source")]
    oci: Option<PathBuf>,
    /// Which image of a layout or archive (ref.name annotation or repo tag).
    #[arg(long, value_name = "REF", requires = "oci")]
    reference: Option<String>,
    /// Free space beyond the content, MiB.
    #[arg(long, value_name = "MIB", default_value_t = image::DEFAULT_HEADROOM_MIB)]
    headroom: u64,
    /// Build even if the store already has an image of these inputs.
    #[arg(long)]
    rebuild: bool,
    /// Image store directory (default: $AIRLOCK_HOME/images).
    #[arg(long, value_name = "DIR")]
    store: Option<PathBuf>,
}

impl BuildArgs {
    fn source(&self) -> Source {
        if let Some(dir) = &self.dir {
            Source::Dir(dir.clone())
        } else if let Some(tar) = &self.tar {
            Source::Tar(tar.clone())
        } else if let Some(path) = &self.oci {
            Source::Container {
                path: path.clone(),
                reference: self.reference.clone(),
            }
        } else {
            Source::Debian(debian::DebianSpec::new(
                &self.suite,
                &self.mirror,
                &self.include,
            ))
        }
    }
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
        Command::Image(ImageCommand::Build(args)) => {
            let mut options = image::BuildOptions::new(args.source());
            options.name = args.name.clone();
            options.headroom = args.headroom << 20;
            options.rebuild = args.rebuild;
            if let Some(store) = &args.store {
                options.store = airlock_images::ImageStore::at(store);
            }
            let built = image::build(&options).context("building the image")?;
            let info = &built.info;
            println!(
                "{}{}: {} ({}, {:.1} MiB image, {:.1} MiB content, built in {:.0} s){}",
                info.names
                    .first()
                    .map(|n| format!("{n} = "))
                    .unwrap_or_default(),
                info.meta.id,
                info.path.display(),
                info.meta.source,
                info.meta.image_bytes as f64 / 1048576.0,
                info.meta.content_bytes as f64 / 1048576.0,
                info.meta.build_seconds,
                if built.cached { " (cached)" } else { "" }
            );
        }
    }
    Ok(())
}
