//! `airlock serve`: the per-user daemon behind `airlock sandbox ...` (see
//! `airlock::daemon`), in the foreground. SIGTERM or SIGINT kills every
//! sandbox, removes the socket and exits 0.

use std::path::PathBuf;

use crate::daemon::{self, DaemonSocket};
use tokio::signal::unix::{signal, SignalKind};

use super::EXIT_AIRLOCK_ERROR;

/// `airlock serve` options.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The Unix socket to listen on (default: daemon.sock under
    /// AIRLOCK_STATE_DIR, else $XDG_RUNTIME_DIR/airlock or /tmp/airlock).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,

    /// The most sandboxes alive at once.
    #[arg(long, value_name = "N", default_value_t = 8,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub max: u16,

    /// Keep N sandboxes of the default configuration (what `airlock sandbox
    /// create` with no options asks for) restored and frozen; a create
    /// takes one in milliseconds and the pool refills in the background.
    /// Pool members count against --max.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub pool: u16,
}

/// Serves until SIGTERM or SIGINT; returns the exit code.
pub async fn run(args: ServeArgs) -> u8 {
    let path = args.socket.unwrap_or_else(daemon::default_socket);
    let (mut interrupt, mut terminate) = match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(interrupt), Ok(terminate)) => (interrupt, terminate),
        (Err(error), _) | (_, Err(error)) => {
            eprintln!("airlock: cannot handle signals: {error}");
            return EXIT_AIRLOCK_ERROR;
        }
    };
    let socket = match DaemonSocket::bind(&path).await {
        Ok(socket) => socket,
        Err(error) => {
            eprintln!("airlock: {}", airlock::error_chain(&error));
            return EXIT_AIRLOCK_ERROR;
        }
    };
    let shutdown = async move {
        let name = tokio::select! {
            _ = interrupt.recv() => "SIGINT",
            _ = terminate.recv() => "SIGTERM",
        };
        tracing::info!(signal = name, "stopping");
    };
    let pool = match args.pool {
        0 => None,
        size => match super::sandbox::default_create_request() {
            Ok(request) => Some(daemon::PoolConfig {
                request,
                size: usize::from(size),
            }),
            Err(message) => {
                eprintln!("airlock: the pool's configuration: {message}");
                return EXIT_AIRLOCK_ERROR;
            }
        },
    };
    match daemon::serve(socket, usize::from(args.max), pool, shutdown).await {
        Ok(()) => {
            tracing::info!("stopped");
            0
        }
        Err(error) => {
            eprintln!("airlock: {}", airlock::error_chain(&error));
            EXIT_AIRLOCK_ERROR
        }
    }
}
