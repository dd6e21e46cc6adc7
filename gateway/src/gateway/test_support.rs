//! What the gateway's unit tests share: loopback servers, a gateway with a
//! small policy, and one guest connection played through it.

#![allow(clippy::unwrap_used)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{Name, RData, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::Gateway;
use crate::fake_ip::GATEWAY_ADDR;
use crate::host::HostAccess;
use crate::options::NetworkOptions;
use crate::policy::NetworkPolicy;
use crate::proxy::PROXY_PORT;
use crate::resolver::StaticResolver;
use crate::told::{Tell, Told};

/// Long enough for loopback; a hang shows as a failure, not a stuck run.
pub(super) const PATIENCE: Duration = Duration::from_secs(20);

/// A keep-alive HTTP server on loopback answering every request.
pub(super) async fn keep_alive_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut conn, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                loop {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {
                            let reply = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                            if conn.write_all(reply).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    addr
}

/// A loopback port nothing listens on.
pub(super) async fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A gateway allowing `plain.test` (on loopback, as the test servers are)
/// and `127.0.0.1/32`, with host access allowed, as the owner's.
pub(super) fn gateway(limit: usize) -> Gateway {
    gateway_with(
        NetworkPolicy::new()
            .allow("plain.test".parse().unwrap())
            .allow("127.0.0.1/32".parse().unwrap()),
        HostAccess::Allowed,
        limit,
    )
}

/// A gateway of `policy` and `access`, resolving `plain.test` and
/// `localhost` to loopback.
pub(super) fn gateway_with(policy: NetworkPolicy, access: HostAccess, limit: usize) -> Gateway {
    let options = NetworkOptions::new()
        .policy(policy)
        .host_access(access)
        .resolver(Arc::new(
            StaticResolver::new()
                .with("plain.test", IpAddr::V4(Ipv4Addr::LOCALHOST))
                .with("localhost", IpAddr::V4(Ipv4Addr::LOCALHOST)),
        ))
        .max_connections(limit);
    Gateway::new(options).unwrap()
}

/// The fake address the gateway's DNS gives `name`.
pub(super) fn resolve(gateway: &Gateway, name: &str) -> Ipv4Addr {
    let mut query = Message::new();
    query.add_query(Query::query(Name::from_ascii(name).unwrap(), RecordType::A));
    let reply = gateway.dns(&query.to_vec().unwrap()).unwrap();
    let answer = Message::from_vec(&reply.response).unwrap();
    match answer.answers()[0].data() {
        RData::A(a) => a.0,
        other => panic!("{other:?}"),
    }
}

/// A [`Tell`] that keeps what it is told.
pub(super) fn collector() -> (Tell, Arc<Mutex<Vec<Told>>>) {
    let kept: Arc<Mutex<Vec<Told>>> = Arc::default();
    let sink = Arc::clone(&kept);
    let tell: Tell = Arc::new(move |told| sink.lock().unwrap().push(told));
    (tell, kept)
}

/// What one guest connection to `destination` that sends `request`
/// reads until the host ends it, how the gateway ended it, and what it
/// told the agent.
pub(super) async fn exchange(
    gateway: &Arc<Gateway>,
    destination: SocketAddrV4,
    request: &[u8],
) -> (String, Result<(), Told>, Vec<Told>) {
    let (tell, told) = collector();
    let (mut guest, host_side) = tokio::io::duplex(64 << 10);
    let task = tokio::spawn({
        let gateway = Arc::clone(gateway);
        async move { gateway.connection(host_side, destination, &tell).await }
    });
    guest.write_all(request).await.unwrap();
    let mut read = Vec::new();
    tokio::time::timeout(PATIENCE, guest.read_to_end(&mut read))
        .await
        .expect("the host ends the connection")
        .unwrap();
    let ended = tokio::time::timeout(PATIENCE, task).await.unwrap().unwrap();
    let told = told.lock().unwrap().clone();
    (String::from_utf8_lossy(&read).into_owned(), ended, told)
}

pub(super) fn proxy() -> SocketAddrV4 {
    SocketAddrV4::new(GATEWAY_ADDR, PROXY_PORT)
}
