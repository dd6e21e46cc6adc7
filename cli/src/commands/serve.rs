//! `airlock serve`: the Airlock server (crate `airlock-server`) in the
//! foreground: the owner's Unix socket, and with `--listen` a TCP listener
//! with TLS and API keys, and with `--ingress` the HTTP ingress into the
//! servers programs start in sandboxes. SIGTERM or SIGINT stops it as `--on-exit` says
//! (by default its sandboxes run on, for the next server to adopt),
//! removes the socket and exits 0. Its log is text or JSON lines
//! (`--log-format`), and with `--otlp-endpoint` its traces go out over
//! OTLP (both installed by `main`, see `logging`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use airlock_server::{
    IngressListener, Listeners, MetricsEndpoint, OnExit, ServerConfig, TcpEndpoint, TlsFiles,
    UnixSocket,
};
use tokio::signal::unix::{signal, SignalKind};

use super::logging::{self, LogFormat, LogOptions};
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

    /// Serve HTTP ingress into sandboxes on HOST:PORT: a request to
    /// PORT-SANDBOX_ID.DOMAIN (or /_sandbox/SANDBOX_ID/PORT/) reaches that
    /// port in the sandbox, with the sandbox's traffic token unless the port
    /// is public. `local`: 127.0.0.1, port 7480 or a free one if that is
    /// taken (what the server started on demand uses). Plain HTTP only on
    /// loopback; elsewhere give --ingress-tls-cert and --ingress-tls-key.
    #[arg(long, value_name = "HOST:PORT|local", value_parser = parse_ingress)]
    pub ingress: Option<IngressAt>,

    /// The ingress's domain: requests name PORT-SANDBOX_ID.DOMAIN (default
    /// airlock.localhost, which browsers and curl resolve to loopback).
    #[arg(long, value_name = "DOMAIN", requires = "ingress")]
    pub ingress_domain: Option<String>,

    /// The TLS certificate chain (PEM) of the ingress (a wildcard for
    /// *.DOMAIN); with TLS, clients may speak HTTP/2.
    #[arg(long, value_name = "FILE", requires_all = ["ingress", "ingress_tls_key"])]
    pub ingress_tls_cert: Option<PathBuf>,

    /// The TLS private key (PEM) of the ingress.
    #[arg(long, value_name = "FILE", requires = "ingress_tls_cert")]
    pub ingress_tls_key: Option<PathBuf>,

    /// Serve the E2B-compatible front on HOST:PORT: E2B's own SDKs reach
    /// it with E2B_API_URL and E2B_SANDBOX_URL set to its URL (one endpoint,
    /// the sandbox named by headers), or with E2B_DOMAIN (api.DOMAIN and
    /// PORT-SANDBOX_ID.DOMAIN). TLS with --e2b-tls-cert and --e2b-tls-key;
    /// plain HTTP only on loopback.
    #[arg(long, value_name = "HOST:PORT")]
    pub e2b: Option<SocketAddr>,

    /// The E2B front's domain (default e2b.localhost).
    #[arg(long, value_name = "DOMAIN", requires = "e2b")]
    pub e2b_domain: Option<String>,

    /// The TLS certificate chain (PEM) of the E2B front (for api.DOMAIN and
    /// *.DOMAIN).
    #[arg(long, value_name = "FILE", requires_all = ["e2b", "e2b_tls_key"])]
    pub e2b_tls_cert: Option<PathBuf>,

    /// The TLS private key (PEM) of the E2B front.
    #[arg(long, value_name = "FILE", requires = "e2b_tls_cert")]
    pub e2b_tls_key: Option<PathBuf>,

    /// Serve Prometheus metrics on HOST:PORT: plain HTTP, no API key, `GET
    /// /metrics` in Prometheus' text format (counts only: no sandbox id or
    /// key name; bind it on loopback or a network only Prometheus
    /// reaches). Nothing is counted without it.
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics: Option<SocketAddr>,

    /// A browser origin (https://app.example) whose pages may call the TCP
    /// listener with gRPC-Web. Repeatable; none by default.
    #[arg(long = "cors-origin", value_name = "ORIGIN")]
    pub cors_origins: Vec<String>,

    /// Post every sandbox's lifecycle events to URL (https://, or http://
    /// to a loopback address), signed with the secret in
    /// <data dir>/webhooks/server.secret (made on first use). Repeatable.
    #[arg(long = "webhook", value_name = "URL")]
    pub webhooks: Vec<String>,

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

    /// A shell command each pool member runs (`sh -c CMD`) after the
    /// standard warm-up (a shell, and `python3 -c pass` where the image has
    /// Python) and before it is frozen, so that the first such command in a
    /// sandbox from the pool runs as fast as the second. Repeatable, run in
    /// order. It runs with HOME and TMPDIR in a scratch directory that is
    /// removed; one that fails, or leaves a file in /etc, /home, /root, /tmp
    /// or /var/tmp, discards its member (the daemon's log says why).
    #[arg(long = "pool-warm", value_name = "CMD", requires = "pool")]
    pub pool_warm: Vec<String>,

    /// Keep the pool of the owner's snapshot NAME (`airlock sandbox
    /// snapshot ID --name NAME`) instead of the default configuration: the
    /// owner's creates that name this snapshot take a member.
    #[arg(long = "pool-snapshot", value_name = "NAME", requires = "pool")]
    pub pool_snapshot: Option<String>,

    /// What a clean stop (SIGTERM, SIGINT) does with the sandboxes: leave
    /// them running for the next server to adopt, pause-to-disk (the next
    /// server restores them on their next call), or kill.
    #[arg(long, value_name = "WHAT", default_value = "leave")]
    pub on_exit: OnExit,

    /// Let the owner's sandboxes (those made on the Unix socket) reach the
    /// host itself where their rules say: its loopback, link-local
    /// addresses and its own addresses (`--allow-net 127.0.0.1:5432`). Off
    /// by default, when such a rule is refused and no connection reaches
    /// the host whatever the rules. A key's sandboxes never may. The server
    /// the CLI starts on demand (the owner's alone) has it on.
    #[arg(long)]
    pub host_access: bool,

    /// Where keys, sandbox records and named workspaces are kept (default:
    /// AIRLOCK_SERVER_DIR, else server/ in the Airlock home).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,

    /// The log's format and the traces' exporter (installed by `main`).
    #[command(flatten)]
    pub log: LogOptions,
}

/// Where `--ingress` listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IngressAt {
    /// This address.
    Addr(SocketAddr),
    /// Loopback, [`LOCAL_INGRESS_PORT`] or any free port.
    Local,
}

/// The port `--ingress local` tries first.
pub const LOCAL_INGRESS_PORT: u16 = 7480;

fn parse_ingress(text: &str) -> Result<IngressAt, String> {
    if text == "local" {
        return Ok(IngressAt::Local);
    }
    text.parse()
        .map(IngressAt::Addr)
        .map_err(|_| format!("{text:?} is not HOST:PORT (an IP address and a port) or local"))
}

/// Binds the ingress listener `args` ask for, if any.
async fn ingress_listener(
    at: Option<IngressAt>,
    domain: Option<String>,
    tls: Option<TlsFiles>,
    format: LogFormat,
) -> Result<Option<IngressListener>, airlock_server::ServerError> {
    let Some(at) = at else {
        return Ok(None);
    };
    let endpoint = match at {
        IngressAt::Addr(addr) => TcpEndpoint::bind(addr, tls, true).await?,
        IngressAt::Local => {
            let preferred = SocketAddr::from(([127, 0, 0, 1], LOCAL_INGRESS_PORT));
            match TcpEndpoint::bind(preferred, tls.clone(), true).await {
                Ok(endpoint) => endpoint,
                Err(_) => {
                    TcpEndpoint::bind(SocketAddr::from(([127, 0, 0, 1], 0)), tls, true).await?
                }
            }
        }
    };
    if let Ok(bound) = endpoint.local_addr() {
        // Tests and scripts bound to port 0 read the port here.
        logging::notice(format, "ingress", bound);
    }
    Ok(Some(IngressListener {
        endpoint,
        domain: domain.unwrap_or_else(|| airlock_server::DEFAULT_INGRESS_DOMAIN.to_owned()),
    }))
}

/// Serves until SIGTERM or SIGINT; returns the exit code.
pub async fn run(args: ServeArgs) -> u8 {
    let format = args.log.log_format;
    match serve(args).await {
        Ok(()) => {
            tracing::info!("stopped");
            0
        }
        Err(message) => {
            logging::failure(format, &message);
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
    let format = args.log.log_format;
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
                logging::notice(format, "listening", bound);
            }
            Some(endpoint)
        }
    };
    let ingress_tls = match (args.ingress_tls_cert, args.ingress_tls_key) {
        (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
        _ => None,
    };
    let ingress = ingress_listener(args.ingress, args.ingress_domain, ingress_tls, format)
        .await
        .map_err(failed)?;
    let e2b = match args.e2b {
        None => None,
        Some(addr) => {
            let tls = match (args.e2b_tls_cert, args.e2b_tls_key) {
                (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
                _ => None,
            };
            let endpoint = TcpEndpoint::bind(addr, tls, true).await.map_err(failed)?;
            if let Ok(bound) = endpoint.local_addr() {
                // Tests and scripts bound to port 0 read the port here.
                logging::notice(format, "e2b front", bound);
            }
            Some(airlock_server::E2bListener {
                endpoint,
                domain: args
                    .e2b_domain
                    .unwrap_or_else(|| airlock_server::e2b::DEFAULT_DOMAIN.to_owned()),
            })
        }
    };
    let metrics = match args.metrics {
        None => None,
        Some(addr) => {
            let endpoint =
                MetricsEndpoint::bind(addr).map_err(|error| airlock::error_chain(&error))?;
            // Tests and scripts bound to port 0 read the port here.
            logging::notice(format, "metrics", endpoint.local_addr());
            Some(endpoint)
        }
    };
    let config = ServerConfig {
        metrics,
        max_sandboxes: usize::from(args.max),
        pool: usize::from(args.pool),
        pool_warm_up: pool_warm_up(args.pool_warm),
        pool_snapshot: args.pool_snapshot,
        on_exit: args.on_exit,
        cors_origins: args.cors_origins,
        webhooks: args.webhooks,
        owner_host_access: match args.host_access {
            true => airlock::HostAccess::Allowed,
            false => airlock::HostAccess::Denied,
        },
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
        ingress,
        e2b,
    };
    airlock_server::serve(config, listeners, shutdown)
        .await
        .map_err(failed)
}

/// The standard warm-up, then each `--pool-warm` command in order.
fn pool_warm_up(commands: Vec<String>) -> airlock::WarmUp {
    commands
        .into_iter()
        .fold(airlock::WarmUp::standard(), airlock::WarmUp::shell)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, clap::Parser)]
    struct Args {
        #[command(flatten)]
        serve: ServeArgs,
    }

    #[test]
    fn pool_warm_up_commands_follow_the_standard_one_in_order() {
        let argv = [
            "serve",
            "--pool",
            "2",
            "--pool-warm",
            "python3 -c 'import numpy'",
        ];
        let args = Args::try_parse_from(argv.iter().chain(&["--pool-warm", "node -e 1"])).unwrap();
        let warm = pool_warm_up(args.serve.pool_warm);
        let commands = warm.commands();
        assert_eq!(commands[0], airlock::WarmUp::standard().commands()[0]);
        assert_eq!(commands[1], ["sh", "-c", "python3 -c 'import numpy'"]);
        assert_eq!(commands[2], ["sh", "-c", "node -e 1"]);
        assert_eq!(commands.len(), 3);
    }

    #[test]
    fn a_pool_warm_up_needs_a_pool() {
        let error = Args::try_parse_from(["serve", "--pool-warm", "true"]).unwrap_err();
        assert!(error.to_string().contains("--pool"), "{error}");
    }
}
