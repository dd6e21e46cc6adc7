//! Reaching the agent: the hybrid-vsock handshake and the gRPC channel on top.
//!
//! Firecracker, Cloud Hypervisor and vhost-device-vsock all expose a guest's
//! vsock ports through one host Unix socket: connect, write `CONNECT <port>\n`,
//! read `OK <host-port>\n`, and the stream is then the guest connection.
//! [`connect_hybrid`] does that handshake strictly. [`AgentTransport`] names
//! how one agent is reached (hybrid vsock, or a plain Unix socket for an
//! agent run as a process) and builds the tonic channel on top, which
//! connects again, handshake included, on every reconnect; [`channel`] is
//! its hybrid-vsock shorthand.
//!
//! What the guest sends is untrusted, so the host caps it: a gRPC message
//! at [`MAX_MESSAGE_BYTES`] (every client built with `CapMessages::capped`),
//! an HTTP/2 header list (metadata, trailers, error messages) at
//! [`MAX_HEADER_LIST_BYTES`]. HTTP/2 flow control bounds what the guest can
//! push ahead of a slow reader (hyper's windows: 2 MiB per stream, 5 MiB
//! per connection).

use std::path::{Path, PathBuf};
use std::time::Duration;

use airlock_proto::v1::code_client::CodeClient;
use airlock_proto::v1::files_client::FilesClient;
use airlock_proto::v1::health_client::HealthClient;
use airlock_proto::v1::process_client::ProcessClient;
use airlock_proto::v1::system_client::SystemClient;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint};

/// Longest acceptable handshake answer: "OK " plus a u32 and a newline.
const MAX_ANSWER: usize = 32;
/// How long the guest side may take to answer a CONNECT.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);

/// The largest gRPC message the host decodes from the agent (tonic's own
/// default, set explicitly): the agent streams output and file data in
/// chunks of at most 128 KiB, so only a misbehaving guest comes near it,
/// and the call fails with `OutOfRange` instead of the host buffering it.
pub const MAX_MESSAGE_BYTES: usize = 4 << 20;
/// The largest HTTP/2 header list the host accepts from the agent
/// (hyper's default, set explicitly).
pub const MAX_HEADER_LIST_BYTES: u32 = 16 << 10;

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
    ProcessClient,
    SystemClient
);

/// Errors of the hybrid-vsock handshake.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("cannot connect to {path}")]
    Connect {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("hybrid vsock i/o")]
    Io(#[from] std::io::Error),
    #[error("connection closed before the guest port {port} answered (not listening yet?)")]
    Refused { port: u32 },
    #[error("no answer from guest port {port} within {HANDSHAKE_TIMEOUT:?}")]
    Timeout { port: u32 },
    #[error("unexpected handshake answer {0:?}")]
    BadAnswer(String),
}

impl From<HandshakeError> for std::io::Error {
    fn from(error: HandshakeError) -> Self {
        match error {
            HandshakeError::Io(io) => io,
            other => std::io::Error::new(std::io::ErrorKind::ConnectionRefused, other),
        }
    }
}

/// Connects to guest `port` through the hybrid-vsock socket at `uds`.
pub async fn connect_hybrid(uds: &Path, port: u32) -> Result<UnixStream, HandshakeError> {
    let mut stream = UnixStream::connect(uds)
        .await
        .map_err(|source| HandshakeError::Connect {
            path: uds.to_owned(),
            source,
        })?;
    stream
        .write_all(format!("CONNECT {port}\n").as_bytes())
        .await?;
    // Read byte by byte: anything after the newline already belongs to the
    // guest's stream and must stay in the socket.
    let mut answer = Vec::with_capacity(MAX_ANSWER);
    let read_line = async {
        loop {
            let byte = match stream.read_u8().await {
                Ok(byte) => byte,
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    return Err(HandshakeError::Refused { port })
                }
                Err(e) => return Err(e.into()),
            };
            if byte == b'\n' {
                return Ok(());
            }
            answer.push(byte);
            if answer.len() > MAX_ANSWER {
                return Err(HandshakeError::BadAnswer(
                    String::from_utf8_lossy(&answer).into_owned(),
                ));
            }
        }
    };
    tokio::time::timeout(HANDSHAKE_TIMEOUT, read_line)
        .await
        .map_err(|_| HandshakeError::Timeout { port })??;
    parse_answer(&answer)?;
    Ok(stream)
}

/// Accepts exactly `OK <u32>`.
fn parse_answer(answer: &[u8]) -> Result<u32, HandshakeError> {
    let bad = || HandshakeError::BadAnswer(String::from_utf8_lossy(answer).into_owned());
    let text = std::str::from_utf8(answer).map_err(|_| bad())?;
    let port = text.strip_prefix("OK ").ok_or_else(bad)?;
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    port.parse().map_err(|_| bad())
}

/// A gRPC channel to guest `port`; each (re)connection does the handshake.
/// Fails if the first connection fails.
pub async fn channel(uds: PathBuf, port: u32) -> Result<Channel, tonic::transport::Error> {
    AgentTransport::HybridVsock { uds, port }.channel().await
}

/// How the host reaches an agent: the one place a gRPC channel is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentTransport {
    /// Guest vsock `port` through a hybrid-vsock Unix socket (QEMU with
    /// vhost-device-vsock; Firecracker and Cloud Hypervisor speak the same).
    HybridVsock { uds: PathBuf, port: u32 },
    /// An agent serving directly on a Unix socket (`--listen unix:PATH`),
    /// as the process backend runs it.
    Unix(PathBuf),
}

impl AgentTransport {
    /// One connection to the agent.
    pub async fn connect(&self) -> Result<UnixStream, HandshakeError> {
        match self {
            AgentTransport::HybridVsock { uds, port } => connect_hybrid(uds, *port).await,
            AgentTransport::Unix(path) => {
                UnixStream::connect(path)
                    .await
                    .map_err(|source| HandshakeError::Connect {
                        path: path.clone(),
                        source,
                    })
            }
        }
    }

    /// A gRPC channel to the agent that connects again (handshake included)
    /// whenever the connection breaks. Fails if the first connection fails.
    pub async fn channel(self) -> Result<Channel, tonic::transport::Error> {
        Endpoint::from_static("http://airlock-agent")
            .tcp_nodelay(true)
            .http2_max_header_list_size(MAX_HEADER_LIST_BYTES)
            .connect_with_connector(tower::service_fn(move |_| {
                let transport = self.clone();
                async move {
                    let stream = transport.connect().await?;
                    Ok::<_, std::io::Error>(TokioIo::new(stream))
                }
            }))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncBufReadExt;
    use tokio::net::UnixListener;

    #[test]
    fn answer_parsing_is_strict() {
        assert_eq!(parse_answer(b"OK 1073741824").unwrap(), 1_073_741_824);
        for bad in [
            &b"OK"[..],
            b"OK ",
            b"ok 5",
            b"OK 5 ",
            b"OK -1",
            b"ERR",
            b"OK 99999999999",
        ] {
            assert!(
                parse_answer(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    /// A stand-in for the hybrid-vsock side, so the handshake is tested
    /// without a VM: answers `answer` and then echoes.
    async fn fake_device(answer: &'static [u8]) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.sock");
        let listener = UnixListener::bind(&path).unwrap();
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let mut stream = tokio::io::BufReader::new(stream);
            let mut line = String::new();
            stream.read_line(&mut line).await.unwrap();
            assert_eq!(line, "CONNECT 1024\n");
            stream.get_mut().write_all(answer).await.unwrap();
            let mut buf = [0u8; 64];
            let n = stream.read(&mut buf).await.unwrap();
            stream.get_mut().write_all(&buf[..n]).await.unwrap();
        });
        (dir, path)
    }

    #[tokio::test]
    async fn handshake_then_the_stream_is_the_guest_connection() {
        // The answer and the first guest bytes arrive in one write.
        let (_dir, path) = fake_device(b"OK 5\nhello").await;
        let mut stream = connect_hybrid(&path, 1024).await.unwrap();
        let mut first = [0u8; 5];
        stream.read_exact(&mut first).await.unwrap();
        assert_eq!(&first, b"hello");
        stream.write_all(b"ping").await.unwrap();
        let mut echo = [0u8; 4];
        stream.read_exact(&mut echo).await.unwrap();
        assert_eq!(&echo, b"ping");
    }

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

    #[tokio::test]
    async fn closed_or_garbled_answers_are_errors() {
        let (_dir, path) = fake_device(b"").await;
        // The fake closes after echoing nothing: we see a refusal.
        let err = tokio::time::timeout(Duration::from_secs(5), connect_hybrid(&path, 1024)).await;
        assert!(matches!(err, Ok(Err(_))), "{err:?}");
        let (_dir, path) = fake_device(b"NOPE\n").await;
        let err = connect_hybrid(&path, 1024).await.unwrap_err();
        assert!(
            matches!(err, HandshakeError::BadAnswer(ref a) if a == "NOPE"),
            "{err:?}"
        );
    }
}
