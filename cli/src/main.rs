//! The `airlock` command line tool, a thin layer over the `airlock` library
//! (`run`, `shell`: a sandbox in this process), the `airlock-server` crate
//! (`serve`), the `airlock-client` crate (`sandbox`, `key`: clients of a
//! server) and the `airlock-mcp` crate (`mcp`). An embedder depends on those instead, without clap or a log
//! subscriber.
//!
//! - `commands`: argument parsing and one module per subcommand (`run`,
//!   `shell`, `image`, `template`, `gc`, `serve`, `sandbox ...`, `key ...`,
//!   `mcp`).

#![forbid(unsafe_code)]

use clap::Parser;

mod commands;

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
