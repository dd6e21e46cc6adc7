//! The `airlock` command line tool: a thin layer over the library.

#![forbid(unsafe_code)]

use clap::Parser;

mod cli;

fn main() -> std::process::ExitCode {
    let args = cli::Args::parse();
    cli::init_tracing(args.verbose);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("airlock: cannot start the async runtime: {error}");
            return std::process::ExitCode::from(125);
        }
    };
    let code = runtime.block_on(cli::main(args));
    std::process::ExitCode::from(code)
}
