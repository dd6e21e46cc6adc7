//! `airlock mcp`: the MCP server (crate `airlock-mcp`) in the foreground,
//! over stdio (what desktop and IDE hosts start; the local server is
//! started on demand, or `--host`/`AIRLOCK_HOST` names a remote one) or,
//! with `--http`, over MCP's streamable HTTP transport for callers with an
//! API key of the server `AIRLOCK_HOST` names.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use airlock_client::Endpoint;
use airlock_mcp::{serve_stdio, Connector, HttpOptions, HttpServer, SessionSandbox, TlsFiles};
use tokio::signal::unix::{signal, SignalKind};

use super::remote::ServerOptions;
use super::EXIT_AIRLOCK_ERROR;

/// `airlock mcp` options.
#[derive(Debug, clap::Args)]
pub struct McpArgs {
    #[command(flatten)]
    pub server: ServerOptions,

    /// Serve MCP's streamable HTTP transport on HOST:PORT (at /mcp) instead
    /// of stdio. Every request needs `Authorization: Bearer KEY` with an API
    /// key of the Airlock server AIRLOCK_HOST names; TLS (--tls-cert,
    /// --tls-key) is required unless HOST is a loopback address.
    #[arg(long, value_name = "HOST:PORT")]
    pub http: Option<SocketAddr>,

    /// The TLS certificate chain (PEM) of the HTTP listener.
    #[arg(long, value_name = "FILE", requires = "http", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// The TLS private key (PEM) of the HTTP listener.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// End an HTTP session (and kill its sandboxes) once it has had no tool
    /// call in flight for this many seconds.
    #[arg(long, value_name = "SECS", default_value_t = 3600, requires = "http",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout: u64,

    /// The root image of the sandbox each session starts for itself
    /// (default: the server's default image, with Python).
    #[arg(long, value_name = "NAME")]
    pub image: Option<String>,

    /// That sandbox's memory in MiB (default: the server's, 512).
    #[arg(long, value_name = "MIB")]
    pub memory: Option<u32>,

    /// A network destination that sandbox may reach (as `sandbox create
    /// --allow-net`). Repeatable; none: no network.
    #[arg(long = "allow-net", value_name = "RULE")]
    pub allow_net: Vec<String>,

    /// Seconds that sandbox lives after the session's last call on it (the
    /// session's end kills it sooner).
    #[arg(long, value_name = "SECS", default_value_t = 3600,
          value_parser = clap::value_parser!(u64).range(60..))]
    pub lifetime: u64,
}

/// Serves until the host hangs up or a signal; returns the exit code.
pub async fn run(args: McpArgs) -> u8 {
    match serve(args).await {
        Ok(()) => 0,
        Err(message) => {
            eprintln!("airlock: {message}");
            EXIT_AIRLOCK_ERROR
        }
    }
}

async fn serve(args: McpArgs) -> Result<(), String> {
    let failed = |error: airlock_mcp::ServeError| airlock::error_chain(&error);
    let endpoint = args.server.endpoint()?;
    let sandbox = SessionSandbox {
        image: args.image,
        memory_mib: args.memory,
        lifetime: Duration::from_secs(args.lifetime),
        allow_net: args.allow_net,
    };
    let Some(listen) = args.http else {
        let connector = match endpoint {
            Endpoint::Local { socket } => Connector::Local {
                socket,
                program: std::env::current_exe().map_err(|e| {
                    format!("cannot find the airlock binary to start the local server: {e}")
                })?,
            },
            remote => Connector::Endpoint(remote),
        };
        return serve_stdio(connector, sandbox).await.map_err(failed);
    };
    let tls = match (args.tls_cert, args.tls_key) {
        (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
        _ => None,
    };
    let server = HttpServer::bind(HttpOptions {
        listen,
        tls,
        server: endpoint,
        sandbox,
        idle: Duration::from_secs(args.idle_timeout),
    })
    .await
    .map_err(failed)?;
    // Tests and scripts bound to port 0 read the address here.
    eprintln!(
        "airlock: MCP listening on {}",
        server.url().map_err(failed)?
    );
    let (mut interrupt, mut terminate) = match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(interrupt), Ok(terminate)) => (interrupt, terminate),
        (Err(error), _) | (_, Err(error)) => return Err(format!("cannot handle signals: {error}")),
    };
    let stop = async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
    };
    server.run(stop).await.map_err(failed)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::commands::{Args, Commands};

    fn parse(args: &[&str]) -> Result<super::McpArgs, clap::Error> {
        let argv = [&["airlock", "mcp"], args].concat();
        Args::try_parse_from(&argv).map(|args| match args.command {
            Commands::Mcp(mcp) => *mcp,
            other => panic!("{other:?}"),
        })
    }

    #[test]
    fn stdio_by_default_and_http_with_its_tls_files() {
        let stdio = parse(&[]).unwrap();
        assert!(stdio.http.is_none());
        assert_eq!(stdio.lifetime, 3600);
        let http = parse(&[
            "--http",
            "0.0.0.0:8443",
            "--tls-cert",
            "c.pem",
            "--tls-key",
            "k.pem",
            "--idle-timeout",
            "600",
            "--image",
            "dev",
            "--allow-net",
            "index.example.com",
            "--allow-net",
            "*.github.com",
        ])
        .unwrap();
        assert_eq!(http.http, Some("0.0.0.0:8443".parse().unwrap()));
        assert_eq!(http.idle_timeout, 600);
        assert_eq!(http.image.as_deref(), Some("dev"));
        assert_eq!(http.allow_net, ["index.example.com", "*.github.com"]);
    }

    #[test]
    fn tls_files_come_in_pairs_and_only_with_http() {
        assert!(parse(&["--tls-cert", "c.pem", "--tls-key", "k.pem"]).is_err());
        assert!(parse(&["--http", "127.0.0.1:1", "--tls-cert", "c.pem"]).is_err());
        assert!(parse(&["--idle-timeout", "60"]).is_err());
        assert!(parse(&["--lifetime", "0"]).is_err());
    }
}
