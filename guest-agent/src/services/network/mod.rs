//! `airlock.agent.v1.Network`: the guest's side of network access.
//!
//! The guest has no network device. [`Enable`](NetworkService) raises
//! loopback and a dummy link with the default route ([`link`]), installs
//! the nftables redirect ([`nftables`], over [`netlink`]) and writes the
//! resolver and CA files ([`files`]). From then on [`tcp`] accepts every
//! outgoing TCP connection and [`dns`] every DNS query, and each is carried
//! to the host over a [`carrier`], a `Carry` call the host opened ahead of
//! time. The agent decides nothing about where a connection may go: the
//! host does, and a root program in the guest that rewrites the rules or
//! routes only loses its way to the agent. What the host says of each
//! refusal goes into the guest's [`refusals`] log.
//!
//! The other way in, [`dial`] connects the host to a program listening on
//! the guest's loopback (ingress); it needs no `Enable`.

pub mod carrier;
pub mod dial;
pub mod dns;
pub mod files;
pub mod link;
pub mod netlink;
pub mod nftables;
pub mod refusals;
pub mod tcp;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use airlock_proto::v1::{
    network_server, CarryFromHost, CarryToHost, DialFromHost, DialToHost, EnableNetworkRequest,
    EnableNetworkResponse,
};
use tokio::sync::{mpsc, OnceCell};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use carrier::{Carrier, CarrierError, Carriers, TO_HOST_DEPTH};
use refusals::RefusalLog;

/// Turning the network on failed.
#[derive(Debug, thiserror::Error)]
pub enum NetworkError {
    /// The agent is not PID 1 in a guest: the host's network is not its
    /// to change.
    #[error("the agent turns the network on only as PID 1 in a guest")]
    NotPid1,
    /// The nameserver is not an IPv4 address.
    #[error("nameserver {0:?} is not an IPv4 address")]
    BadNameserver(String),
    /// The links could not be raised.
    #[error(transparent)]
    Link(#[from] link::LinkError),
    /// The redirect could not be installed.
    #[error(transparent)]
    Redirect(#[from] nftables::RedirectError),
    /// A listener could not be opened.
    #[error("listening on {addr}")]
    Listen {
        /// Where.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A file could not be written.
    #[error(transparent)]
    File(#[from] files::FileError),
    /// A carrier was refused.
    #[error(transparent)]
    Carrier(#[from] CarrierError),
}

impl From<NetworkError> for Status {
    fn from(error: NetworkError) -> Self {
        let message = airlock_report::chain(&error);
        match error {
            NetworkError::NotPid1 => Status::failed_precondition(message),
            NetworkError::BadNameserver(_) => Status::invalid_argument(message),
            NetworkError::Carrier(CarrierError::TooMany) => Status::resource_exhausted(message),
            _ => Status::internal(message),
        }
    }
}

/// The Network service.
#[derive(Debug, Clone)]
pub struct NetworkService {
    in_guest: bool,
    root: PathBuf,
    carriers: Arc<Carriers>,
    listening: Arc<OnceCell<()>>,
    refusals: Arc<RefusalLog>,
}

impl NetworkService {
    /// A service that changes the guest's network only when `in_guest`
    /// (the agent is PID 1), writing files under `/`.
    pub fn new(in_guest: bool) -> Self {
        Self {
            in_guest,
            root: PathBuf::from("/"),
            carriers: Arc::default(),
            listening: Arc::default(),
            refusals: Arc::new(RefusalLog::new(Path::new("/"))),
        }
    }

    /// Turns the network on (see the module docs).
    async fn do_enable(
        &self,
        request: EnableNetworkRequest,
    ) -> Result<EnableNetworkResponse, NetworkError> {
        let nameserver: Ipv4Addr = request
            .nameserver
            .parse()
            .map_err(|_| NetworkError::BadNameserver(request.nameserver.clone()))?;
        if !self.in_guest {
            return Err(NetworkError::NotPid1);
        }
        link::bring_up()?;
        nftables::install(tcp::LISTEN_PORT, dns::LISTEN_PORT)?;
        self.listening
            .get_or_try_init(|| self.listen())
            .await
            .map(|_| ())?;
        files::write_resolv_conf(&self.root, nameserver)?;
        let ca_bundle_path = if request.extra_ca_pem.trim().is_empty() {
            String::new()
        } else {
            files::write_ca_bundle(&self.root, &request.extra_ca_pem)?
                .display()
                .to_string()
        };
        Ok(EnableNetworkResponse { ca_bundle_path })
    }

    /// Opens the TCP and DNS listeners and serves them for ever.
    async fn listen(&self) -> Result<(), NetworkError> {
        let tcp_addr = SocketAddr::from((Ipv4Addr::LOCALHOST, tcp::LISTEN_PORT));
        let listener = tokio::net::TcpListener::bind(tcp_addr)
            .await
            .map_err(|source| NetworkError::Listen {
                addr: tcp_addr,
                source,
            })?;
        let dns_addr = SocketAddr::from((Ipv4Addr::LOCALHOST, dns::LISTEN_PORT));
        let socket = tokio::net::UdpSocket::bind(dns_addr)
            .await
            .map_err(|source| NetworkError::Listen {
                addr: dns_addr,
                source,
            })?;
        tokio::spawn(tcp::serve(
            listener,
            self.carriers.clone(),
            self.refusals.clone(),
        ));
        tokio::spawn(dns::serve(
            socket,
            self.carriers.clone(),
            self.refusals.clone(),
        ));
        Ok(())
    }

    /// Test hook: this service writing files under `root`.
    #[cfg(test)]
    fn with_root(mut self, root: &Path) -> Self {
        self.root = root.to_owned();
        self.refusals = Arc::new(RefusalLog::new(root));
        self
    }
}

#[tonic::async_trait]
impl network_server::Network for NetworkService {
    async fn enable(
        &self,
        request: Request<EnableNetworkRequest>,
    ) -> Result<Response<EnableNetworkResponse>, Status> {
        Ok(Response::new(self.do_enable(request.into_inner()).await?))
    }

    type CarryStream = ReceiverStream<Result<CarryToHost, Status>>;

    async fn carry(
        &self,
        request: Request<Streaming<CarryFromHost>>,
    ) -> Result<Response<Self::CarryStream>, Status> {
        let (to_host, receiver) = mpsc::channel(TO_HOST_DEPTH);
        self.carriers
            .offer(Carrier {
                to_host,
                from_host: request.into_inner(),
            })
            .map_err(NetworkError::from)?;
        Ok(Response::new(ReceiverStream::new(receiver)))
    }

    type DialStream = ReceiverStream<Result<DialToHost, Status>>;

    async fn dial(
        &self,
        request: Request<Streaming<DialFromHost>>,
    ) -> Result<Response<Self::DialStream>, Status> {
        let mut from_host = request.into_inner();
        let port = dial::port(&mut from_host).await?;
        let (to_host, receiver) = mpsc::channel(dial::TO_HOST_DEPTH);
        tokio::spawn(dial::serve(port, from_host, to_host));
        Ok(Response::new(ReceiverStream::new(receiver)))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use network_server::Network;

    #[tokio::test]
    async fn enable_checks_the_nameserver_then_refuses_outside_a_guest() {
        let root = tempfile::tempdir().unwrap();
        let service = NetworkService::new(false).with_root(root.path());
        let bad = EnableNetworkRequest {
            nameserver: "not-an-address".to_owned(),
            extra_ca_pem: String::new(),
        };
        let err = service.enable(Request::new(bad)).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        let good = EnableNetworkRequest {
            nameserver: "198.18.0.1".to_owned(),
            extra_ca_pem: String::new(),
        };
        let err = service.enable(Request::new(good)).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::FailedPrecondition);
        assert!(!root.path().join("etc/resolv.conf").exists());
    }
}
