//! A real server for the tests, in this process, on the library's process
//! backend (the agent binary as a host process, no VM): its Unix socket and
//! a TCP listener (plain on loopback, or TLS with a throwaway CA), and
//! clients of `airlock-client` for the owner and for keys.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use airlock::Sandbox;
use airlock_client::{api, Client, Endpoint};
use airlock_server::{
    IngressListener, Listeners, OnExit, ServerConfig, TcpEndpoint, TlsFiles, UnixSocket,
};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// `target/debug/airlock-agent` (`cargo build --workspace --bins` builds it).
pub fn agent_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("airlock-agent"))
        .unwrap_or_default();
    assert!(
        bin.is_file(),
        "{} is missing: build it with `cargo build --workspace --bins` first (scripts/test does)",
        bin.display()
    );
    bin
}

/// How a test server is made.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub max_sandboxes: Option<usize>,
    pub tls: bool,
    pub max_calls_per_key: Option<u32>,
    /// The ingress with TLS (the same throwaway CA), so HTTP/2 too.
    pub ingress_tls: bool,
    /// No ingress listener at all.
    pub without_ingress: bool,
}

/// A running test server.
pub struct TestServer {
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub tcp: SocketAddr,
    /// The HTTP ingress (plain, on loopback).
    pub ingress: SocketAddr,
    /// The CA of the TLS listener (PEM file), with TLS.
    pub ca: Option<PathBuf>,
    /// The CA of the ingress's certificate, with `ingress_tls`.
    pub ingress_ca: Option<PathBuf>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), airlock_server::ServerError>>>,
}

/// A CA and a certificate for `localhost` and 127.0.0.1 signed by it, as
/// PEM files in `dir`: (ca, cert, key).
fn tls_files(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let params =
        CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &ca).unwrap();
    let paths = (
        dir.join("ca.pem"),
        dir.join("server.pem"),
        dir.join("server.key"),
    );
    std::fs::write(&paths.0, ca.pem()).unwrap();
    std::fs::write(&paths.1, cert.pem()).unwrap();
    std::fs::write(&paths.2, key.serialize_pem()).unwrap();
    paths
}

impl TestServer {
    pub async fn start(options: Options) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("server.sock");
        let state = dir.path().join("state");
        let saved = dir.path().join("saved");
        let agent = agent_bin();
        let builder = Arc::new(move || {
            Sandbox::builder()
                .process_backend(agent.clone())
                .state_dir_base(state.clone())
                .saved_dir(saved.clone())
                .boot_timeout(Duration::from_secs(20))
        });
        let files = (options.tls || options.ingress_tls).then(|| tls_files(dir.path()));
        let (tls, ca) = match &files {
            Some((ca, cert, key)) if options.tls => (
                Some(TlsFiles {
                    cert: cert.clone(),
                    key: key.clone(),
                }),
                Some(ca.clone()),
            ),
            _ => (None, None),
        };
        let ingress_tls = match &files {
            Some((_, cert, key)) if options.ingress_tls => Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
            }),
            _ => None,
        };
        let ingress_ca = files
            .as_ref()
            .filter(|_| options.ingress_tls)
            .map(|(ca, _, _)| ca.clone());
        let tcp = TcpEndpoint::bind("127.0.0.1:0".parse().unwrap(), tls, !options.tls)
            .await
            .unwrap();
        let address = tcp.local_addr().unwrap();
        let ingress = TcpEndpoint::bind("127.0.0.1:0".parse().unwrap(), ingress_tls, true)
            .await
            .unwrap();
        let ingress_address = ingress.local_addr().unwrap();
        let listeners = Listeners {
            unix: Some(UnixSocket::bind(&socket).await.unwrap()),
            tcp: Some(tcp),
            ingress: (!options.without_ingress).then(|| IngressListener {
                endpoint: ingress,
                domain: airlock_server::DEFAULT_INGRESS_DOMAIN.to_owned(),
            }),
        };
        let mut config = ServerConfig {
            data_dir: dir.path().join("data"),
            templates_dir: dir.path().join("templates"),
            builder,
            // What a test leaves running ends with its server (a server's
            // default leaves sandboxes for the next one to adopt, which on
            // the process backend would leave agents running on the host).
            on_exit: OnExit::Kill,
            ..ServerConfig::default()
        };
        if let Some(max) = options.max_sandboxes {
            config.max_sandboxes = max;
        }
        if let Some(calls) = options.max_calls_per_key {
            config.max_calls_per_key = calls;
        }
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(airlock_server::serve(config, listeners, async {
            let _ = stopped.await;
        }));
        TestServer {
            dir,
            socket,
            tcp: address,
            ingress: ingress_address,
            ca,
            ingress_ca,
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
        .unwrap()
    }

    /// A client on TCP presenting `key` (or none).
    pub async fn remote(&self, key: Option<&str>) -> Client {
        let scheme = if self.ca.is_some() { "https" } else { "http" };
        let host = if self.ca.is_some() {
            "localhost"
        } else {
            "127.0.0.1"
        };
        Endpoint::remote(
            &format!("{scheme}://{host}:{}", self.tcp.port()),
            key.map(str::to_owned),
            self.ca.clone(),
        )
        .unwrap()
        .connect()
        .await
        .unwrap()
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
            .unwrap()
            .into_inner()
            .secret
    }

    /// Stops the server and waits for it.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.unwrap().unwrap();
        }
    }
}

/// A sandbox without an image (the process backend has none).
pub fn create() -> api::CreateSandboxRequest {
    api::CreateSandboxRequest {
        no_image: true,
        ..api::CreateSandboxRequest::default()
    }
}

/// Creates a sandbox; returns its id.
pub async fn create_sandbox(client: &Client, request: api::CreateSandboxRequest) -> String {
    client
        .sandboxes()
        .create(request)
        .await
        .unwrap()
        .into_inner()
        .sandbox_id
}

/// What `argv` printed and its exit, through a process stream.
pub async fn run(client: &Client, id: &str, argv: &[&str]) -> (Vec<u8>, Vec<u8>, api::ProcessExit) {
    let mut stream = client
        .start(api::StartProcess {
            sandbox_id: id.to_owned(),
            argv: argv.iter().map(|a| (*a).to_owned()).collect(),
            ..api::StartProcess::default()
        })
        .await
        .unwrap();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    loop {
        match stream.next_event().await.unwrap() {
            Some(api::process_event::Event::Stdout(o)) => out.extend_from_slice(&o.data),
            Some(api::process_event::Event::Stderr(o)) => err.extend_from_slice(&o.data),
            Some(api::process_event::Event::Exited(exit)) => return (out, err, exit),
            Some(_) => {}
            None => panic!("the stream ended without an exit"),
        }
    }
}

/// The gRPC code and the server's reason of a failed call.
pub fn refusal(status: &tonic::Status) -> (tonic::Code, Option<api::ErrorReason>) {
    (status.code(), airlock_client::reason::reason_of(status))
}

/// A plain TCP connection to `to` made from loopback address `source`
/// (any of 127.0.0.0/8 is this host's), so a test can be another client
/// address.
pub async fn tcp_from(source: std::net::Ipv4Addr, to: SocketAddr) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((source, 0))).unwrap();
    socket.connect(to).await.unwrap()
}

/// A gRPC channel to the server's plain TCP listener from loopback address
/// `source`.
pub async fn channel_from(
    server: &TestServer,
    source: std::net::Ipv4Addr,
) -> tonic::transport::Channel {
    let to = server.tcp;
    tonic::transport::Endpoint::from_shared(format!("http://{to}"))
        .unwrap()
        .connect_with_connector(tower::service_fn(move |_| async move {
            Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tcp_from(source, to).await))
        }))
        .await
        .unwrap()
}

/// The Sandboxes service on `channel`, presenting `key`.
pub fn sandboxes_with_key(
    channel: tonic::transport::Channel,
    key: &str,
) -> api::sandboxes_client::SandboxesClient<
    tonic::service::interceptor::InterceptedService<
        tonic::transport::Channel,
        impl tonic::service::Interceptor,
    >,
> {
    let value: tonic::metadata::MetadataValue<tonic::metadata::Ascii> =
        format!("Bearer {key}").parse().unwrap();
    api::sandboxes_client::SandboxesClient::with_interceptor(
        channel,
        move |mut r: tonic::Request<()>| {
            r.metadata_mut().insert("authorization", value.clone());
            Ok(r)
        },
    )
}
