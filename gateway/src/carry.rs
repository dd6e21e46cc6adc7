//! The host's side of `Network.Carry`: a few calls kept open toward the
//! agent, each waiting for the guest's next connection or DNS query, which
//! the [`Gateway`] then takes. A used call is replaced at once. A refusal
//! goes to the agent on the same call (`refused`, which resets the
//! program's connection, or a `note` of one the host answered itself), for
//! the guest's refusal log.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::time::Duration;

use airlock_proto::v1::network_client::NetworkClient;
use airlock_proto::v1::{
    carry_from_host, carry_to_host, opened, CarryFromHost, CarryToHost, GuestConnection,
    RefusalNote,
};
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::Streaming;

use super::told::{Tell, Told};
use super::{Carried, Gateway};

/// Calls kept open at once: how many guest connections can begin in the
/// time it takes to open the next call.
pub const WAITING_CARRIERS: usize = 4;
/// Messages toward the guest buffered per connection.
const TO_GUEST_DEPTH: usize = 8;
/// How long the agent gets to end a call once the host has finished.
const DRAIN_WAIT: Duration = Duration::from_secs(30);
/// The longest pause between attempts while the agent cannot be reached.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// The carriers of one sandbox: aborted when dropped.
#[derive(Debug)]
pub struct CarrierPool {
    tasks: JoinSet<()>,
}

impl CarrierPool {
    /// Keeps `WAITING_CARRIERS` (4) calls open on `channel` for `gateway`.
    pub fn start(channel: Channel, gateway: Arc<Gateway>) -> Self {
        let mut tasks = JoinSet::new();
        for _ in 0..WAITING_CARRIERS {
            tasks.spawn(keep_open(channel.clone(), Arc::clone(&gateway)));
        }
        Self { tasks }
    }
}

impl Drop for CarrierPool {
    fn drop(&mut self) {
        self.tasks.abort_all();
    }
}

/// Opens a call, waits for what it carries, hands that to its own task,
/// and opens the next.
async fn keep_open(channel: Channel, gateway: Arc<Gateway>) {
    let mut backoff = Duration::from_millis(20);
    let mut running = JoinSet::new();
    loop {
        while running.try_join_next().is_some() {}
        let (to_guest, requests) = mpsc::channel(TO_GUEST_DEPTH);
        let call = NetworkClient::new(channel.clone())
            .carry(ReceiverStream::new(requests))
            .await;
        let mut incoming = match call {
            Ok(response) => response.into_inner(),
            Err(status) => {
                tracing::debug!(%status, "opening a carrier");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        let opened = match incoming.message().await {
            Ok(Some(CarryToHost {
                event: Some(carry_to_host::Event::Opened(opened)),
            })) => opened,
            Ok(_) => continue,
            Err(status) => {
                tracing::debug!(%status, "a carrier ended unused");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        backoff = Duration::from_millis(20);
        let gateway = Arc::clone(&gateway);
        match opened.kind {
            Some(opened::Kind::Connection(connection)) => {
                running.spawn(connection_task(gateway, connection, incoming, to_guest));
            }
            Some(opened::Kind::Dns(query)) => {
                running.spawn(async move {
                    if let Some(reply) = gateway.dns(&query.query) {
                        let message = CarryFromHost {
                            event: Some(carry_from_host::Event::Data(reply.response.into())),
                        };
                        // The answer first: an agent that predates notes
                        // takes the first message as the answer.
                        if to_guest.send(message).await.is_ok() {
                            if let Some(told) = reply.told {
                                let _ = to_guest.send(note(told)).await;
                            }
                        }
                    }
                    drop(to_guest);
                    drain(incoming).await;
                });
            }
            None => {}
        }
    }
}

/// Takes one guest connection through the gateway; a refusal resets it.
async fn connection_task(
    gateway: Arc<Gateway>,
    connection: GuestConnection,
    incoming: Streaming<CarryToHost>,
    to_guest: mpsc::Sender<CarryFromHost>,
) {
    let Ok(ip) = connection.destination_ip.parse::<Ipv4Addr>() else {
        tracing::warn!(ip = %connection.destination_ip, "a guest connection to no IPv4 address");
        return;
    };
    let Ok(port) = u16::try_from(connection.destination_port) else {
        return;
    };
    let refuse = to_guest.clone();
    let tell = teller(to_guest.clone());
    let (give_back, given_back) = oneshot::channel();
    let carried = Carried::new(incoming, to_guest, give_back, gateway.egress_meter());
    let outcome = gateway
        .connection(carried, SocketAddrV4::new(ip, port), &tell)
        .await;
    // The call ends when every sender is gone: the agent then ends its
    // side, which `drain` waits for.
    drop(tell);
    if let Err(told) = outcome {
        let message = CarryFromHost {
            event: Some(carry_from_host::Event::Refused(told.reason)),
        };
        let _ = refuse.send(message).await;
    }
    drop(refuse);
    if let Ok(incoming) = given_back.await {
        drain(incoming).await;
    }
}

/// The message that tells the agent of a refusal the program was answered
/// about.
fn note(told: Told) -> CarryFromHost {
    CarryFromHost {
        event: Some(carry_from_host::Event::Note(RefusalNote {
            answer: told.answer.unwrap_or_else(|| "refused".to_owned()),
            reason: told.reason,
        })),
    }
}

/// A [`Tell`] that sends notes on one call, after the bytes already queued
/// on it; a note that finds the queue full is sent by a task of its own,
/// so that telling never blocks the gateway.
fn teller(to_guest: mpsc::Sender<CarryFromHost>) -> Tell {
    Arc::new(move |told: Told| {
        if let Err(TrySendError::Full(message)) = to_guest.try_send(note(told)) {
            let to_guest = to_guest.clone();
            tokio::spawn(async move {
                let _ = to_guest.send(message).await;
            });
        }
    })
}

/// Reads a call's response stream to its end (the agent ends it once it
/// has everything the host sent), so that dropping it cancels nothing.
async fn drain(mut incoming: Streaming<CarryToHost>) {
    let drained = tokio::time::timeout(DRAIN_WAIT, async {
        while let Ok(Some(_)) = incoming.message().await {}
    });
    if drained.await.is_err() {
        tracing::debug!("a carrier did not end after the host finished");
    }
}
