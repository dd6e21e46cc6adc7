//! Telling the host that the agent serves.
//!
//! Once the gRPC listener is bound, the agent connects out to the host on
//! [`READY_PORT`] and writes [`READY_ANNOUNCEMENT`]. The host waits for
//! this before it dials the agent, so it never knocks while the guest's
//! vsock queues are still being set up. Only a vsock listener announces: on
//! a virtio-serial port the host's hello is the knock (see
//! `server::serial`), and a Unix socket (tests) has no host to tell.
//!
//! The announcement is best effort from the agent's side: it retries for a
//! while (the host binds its socket before the VM starts, so a refusal is
//! rare) and then only logs, because serving goes on either way.

use std::time::Duration;

use airlock_proto::{READY_ANNOUNCEMENT, READY_PORT};
use tokio::io::AsyncWriteExt;
use tokio_vsock::{VsockAddr, VsockStream, VMADDR_CID_HOST};

use crate::server::Listen;

/// Attempts before giving up, with [`RETRY_PAUSE`] between them.
const ATTEMPTS: u32 = 50;
/// Pause between attempts.
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// How long one attempt (connect and write) may take.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);

/// Announces a vsock listener to the host in the background.
pub fn spawn(listen: &Listen) {
    if let Listen::Vsock(port) = listen {
        let port = *port;
        tokio::spawn(async move { announce(port).await });
    }
}

async fn announce(serving_port: u32) {
    let mut last_error = None;
    for attempt in 1..=ATTEMPTS {
        match tokio::time::timeout(ATTEMPT_TIMEOUT, send()).await {
            Ok(Ok(())) => {
                tracing::debug!(
                    attempt,
                    port = READY_PORT,
                    serving_port,
                    "announced to the host"
                );
                return;
            }
            Ok(Err(error)) => last_error = Some(error.to_string()),
            Err(_) => last_error = Some(format!("no connection within {ATTEMPT_TIMEOUT:?}")),
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
    tracing::warn!(
        port = READY_PORT,
        error = last_error.unwrap_or_default(),
        "could not announce to the host; it may not find this agent"
    );
}

async fn send() -> std::io::Result<()> {
    let mut stream = VsockStream::connect(VsockAddr::new(VMADDR_CID_HOST, READY_PORT)).await?;
    stream.write_all(READY_ANNOUNCEMENT).await?;
    AsyncWriteExt::shutdown(&mut stream).await
}
