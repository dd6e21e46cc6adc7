//! Reaching the agent: one connection on the agent's channel, and the gRPC
//! channel on top.
//!
//! [`AgentTransport`] names how one agent is reached:
//!
//! - `serial`: a virtio-serial port, through the Unix socket QEMU listens on
//!   for it; each connection begins with the opening of
//!   [`airlock_proto::opening`]. QEMU can snapshot a VM with this channel,
//!   which templates and clones need. The default on QEMU.
//! - `hybrid`: guest vsock through a hybrid-vsock Unix socket (Firecracker,
//!   Cloud Hypervisor and vhost-device-vsock all speak it):
//!   `CONNECT <port>\n`, `OK <n>\n`.
//! - a plain Unix socket, for an agent run as a host process.
//!
//! [`AgentTransport::channel`] builds the tonic channel, which opens a new
//! connection (handshake included) whenever the last one broke; a
//! [`Quiesce`] can end its current connection between two HTTP/2 frames
//! (before a snapshot). Both sides
//! send HTTP/2 keepalives ([`KEEPALIVE_INTERVAL`], [`KEEPALIVE_TIMEOUT`]), so
//! a connection that stopped carrying bytes is dropped within seconds.
//!
//! What the guest sends is untrusted, so the host caps it: a gRPC message
//! at [`MAX_MESSAGE_BYTES`] (every client built with `CapMessages::capped`),
//! an HTTP/2 header list (metadata, trailers, error messages) at
//! [`MAX_HEADER_LIST_BYTES`]. HTTP/2 flow control bounds what the guest can
//! push ahead of a slow reader (hyper's windows: 2 MiB per stream, 5 MiB
//! per connection).

mod frames;
mod hybrid;
mod quiesce;
pub mod serial;
mod stream;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use airlock_proto::contract::serial::{KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT};
use airlock_proto::v1::code_client::CodeClient;
use airlock_proto::v1::files_client::FilesClient;
use airlock_proto::v1::health_client::HealthClient;
use airlock_proto::v1::network_client::NetworkClient;
use airlock_proto::v1::process_client::ProcessClient;
use airlock_proto::v1::system_client::SystemClient;
use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint};

pub use hybrid::{connect_hybrid, HandshakeError};
pub use quiesce::{Ended, GatedStream, Quiesce};
pub use serial::OpeningError;
pub use stream::AgentStream;

/// How long a new connection on the serial channel may wait for the
/// agent's answer once the agent is known to serve.
pub const SERIAL_OPENING_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest gRPC message the host decodes from the agent (tonic's own
/// default, set explicitly): the agent streams output and file data in
/// chunks of at most 128 KiB, so only a misbehaving guest comes near it,
/// and the call fails with `OutOfRange` instead of the host buffering it.
pub const MAX_MESSAGE_BYTES: usize = 4 << 20;
/// The largest HTTP/2 header list the host accepts from the agent
/// (hyper's default, set explicitly).
pub const MAX_HEADER_LIST_BYTES: u32 = 16 << 10;

/// The largest HTTP/2 frame the host accepts from the agent, which the
/// agent then uses for its DATA frames (HTTP/2's default is 16 KiB). A
/// 128 KiB file chunk then goes out as one frame, not eight: on a
/// virtio-serial port every frame boundary is work for the guest's one
/// vCPU (a frame header, a write of its own unless gathered).
pub const MAX_FRAME_BYTES: u32 = 256 << 10;

/// Applies [`MAX_MESSAGE_BYTES`] to a generated gRPC client.
pub(crate) trait CapMessages {
    /// The client with its decoding limit set.
    #[must_use]
    fn capped(self) -> Self;
}

macro_rules! cap_messages {
    ($($client:ident),* $(,)?) => {$(
        impl<T> CapMessages for $client<T>
        where
            T: tonic::client::GrpcService<tonic::body::Body>,
            T::Error: Into<tonic::codegen::StdError>,
            T::ResponseBody: tonic::codegen::Body<Data = bytes::Bytes> + Send + 'static,
            <T::ResponseBody as tonic::codegen::Body>::Error:
                Into<tonic::codegen::StdError> + Send,
        {
            fn capped(self) -> Self {
                self.max_decoding_message_size(MAX_MESSAGE_BYTES)
            }
        }
    )*};
}

cap_messages!(
    CodeClient,
    FilesClient,
    HealthClient,
    NetworkClient,
    ProcessClient,
    SystemClient
);

/// A gRPC channel to guest `port`; each (re)connection does the handshake.
/// Fails if the first connection fails.
pub async fn channel(uds: PathBuf, port: u32) -> Result<Channel, tonic::transport::Error> {
    AgentTransport::HybridVsock { uds, port }.channel().await
}

/// Errors opening one connection to the agent.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("cannot connect to {path}")]
    Connect {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("hybrid vsock handshake")]
    Hybrid(#[from] HandshakeError),
    #[error("serial channel opening")]
    Serial(#[from] OpeningError),
}

impl From<ConnectError> for std::io::Error {
    fn from(error: ConnectError) -> Self {
        std::io::Error::new(std::io::ErrorKind::ConnectionRefused, error)
    }
}

/// How the host reaches an agent: the one place a gRPC channel is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentTransport {
    /// The agent's virtio-serial port, through the Unix socket QEMU listens
    /// on for it.
    Serial(PathBuf),
    /// Guest vsock `port` through a hybrid-vsock Unix socket (QEMU with
    /// vhost-device-vsock; Firecracker and Cloud Hypervisor speak the same).
    HybridVsock { uds: PathBuf, port: u32 },
    /// An agent serving directly on a Unix socket (`--listen unix:PATH`),
    /// as the process backend runs it.
    Unix(PathBuf),
}

impl AgentTransport {
    /// One connection to the agent; a serial opening waits at most
    /// `within` for the agent's answer.
    pub async fn connect_within(&self, within: Duration) -> Result<AgentStream, ConnectError> {
        match self {
            AgentTransport::Serial(socket) => Ok(serial::open(socket, within).await?),
            AgentTransport::HybridVsock { uds, port } => {
                Ok(connect_hybrid(uds, *port).await?.into())
            }
            AgentTransport::Unix(path) => UnixStream::connect(path)
                .await
                .map(AgentStream::from)
                .map_err(|source| ConnectError::Connect {
                    path: path.clone(),
                    source,
                }),
        }
    }

    /// One connection to the agent.
    pub async fn connect(&self) -> Result<AgentStream, ConnectError> {
        self.connect_within(SERIAL_OPENING_TIMEOUT).await
    }

    /// A gRPC channel to the agent that connects again (handshake included)
    /// whenever the connection breaks. Fails if the first connection fails.
    pub async fn channel(self) -> Result<Channel, tonic::transport::Error> {
        self.channel_from(None).await
    }

    /// [`channel`](Self::channel), whose first connection is `first` when
    /// one is given (already opened, as during a start).
    pub async fn channel_from(
        self,
        first: Option<AgentStream>,
    ) -> Result<Channel, tonic::transport::Error> {
        self.channel_quiesced(first, Quiesce::default()).await
    }

    /// [`channel_from`](Self::channel_from), whose connections `quiesce`
    /// can end between two frames.
    pub async fn channel_quiesced(
        self,
        first: Option<AgentStream>,
        quiesce: Quiesce,
    ) -> Result<Channel, tonic::transport::Error> {
        let first = Arc::new(Mutex::new(first));
        Endpoint::from_static("http://airlock-agent")
            .tcp_nodelay(true)
            .http2_max_header_list_size(MAX_HEADER_LIST_BYTES)
            .max_frame_size(MAX_FRAME_BYTES)
            .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT)
            .keep_alive_while_idle(true)
            .connect_with_connector(tower::service_fn(move |_| {
                let transport = self.clone();
                let quiesce = quiesce.clone();
                let opened = first.lock().unwrap_or_else(PoisonError::into_inner).take();
                async move {
                    let stream = match opened {
                        Some(stream) => stream,
                        None => transport.connect().await?,
                    };
                    Ok::<_, std::io::Error>(TokioIo::new(quiesce.watch(stream)?))
                }
            }))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::UnixListener;

    /// A guest whose Health answer is `version_bytes` long.
    #[derive(Debug)]
    struct Bloated {
        version_bytes: usize,
    }

    #[tonic::async_trait]
    impl airlock_proto::v1::health_server::Health for Bloated {
        async fn check(
            &self,
            _: tonic::Request<airlock_proto::v1::CheckRequest>,
        ) -> Result<tonic::Response<airlock_proto::v1::CheckResponse>, tonic::Status> {
            Ok(tonic::Response::new(airlock_proto::v1::CheckResponse {
                agent_version: "x".repeat(self.version_bytes),
                ..Default::default()
            }))
        }
    }

    /// A fake device whose guest side is a gRPC server answering Health.
    async fn fake_agent(version_bytes: usize) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.sock");
        let listener = UnixListener::bind(&path).unwrap();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut line = Vec::new();
            while line.last() != Some(&b'\n') {
                line.push(stream.read_u8().await.unwrap());
            }
            stream.write_all(b"OK 1\n").await.unwrap();
            let incoming = tokio_stream::iter([Ok::<_, std::io::Error>(stream)]);
            tonic::transport::Server::builder()
                .add_service(airlock_proto::v1::health_server::HealthServer::new(
                    Bloated { version_bytes },
                ))
                .serve_with_incoming(incoming)
                .await
                .unwrap();
        });
        (dir, path)
    }

    async fn check(version_bytes: usize) -> Result<usize, tonic::Status> {
        let (_dir, path) = fake_agent(version_bytes).await;
        let channel = channel(path, 1024).await.unwrap();
        let answer = HealthClient::new(channel)
            .capped()
            .check(airlock_proto::v1::CheckRequest {})
            .await?;
        Ok(answer.into_inner().agent_version.len())
    }

    #[tokio::test]
    async fn messages_past_the_cap_are_refused() {
        let fits = MAX_MESSAGE_BYTES - 1024;
        assert_eq!(check(fits).await.unwrap(), fits);
        let status = check(MAX_MESSAGE_BYTES + 1).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::OutOfRange, "{status}");
    }
}
