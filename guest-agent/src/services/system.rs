//! `airlock.agent.v1.System`: the guest as a whole.
//!
//! `Shutdown` answers first, then acts from a spawned task after
//! [`REPLY_GRACE`] so the reply reaches the host: as PID 1 it syncs and
//! powers off (the VMM then exits); otherwise (tests) it asks the server
//! to stop, and the agent process exits 0.

use std::time::Duration;

use airlock_proto::v1::{system_server, ShutdownRequest, ShutdownResponse};
use tokio::sync::watch;
use tonic::{Request, Response, Status};

use crate::init::poweroff;

/// How long the reply gets to flush before the agent acts.
pub const REPLY_GRACE: Duration = Duration::from_millis(100);

/// What `Shutdown` does.
#[derive(Debug, Clone)]
pub enum ShutdownMode {
    /// Sync and power the VM off (PID 1).
    PowerOff,
    /// Set the flag; the server stops when it sees `true`.
    Stop(watch::Sender<bool>),
}

/// The System service.
#[derive(Debug, Clone)]
pub struct SystemService {
    mode: ShutdownMode,
}

impl SystemService {
    /// A service that shuts down as `mode` says.
    pub fn new(mode: ShutdownMode) -> Self {
        Self { mode }
    }
}

#[tonic::async_trait]
impl system_server::System for SystemService {
    async fn shutdown(
        &self,
        _: Request<ShutdownRequest>,
    ) -> Result<Response<ShutdownResponse>, Status> {
        tracing::info!("shutdown requested");
        let mode = self.mode.clone();
        tokio::spawn(async move {
            tokio::time::sleep(REPLY_GRACE).await;
            match mode {
                ShutdownMode::PowerOff => poweroff::power_off_or_exit("shutdown requested"),
                ShutdownMode::Stop(stop) => {
                    stop.send_replace(true);
                }
            }
        });
        Ok(Response::new(ShutdownResponse {}))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use system_server::System;

    #[tokio::test]
    async fn shutdown_answers_then_signals_stop() {
        let (tx, mut rx) = watch::channel(false);
        let service = SystemService::new(ShutdownMode::Stop(tx));
        service
            .shutdown(Request::new(ShutdownRequest {}))
            .await
            .unwrap();
        assert!(!*rx.borrow(), "acts only after the reply grace");
        rx.wait_for(|stop| *stop).await.unwrap();
    }
}
