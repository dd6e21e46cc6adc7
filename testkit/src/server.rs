//! [`TestServer`]: a real Airlock server in the test's own process, on its
//! Unix socket, a TCP listener (plain on loopback, or TLS with a throwaway
//! CA) and the HTTP ingress (plain or TLS), with clients of
//! `airlock-client` for the owner and for keys.
//!
//! Its sandboxes come from the library's process backend (the agent binary
//! as a host process, no VM, state and named templates under the server's
//! directory), or from a builder of the caller's ([`TestServer::start_with`]:
//! real VMs, for the VM tests and the benchmarks, with the named templates
//! where the library keeps them). What a test leaves running ends with its
//! server.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use airlock::SandboxBuilder;
use airlock_client::{api, Client, Endpoint};
use airlock_server::{
    IngressListener, Listeners, MetricsEndpoint, OnExit, ServerConfig, ServerError, TcpEndpoint,
    TlsFiles, UnixSocket,
};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::bins::agent_bin;
use crate::process::process_builder;
use crate::tls;

/// How a test server is made.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The most sandboxes at once (the server's default otherwise).
    pub max_sandboxes: Option<usize>,
    /// TLS on the TCP listener, with a throwaway CA ([`TestServer::ca`]).
    pub tls: bool,
    /// The most calls a key may have open at once.
    pub max_calls_per_key: Option<u32>,
    /// The ingress with TLS (the same throwaway CA), so HTTP/2 too.
    pub ingress_tls: bool,
    /// No ingress listener at all.
    pub without_ingress: bool,
    /// Serve from this directory (its socket, its data) instead of a
    /// temporary one of its own.
    pub dir: Option<PathBuf>,
    /// What the server does with its sandboxes when it stops (default:
    /// kills them, so that nothing a test leaves runs on).
    pub on_exit: Option<OnExit>,
    /// Serve Prometheus metrics on loopback ([`TestServer::metrics`]).
    pub metrics: bool,
    /// Keep no usage ledger (`ServerConfig::usage_ledger` off).
    pub no_usage_ledger: bool,
    /// Keep a warm pool of this many sandboxes of the default
    /// configuration, with no warm-up.
    pub pool: usize,
}

/// A running test server.
#[derive(Debug)]
pub struct TestServer {
    /// Its directory: `server.sock`, `data/`, and on the process backend
    /// the sandboxes' `state/` and `saved/` and the named `templates/`.
    pub dir: PathBuf,
    /// Its Unix socket, the owner's way in.
    pub socket: PathBuf,
    /// Its TCP listener (on loopback).
    pub tcp: SocketAddr,
    /// The HTTP ingress (on loopback).
    pub ingress: SocketAddr,
    /// The E2B-compatible front (plain HTTP on loopback, domain
    /// `e2b.localhost`).
    pub e2b: SocketAddr,
    /// The metrics listener (on loopback), with `metrics`.
    pub metrics: Option<SocketAddr>,
    /// The CA of the TLS listener (PEM file), with TLS.
    pub ca: Option<PathBuf>,
    /// The CA of the ingress's certificate, with `ingress_tls`.
    pub ingress_ca: Option<PathBuf>,
    /// The temporary directory, when it is the server's own.
    _temp: Option<tempfile::TempDir>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), ServerError>>>,
}

impl TestServer {
    /// Starts a server whose sandboxes run on the process backend.
    pub async fn start(options: Options) -> TestServer {
        // Fail here, naming the build command, rather than at a create.
        agent_bin();
        let (temp, dir) = home(&options);
        let (state, saved) = (dir.join("state"), dir.join("saved"));
        let templates = Some(dir.join("templates"));
        Self::serve(options, temp, dir, templates, move || {
            process_builder()
                .state_dir_base(state.clone())
                .saved_dir(saved.clone())
        })
        .await
    }

    /// Starts a server whose every sandbox comes from `builder`.
    pub async fn start_with(
        options: Options,
        builder: impl Fn() -> SandboxBuilder + Send + Sync + 'static,
    ) -> TestServer {
        let (temp, dir) = home(&options);
        Self::serve(options, temp, dir, None, builder).await
    }

    async fn serve(
        options: Options,
        temp: Option<tempfile::TempDir>,
        dir: PathBuf,
        templates: Option<PathBuf>,
        builder: impl Fn() -> SandboxBuilder + Send + Sync + 'static,
    ) -> TestServer {
        let socket = dir.join("server.sock");
        let files = (options.tls || options.ingress_tls)
            .then(|| tls::write_files(&dir, &["localhost", "127.0.0.1"]));
        let served = |wanted: bool| {
            files.as_ref().filter(|_| wanted).map(|f| TlsFiles {
                cert: f.cert.clone(),
                key: f.key.clone(),
            })
        };
        let ca_of = |wanted: bool| files.as_ref().filter(|_| wanted).map(|f| f.ca.clone());
        let tcp = TcpEndpoint::bind(loopback(), served(options.tls), !options.tls)
            .await
            .expect("bind the TCP listener");
        let tcp_address = tcp.local_addr().expect("the TCP listener's address");
        let ingress = TcpEndpoint::bind(loopback(), served(options.ingress_tls), true)
            .await
            .expect("bind the ingress");
        let ingress_address = ingress.local_addr().expect("the ingress's address");
        let e2b = TcpEndpoint::bind(loopback(), None, true)
            .await
            .expect("bind the E2B front");
        let e2b_address = e2b.local_addr().expect("the E2B front's address");
        let listeners = Listeners {
            unix: Some(
                UnixSocket::bind(&socket)
                    .await
                    .expect("bind the Unix socket"),
            ),
            tcp: Some(tcp),
            ingress: (!options.without_ingress).then(|| IngressListener {
                endpoint: ingress,
                domain: airlock_server::DEFAULT_INGRESS_DOMAIN.to_owned(),
            }),
            e2b: Some(airlock_server::E2bListener {
                endpoint: e2b,
                domain: airlock_server::e2b::DEFAULT_DOMAIN.to_owned(),
            }),
        };
        let mut config = ServerConfig {
            data_dir: dir.join("data"),
            builder: Arc::new(builder),
            // What a test leaves running ends with its server (a server's
            // default leaves sandboxes for the next one to adopt, which on
            // the process backend would leave agents running on the host).
            on_exit: options.on_exit.unwrap_or(OnExit::Kill),
            ..ServerConfig::default()
        };
        if let Some(templates) = templates {
            config.templates_dir = templates;
        }
        if let Some(max) = options.max_sandboxes {
            config.max_sandboxes = max;
        }
        if let Some(calls) = options.max_calls_per_key {
            config.max_calls_per_key = calls;
        }
        config.usage_ledger = !options.no_usage_ledger;
        if options.metrics {
            config.metrics =
                Some(MetricsEndpoint::bind(loopback()).expect("bind the metrics listener"));
        }
        if options.pool > 0 {
            config.pool = options.pool;
            config.pool_warm_up = airlock::WarmUp::none();
        }
        let metrics = config.metrics.as_ref().map(MetricsEndpoint::local_addr);
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(airlock_server::serve(config, listeners, async {
            let _ = stopped.await;
        }));
        TestServer {
            ca: ca_of(options.tls),
            ingress_ca: ca_of(options.ingress_tls),
            dir,
            socket,
            tcp: tcp_address,
            ingress: ingress_address,
            e2b: e2b_address,
            metrics,
            _temp: temp,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// The owner's client (the Unix socket).
    pub async fn owner(&self) -> Client {
        Endpoint::Local {
            socket: self.socket.clone(),
        }
        .connect()
        .await
        .expect("connect to the server's socket")
    }

    /// A client on TCP presenting `key` (or none).
    pub async fn remote(&self, key: Option<&str>) -> Client {
        let (scheme, host) = if self.ca.is_some() {
            ("https", "localhost")
        } else {
            ("http", "127.0.0.1")
        };
        Endpoint::remote(
            &format!("{scheme}://{host}:{}", self.tcp.port()),
            key.map(str::to_owned),
            self.ca.clone(),
        )
        .expect("the server's endpoint")
        .connect()
        .await
        .expect("connect to the server's TCP listener")
    }

    /// Makes a key (through the owner's socket) and returns it.
    pub async fn key(&self, name: &str, quota: api::KeyQuota) -> String {
        self.owner()
            .await
            .keys()
            .create_key(api::CreateKeyRequest {
                name: name.to_owned(),
                quota: Some(quota),
            })
            .await
            .expect("create a key")
            .into_inner()
            .secret
    }

    /// Stops the server and waits for it, failing if it failed.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await
                .expect("the server's task")
                .expect("the server ends cleanly");
        }
    }
}

/// The directory a server with `options` serves from, and the temporary
/// directory that it is when the options name none.
fn home(options: &Options) -> (Option<tempfile::TempDir>, PathBuf) {
    match &options.dir {
        Some(dir) => (None, dir.clone()),
        None => {
            let temp = tempfile::tempdir().expect("a temporary directory");
            let dir = temp.path().to_owned();
            (Some(temp), dir)
        }
    }
}

/// 127.0.0.1, any port.
fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}
