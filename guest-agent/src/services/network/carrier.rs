//! Carriers: `Network.Carry` calls the host opened ahead of time, each
//! waiting to carry the next guest connection or DNS query. The host keeps
//! a few open; [`Carriers::take`] hands the oldest live one to a new
//! connection, waiting a while for the host to open one if none is there.

use std::time::Duration;

use airlock_proto::v1::{CarryFromHost, CarryToHost};
use tokio::sync::{mpsc, Mutex};
use tonic::{Status, Streaming};

/// The most carriers the host may keep waiting at once.
pub const MAX_WAITING: usize = 64;
/// How long a guest connection waits for the host to open a carrier.
pub const TAKE_WAIT: Duration = Duration::from_secs(10);
/// Messages toward the host buffered per carrier before the guest's
/// program is made to wait.
pub const TO_HOST_DEPTH: usize = 8;

/// One open `Carry` call.
#[derive(Debug)]
pub struct Carrier {
    /// Messages to the host (the call's response stream).
    pub to_host: mpsc::Sender<Result<CarryToHost, Status>>,
    /// Messages from the host (the call's request stream).
    pub from_host: Streaming<CarryFromHost>,
}

/// No carrier could be had.
#[derive(Debug, thiserror::Error)]
pub enum CarrierError {
    /// The host has not opened one in time.
    #[error("the host opened no carrier within {0:?}")]
    NoneOpened(Duration),
    /// The host already keeps [`MAX_WAITING`] waiting.
    #[error("the host already keeps {MAX_WAITING} carriers waiting")]
    TooMany,
}

/// The waiting carriers.
#[derive(Debug)]
pub struct Carriers {
    offer: mpsc::Sender<Carrier>,
    waiting: Mutex<mpsc::Receiver<Carrier>>,
}

impl Default for Carriers {
    fn default() -> Self {
        let (offer, waiting) = mpsc::channel(MAX_WAITING);
        Self {
            offer,
            waiting: Mutex::new(waiting),
        }
    }
}

impl Carriers {
    /// Queues a carrier the host opened.
    pub fn offer(&self, carrier: Carrier) -> Result<(), CarrierError> {
        self.offer
            .try_send(carrier)
            .map_err(|_| CarrierError::TooMany)
    }

    /// The oldest carrier whose call is still open, waiting up to `wait`.
    pub async fn take(&self, wait: Duration) -> Result<Carrier, CarrierError> {
        let mut waiting = self.waiting.lock().await;
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match tokio::time::timeout_at(deadline, waiting.recv()).await {
                Ok(Some(carrier)) if !carrier.to_host.is_closed() => return Ok(carrier),
                Ok(Some(_closed)) => continue,
                Ok(None) | Err(_) => return Err(CarrierError::NoneOpened(wait)),
            }
        }
    }
}
