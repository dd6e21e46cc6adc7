//! The `airlock` command line tool, a thin layer over the `airlock` library
//! (`run`, `shell`: a sandbox in this process), the `airlock-server` crate
//! (`serve`), the `airlock-client` crate (`sandbox`, `key`: clients of a
//! server) and the `airlock-mcp` crate (`mcp`). An embedder depends on those instead, without clap or a log
//! subscriber.
//!
//! - `commands`: argument parsing and one module per subcommand (`run`,
//!   `shell`, `image`, `template`, `gc`, `serve`, `sandbox ...`, `key ...`,
//!   `mcp`), and the log (`logging`, `telemetry`: installed here before
//!   the command runs, flushed after).

#![forbid(unsafe_code)]

use clap::Parser;

mod commands;

fn main() -> std::process::ExitCode {
    let args = commands::Args::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("airlock: cannot start the async runtime: {error}");
            return std::process::ExitCode::from(commands::EXIT_AIRLOCK_ERROR);
        }
    };
    // The OTLP exporter's channel runs on the runtime.
    let installed = {
        let _entered = runtime.enter();
        commands::init_tracing(&args)
    };
    let telemetry = match installed {
        Ok(telemetry) => telemetry,
        Err(error) => {
            eprintln!("airlock: {}", airlock::error_chain(&error));
            return std::process::ExitCode::from(commands::EXIT_AIRLOCK_ERROR);
        }
    };
    let code = runtime.block_on(commands::main(args));
    // The last spans go out through the runtime, which still runs.
    telemetry.shutdown();
    std::process::ExitCode::from(code)
}
