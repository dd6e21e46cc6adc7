//! Guest DNS: the UDP listener the redirect sends every query to port 53
//! to. Each query is carried to the host on a carrier of its own, and the
//! host's answer goes back to the program that asked; a refused name's
//! note goes into the [`RefusalLog`] first, so the line is there by the
//! time the program has its NXDOMAIN.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use airlock_proto::v1::{carry_from_host, carry_to_host, opened, CarryToHost, DnsQuery, Opened};
use tokio::net::UdpSocket;
use tokio::sync::Semaphore;

use super::carrier::{Carrier, Carriers, TAKE_WAIT};
use super::refusals::RefusalLog;

/// The port on 127.0.0.1 the redirect sends DNS queries to.
pub const LISTEN_PORT: u16 = 15053;
/// The largest query read (EDNS payloads stay well under it).
const MAX_QUERY: usize = 4096;
/// Queries answered at once; more wait.
const IN_FLIGHT: usize = 32;
/// How long the host gets to answer one query.
const ANSWER_WAIT: Duration = Duration::from_secs(10);
/// How long the host gets to end its call after the answer (it sends a
/// refused name's note, then ends at once).
const NOTE_WAIT: Duration = Duration::from_secs(1);

/// Answers queries for ever.
pub async fn serve(socket: UdpSocket, carriers: Arc<Carriers>, log: Arc<RefusalLog>) {
    let socket = Arc::new(socket);
    let in_flight = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut buf = vec![0u8; MAX_QUERY];
    loop {
        let (n, asker) = match socket.recv_from(&mut buf).await {
            Ok(received) => received,
            Err(error) => {
                tracing::warn!(%error, "reading a DNS query");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = in_flight.clone().acquire_owned().await else {
            return;
        };
        let query = bytes::Bytes::copy_from_slice(&buf[..n]);
        let (socket, carriers, log) = (socket.clone(), carriers.clone(), log.clone());
        tokio::spawn(async move {
            let _permit = permit;
            match carriers.take(TAKE_WAIT).await {
                Ok(carrier) => answer(&socket, asker, query, carrier, &log).await,
                Err(error) => tracing::warn!(%error, "DNS query dropped"),
            }
        });
    }
}

/// Carries one query and sends the host's answer, if any, to `asker`.
async fn answer(
    socket: &UdpSocket,
    asker: SocketAddr,
    query: bytes::Bytes,
    carrier: Carrier,
    log: &RefusalLog,
) {
    let Carrier {
        to_host,
        mut from_host,
    } = carrier;
    let opened = CarryToHost {
        event: Some(carry_to_host::Event::Opened(Opened {
            kind: Some(opened::Kind::Dns(DnsQuery { query })),
        })),
    };
    if to_host.send(Ok(opened)).await.is_err() {
        return;
    }
    let reply = tokio::time::timeout(ANSWER_WAIT, from_host.message()).await;
    let response = match reply {
        Ok(Ok(Some(message))) => match message.event {
            Some(carry_from_host::Event::Data(response)) => response,
            _ => return,
        },
        Ok(Ok(None)) => return,
        Ok(Err(status)) => {
            tracing::debug!(%status, "DNS carrier ended");
            return;
        }
        Err(_) => {
            tracing::debug!("the host did not answer a DNS query in time");
            return;
        }
    };
    // What follows the answer: a note when the name was refused, then the
    // end of the call.
    while let Ok(Ok(Some(message))) = tokio::time::timeout(NOTE_WAIT, from_host.message()).await {
        if let Some(carry_from_host::Event::Note(note)) = message.event {
            log.record("dns", &format!("answered {}", note.answer), &note.reason);
        }
    }
    if let Err(error) = socket.send_to(&response, asker).await {
        tracing::debug!(%error, %asker, "sending a DNS answer");
    }
}
