//! The `airlock-agent` binary: parses arguments, sets up logging on stderr
//! (the console when PID 1), and hands over to [`airlock_agent::run`].

#![forbid(unsafe_code)]

use std::process::ExitCode;

use airlock_agent::{Boot, Listen};
use clap::Parser;
use tracing_subscriber::EnvFilter;

/// mimalloc rather than musl's allocator: musl returns freed memory to the
/// kernel at once, so every buffer the agent allocates for output, files
/// and HTTP/2 is fresh pages, each a page fault on first touch. Under
/// emulation that made allocating and filling a 64 KiB buffer 20 times
/// slower than the copy itself, and bounded every stream the agent
/// carries. Built without its transparent-huge-page advice (`no_thp`): with
/// it, a 32 MiB stream to a slow client grew the agent by 20 to 30 MiB of
/// huge pages (`guest-agent/tests/output.rs` allows 16), and the option
/// that turns it off at run time would also turn huge pages off for every
/// program the agent starts.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Airlock's guest agent: PID 1 in the microVM, serving gRPC over a
/// virtio-serial port or vsock.
#[derive(Debug, Parser)]
#[command(version)]
struct Cli {
    /// Where to serve: `serial:NAME`, `vsock:PORT` or `unix:PATH`. Default:
    /// by the kernel command line's `airlock.channel`, the serial port
    /// `airlock.agent.0` or vsock on `airlock.port` (1024).
    #[arg(long, value_name = "ADDR")]
    listen: Option<Listen>,
}

fn main() -> ExitCode {
    let boot = Boot::begin();
    // As PID 1, argv holds whatever stray words the kernel command line had;
    // exiting over them would panic the kernel, so they are only reported.
    let (listen, arg_error) = match Cli::try_parse() {
        Ok(cli) => (cli.listen, None),
        Err(e) if boot.is_pid1() => (None, Some(e)),
        Err(e) => e.exit(),
    };

    let filter = boot.log_filter();
    let (env_filter, filter_error) = match EnvFilter::try_new(&filter) {
        Ok(f) => (f, None),
        Err(e) => (EnvFilter::new("info"), Some(e)),
    };
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(env_filter)
        .try_init();
    if let Some(e) = filter_error {
        tracing::warn!(filter, error = %e, "bad log filter; using info");
    }
    if let Some(e) = arg_error {
        let first_line = e.to_string().lines().next().unwrap_or_default().to_owned();
        tracing::warn!(error = first_line, "ignoring arguments from the kernel");
    }

    airlock_agent::run(boot, listen)
}
