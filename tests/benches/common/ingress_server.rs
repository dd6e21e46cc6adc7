//! A server in the benchmark's process, on a Unix socket of its own, with
//! its HTTP ingress on a loopback port: the ingress and named-template
//! benchmarks' path from a client through the API and the ingress.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use airlock::SandboxBuilder;
use airlock_client::{Client, Endpoint};
use airlock_server::{IngressListener, Listeners, OnExit, ServerConfig, TcpEndpoint, UnixSocket};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub struct IngressServer {
    /// A client on its Unix socket.
    pub client: Client,
    /// Where its ingress listens.
    pub ingress: SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), airlock_server::ServerError>>,
}

impl IngressServer {
    /// Serves from `dir` (its socket and data), every sandbox from
    /// `builder`; its sandboxes are killed when it stops.
    pub async fn start(
        dir: &Path,
        builder: impl Fn() -> SandboxBuilder + Send + Sync + 'static,
    ) -> IngressServer {
        let socket = dir.join("server.sock");
        let endpoint = TcpEndpoint::bind("127.0.0.1:0".parse().unwrap(), None, true)
            .await
            .unwrap();
        let ingress = endpoint.local_addr().unwrap();
        let listeners = Listeners {
            unix: Some(UnixSocket::bind(&socket).await.unwrap()),
            tcp: None,
            ingress: Some(IngressListener {
                endpoint,
                domain: airlock_server::DEFAULT_INGRESS_DOMAIN.to_owned(),
            }),
        };
        let config = ServerConfig {
            data_dir: dir.join("data"),
            builder: Arc::new(builder),
            on_exit: OnExit::Kill,
            ..ServerConfig::default()
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(airlock_server::serve(config, listeners, async {
            let _ = stopped.await;
        }));
        let client = Endpoint::Local { socket }.connect().await.expect("client");
        IngressServer {
            client,
            ingress,
            stop,
            task,
        }
    }

    /// Stops it and waits for its end.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}
