//! The `airlock` command line tool and its per-user daemon, a thin layer
//! over the `airlock` library (which an embedder depends on instead, without
//! clap or a log subscriber).
//!
//! - `commands`: argument parsing and one module per subcommand (`run`,
//!   `shell`, `image`, `gc`, `serve`, `sandbox ...`).
//! - `daemon`: `airlock serve` (a [`Sandboxes`](airlock::Sandboxes) manager
//!   behind a private Unix socket) and the client the `sandbox` commands use.

#![forbid(unsafe_code)]

use clap::Parser;

mod commands;
mod daemon;

fn main() -> std::process::ExitCode {
    let args = commands::Args::parse();
    commands::init_tracing(args.verbose);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("airlock: cannot start the async runtime: {error}");
            return std::process::ExitCode::from(125);
        }
    };
    let code = runtime.block_on(commands::main(args));
    std::process::ExitCode::from(code)
}
