//! Connections from another loopback address: any of 127.0.0.0/8 is this
//! host's, so a test can be a second client address (per-address limits,
//! throttles).

use std::net::{Ipv4Addr, SocketAddr};

use airlock_client::api;
use hyper_util::rt::TokioIo;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

use crate::server::TestServer;

/// A plain TCP connection to `to` made from loopback address `source`.
pub async fn tcp_from(source: Ipv4Addr, to: SocketAddr) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().expect("a TCP socket");
    socket
        .bind(SocketAddr::from((source, 0)))
        .expect("bind a loopback address");
    socket.connect(to).await.expect("connect to the server")
}

/// A gRPC channel to the server's plain TCP listener from loopback address
/// `source`.
pub async fn channel_from(server: &TestServer, source: Ipv4Addr) -> Channel {
    let to = server.tcp;
    Endpoint::from_shared(format!("http://{to}"))
        .expect("the server's address")
        .connect_with_connector(tower::service_fn(move |_| async move {
            Ok::<_, std::io::Error>(TokioIo::new(tcp_from(source, to).await))
        }))
        .await
        .expect("a gRPC channel to the server")
}

/// The Sandboxes service on `channel`, presenting `key`.
pub fn sandboxes_with_key(
    channel: Channel,
    key: &str,
) -> api::sandboxes_client::SandboxesClient<
    InterceptedService<Channel, impl tonic::service::Interceptor>,
> {
    let value: MetadataValue<Ascii> = format!("Bearer {key}")
        .parse()
        .expect("a key is a header value");
    api::sandboxes_client::SandboxesClient::with_interceptor(
        channel,
        move |mut r: tonic::Request<()>| {
            r.metadata_mut().insert("authorization", value.clone());
            Ok(r)
        },
    )
}
