//! [`Sandbox::connect_port`]: ingress, a connection from the host to a
//! program listening in the guest (`Network.Dial`). It goes through the
//! agent channel like any call, so a paused sandbox (in memory or on disk)
//! is resumed by it, and an open connection counts as activity for the
//! idle timeout.

use airlock_proto::v1::network_client::NetworkClient;
use airlock_proto::v1::{dial_from_host, dial_to_host, DialFromHost, DialOpen};
use airlock_proto::Feature;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::error::ConfigError;
use super::Sandbox;
use crate::error::{Error, Result};
use crate::transport::CapMessages;
use airlock_gateway::GuestPort;

/// Messages toward the guest buffered per connection.
const TO_GUEST_DEPTH: usize = 8;

impl Sandbox {
    /// Connects to `port` on the guest's loopback, where a program in the
    /// sandbox listens, and returns the connection as a byte stream. Works
    /// whether or not the sandbox has a network. Nothing listening is
    /// [`Error::PortRefused`]; needs protocol revision 12.
    pub async fn connect_port(&self, port: u16) -> Result<GuestPort> {
        self.features.require(Feature::Dial)?;
        if port == 0 {
            return Err(ConfigError::PortZero.into());
        }
        let (to_guest, requests) = mpsc::channel(TO_GUEST_DEPTH);
        let open = DialFromHost {
            event: Some(dial_from_host::Event::Open(DialOpen {
                port: u32::from(port),
            })),
        };
        if to_guest.send(open).await.is_err() {
            return Err(Error::Protocol("the dial call's stream closed".to_owned()));
        }
        let mut incoming = NetworkClient::new(self.channel.clone())
            .capped()
            .dial(ReceiverStream::new(requests))
            .await
            .map_err(|status| Error::agent("Network.Dial", status))?
            .into_inner();
        let first = incoming
            .message()
            .await
            .map_err(|status| Error::agent("Network.Dial", status))?;
        match first.and_then(|m| m.event) {
            Some(dial_to_host::Event::Connected(_)) => Ok(GuestPort::new(
                port,
                incoming,
                to_guest,
                std::sync::Arc::clone(&self.ingress_meter),
            )),
            Some(dial_to_host::Event::Refused(reason)) => Err(Error::PortRefused { port, reason }),
            other => Err(Error::Protocol(format!(
                "Network.Dial answered {other:?} before connecting"
            ))),
        }
    }
}
