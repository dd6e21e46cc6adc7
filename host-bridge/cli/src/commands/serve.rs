//! `airlock serve`: the Airlock server (crate `airlock-server`) in the
//! foreground: the owner's Unix socket, and with `--listen` a TCP listener
//! with TLS and API keys. SIGTERM or SIGINT stops it as `--on-exit` says
//! (by default its sandboxes run on, for the next server to adopt),
//! removes the socket and exits 0.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use airlock_server::{Listeners, OnExit, ServerConfig, TcpEndpoint, TlsFiles, UnixSocket};
use tokio::signal::unix::{signal, SignalKind};

use super::remote::default_socket;
use super::EXIT_AIRLOCK_ERROR;

/// `airlock serve` options.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The Unix socket to listen on (default: daemon.sock under
    /// AIRLOCK_STATE_DIR, else $XDG_RUNTIME_DIR/airlock or /tmp/airlock).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,

    /// Also listen on TCP, HOST:PORT, for clients with an API key (`airlock
    /// key create`). Needs --tls-cert and --tls-key, or --insecure on a
    /// loopback address.
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: Option<SocketAddr>,

    /// The TLS certificate chain (PEM) of the TCP listener.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// The TLS private key (PEM) of the TCP listener.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Plain TCP without TLS (a loopback --listen address only).
    #[arg(long, requires = "listen", conflicts_with = "tls_cert")]
    pub insecure: bool,

    /// A browser origin (https://app.example) whose pages may call the TCP
    /// listener with gRPC-Web. Repeatable; none by default.
    #[arg(long = "cors-origin", value_name = "ORIGIN")]
    pub cors_origins: Vec<String>,

    /// The most sandboxes alive at once.
    #[arg(long, value_name = "N", default_value_t = 8,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub max: u16,

    /// Keep N sandboxes of the default configuration (what a create with no
    /// machine options asks for) restored and frozen; such a create takes
    /// one in milliseconds and the pool refills in the background. Pool
    /// members count against --max.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub pool: u16,

    /// What a clean stop (SIGTERM, SIGINT) does with the sandboxes: leave
    /// them running for the next server to adopt, pause-to-disk (the next
    /// server restores them on their next call), or kill.
    #[arg(long, value_name = "WHAT", default_value = "leave")]
    pub on_exit: OnExit,

    /// Where keys, sandbox records and named workspaces are kept (default:
    /// AIRLOCK_SERVER_DIR, else server/ in the Airlock home).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

/// Serves until SIGTERM or SIGINT; returns the exit code.
pub async fn run(args: ServeArgs) -> u8 {
    match serve(args).await {
        Ok(()) => {
            tracing::info!("stopped");
            0
        }
        Err(message) => {
            eprintln!("airlock: {message}");
            EXIT_AIRLOCK_ERROR
        }
    }
}

async fn serve(args: ServeArgs) -> Result<(), String> {
    let (mut interrupt, mut terminate) = match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(interrupt), Ok(terminate)) => (interrupt, terminate),
        (Err(error), _) | (_, Err(error)) => return Err(format!("cannot handle signals: {error}")),
    };
    let failed = |error: airlock_server::ServerError| airlock::error_chain(&error);
    let socket = args.socket.unwrap_or_else(default_socket);
    let unix = UnixSocket::bind(&socket).await.map_err(failed)?;
    let tcp = match args.listen {
        None => None,
        Some(addr) => {
            let tls = match (args.tls_cert, args.tls_key) {
                (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
                _ => None,
            };
            let endpoint = TcpEndpoint::bind(addr, tls, args.insecure)
                .await
                .map_err(failed)?;
            if let Ok(bound) = endpoint.local_addr() {
                // Tests and scripts bound to port 0 read the port here.
                eprintln!("airlock: listening on {bound}");
            }
            Some(endpoint)
        }
    };
    let config = ServerConfig {
        max_sandboxes: usize::from(args.max),
        pool: usize::from(args.pool),
        on_exit: args.on_exit,
        cors_origins: args.cors_origins,
        data_dir: args
            .data_dir
            .unwrap_or_else(airlock_server::default_data_dir),
        builder: Arc::new(|| airlock::Sandbox::builder().collect_orphans(true)),
        ..ServerConfig::default()
    };
    let shutdown = async move {
        let name = tokio::select! {
            _ = interrupt.recv() => "SIGINT",
            _ = terminate.recv() => "SIGTERM",
        };
        tracing::info!(signal = name, "stopping");
    };
    let listeners = Listeners {
        unix: Some(unix),
        tcp,
    };
    airlock_server::serve(config, listeners, shutdown)
        .await
        .map_err(failed)
}
