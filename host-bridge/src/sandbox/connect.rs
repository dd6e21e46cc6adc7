//! Reaching the agent of a booting VM, in two bounded phases.
//!
//! 1. Wait for the agent's announcement on the ready socket (see
//!    [`READY_PORT`](airlock_proto::READY_PORT)), watching QEMU and the
//!    vsock device meanwhile. The boot deadline bounds this phase: it is the
//!    guest's boot. The host does not dial before: a hybrid-vsock connection
//!    that reaches vhost-device-vsock while the guest's driver is still
//!    setting up its queues can end the device's worker thread, after which
//!    no connection is ever answered.
//! 2. Dial the agent and check its health. The guest has said it serves, so
//!    this succeeds at once on a healthy VM; a failure that lasts
//!    [`DIAL_GRACE`] means the channel itself is broken, and the error says
//!    what each side showed (the device's state and log, the console)
//!    instead of waiting out the boot deadline.
//!
//! The spans `connect_agent`, `wait_for_agent` (phase 1: on a cold boot,
//! the guest's boot) and `dial_agent` (phase 2) time them.

use std::time::{Duration, Instant};

use airlock_proto::v1::health_client::HealthClient;
use airlock_proto::v1::{CheckRequest, CheckResponse};
use airlock_proto::{READY_ANNOUNCEMENT, READY_PORT};
use tokio::io::AsyncReadExt;
use tokio::net::{UnixListener, UnixStream};
use tonic::transport::Channel;
use tracing::Instrument;

use crate::error::{Error, Result};
use crate::transport::{AgentStream, AgentTransport, CapMessages, Quiesce};
use crate::vmm::{Backend, Readiness};

/// How much console output goes into error messages.
pub(super) const CONSOLE_TAIL_BYTES: usize = 4096;
/// How much of the vsock device's log goes into error messages.
const DEVICE_LOG_BYTES: usize = 2048;
/// How long a single dial plus Health check may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the host keeps dialling an agent that has announced itself.
pub(super) const DIAL_GRACE: Duration = Duration::from_secs(5);
/// How often the wait for the announcement looks at the VMM processes.
const WATCH_INTERVAL: Duration = Duration::from_millis(50);
/// How long the guest may take to write its announcement once connected.
const ANNOUNCEMENT_TIMEOUT: Duration = Duration::from_secs(2);

/// An agent that answered: the channel to it, its Health answer (and when
/// it arrived), and the handle that ends the channel's connection between
/// frames.
pub(super) struct Reached {
    pub channel: Channel,
    pub health: CheckResponse,
    pub answered: Instant,
    pub quiesce: Quiesce,
}

/// The boot deadline: when it passes and how long it was.
#[derive(Debug, Clone, Copy)]
pub(super) struct Deadline {
    pub at: Instant,
    pub timeout: Duration,
}

/// Waits for the agent's announcement (if the backend has one), then
/// connects and checks Health.
#[tracing::instrument(name = "connect_agent", skip_all)]
pub(super) async fn connect_agent(vmm: &mut Backend, deadline: Deadline) -> Result<Reached> {
    let readiness = vmm
        .take_readiness()
        .ok_or_else(|| Error::Protocol("the announcement socket was already used".into()))?;
    match readiness {
        Readiness::Announcement(listener) => {
            let announced = wait_for_announcement(vmm, &listener, deadline).await?;
            tracing::debug!("the agent announced itself");
            dial(vmm, announced, DIAL_GRACE, deadline)
                .instrument(tracing::info_span!("dial_agent"))
                .await
        }
        Readiness::Opening => {
            let opened = open_serial(vmm, deadline).await?;
            tracing::debug!("the agent answered the opening");
            dial_opened(vmm, opened, deadline)
                .instrument(tracing::info_span!("dial_agent"))
                .await
        }
        // Nothing to wait for but the agent itself: the boot deadline
        // bounds the dialling.
        Readiness::Dial => {
            dial(vmm, Instant::now(), deadline.timeout, deadline)
                .instrument(tracing::info_span!("dial_agent"))
                .await
        }
    }
}

/// Phase 1: returns when the agent announced itself.
#[tracing::instrument(name = "wait_for_agent", skip_all)]
async fn wait_for_announcement(
    vmm: &mut Backend,
    listener: &UnixListener,
    deadline: Deadline,
) -> Result<Instant> {
    let mut last_error =
        format!("the agent has not announced itself on host vsock port {READY_PORT}");
    loop {
        check_processes(vmm)?;
        if Instant::now() >= deadline.at {
            return Err(Error::BootTimeout {
                timeout: deadline.timeout,
                last_error: format!(
                    "{last_error}; an agent older than this host does not announce: \
                     rebuild the initramfs with scripts/setup; vsock device: {}",
                    vmm.device_diagnostics(DEVICE_LOG_BYTES)
                ),
                console_tail: vmm.diagnostics(CONSOLE_TAIL_BYTES),
            });
        }
        let accepted = match tokio::time::timeout(WATCH_INTERVAL, listener.accept()).await {
            Err(_) => continue,
            Ok(accepted) => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                last_error = format!("accepting the announcement: {error}");
                tracing::debug!(%error, "cannot accept on the announcement socket");
                tokio::time::sleep(WATCH_INTERVAL).await;
                continue;
            }
        };
        match read_announcement(stream).await {
            Ok(()) => return Ok(Instant::now()),
            Err(error) => {
                last_error = crate::error_chain(&error);
                tracing::warn!(error = %last_error, "ignoring a malformed announcement");
            }
        }
    }
}

/// Phase 1 on the serial channel: opens a connection, which succeeds once
/// the agent serves; watches the VMM meanwhile.
#[tracing::instrument(name = "wait_for_agent", skip_all)]
async fn open_serial(vmm: &mut Backend, deadline: Deadline) -> Result<AgentStream> {
    let transport = vmm.transport();
    let mut last_error = String::from("the agent has not answered the opening");
    loop {
        check_processes(vmm)?;
        let left = deadline.at.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::BootTimeout {
                timeout: deadline.timeout,
                last_error: format!(
                    "{last_error}; an agent older than this host serves only vsock: \
                     rebuild the initramfs with scripts/setup"
                ),
                console_tail: vmm.diagnostics(CONSOLE_TAIL_BYTES),
            });
        }
        let open = transport.connect_within(left);
        tokio::pin!(open);
        let result = loop {
            match tokio::time::timeout(WATCH_INTERVAL, &mut open).await {
                Ok(result) => break result,
                Err(_) => check_processes(vmm)?,
            }
        };
        match result {
            Ok(stream) => return Ok(stream),
            Err(error) => {
                last_error = crate::error_chain(&error);
                tracing::debug!(%last_error, "opening the serial channel");
                tokio::time::sleep(WATCH_INTERVAL).await;
            }
        }
    }
}

/// Phase 2 on the serial channel: Health on the opened connection; if that
/// fails, dial afresh for [`DIAL_GRACE`].
async fn dial_opened(
    vmm: &mut Backend,
    opened: AgentStream,
    deadline: Deadline,
) -> Result<Reached> {
    let answered = Instant::now();
    let attempt = probe(vmm.transport(), Some(opened));
    match tokio::time::timeout(PROBE_TIMEOUT, attempt).await {
        Ok(Ok(ready)) => Ok(ready),
        Ok(Err(error)) => {
            tracing::debug!(error = %crate::error_chain(&error), "the first connection failed; dialling again");
            dial(vmm, answered, DIAL_GRACE, deadline).await
        }
        Err(_) => {
            tracing::debug!("no health answer on the first connection; dialling again");
            dial(vmm, answered, DIAL_GRACE, deadline).await
        }
    }
}

/// Why an announcement on the ready socket was not the agent's.
#[derive(Debug, thiserror::Error)]
enum AnnouncementError {
    #[error("the announcement did not arrive within {0:?}")]
    Late(Duration),
    #[error("reading the announcement")]
    Read(#[source] std::io::Error),
    #[error("unexpected announcement {0:?}")]
    Unexpected(String),
}

/// Why a dial did not reach the agent.
#[derive(Debug, thiserror::Error)]
enum ProbeError {
    #[error("connect")]
    Connect(#[source] tonic::transport::Error),
    #[error("health")]
    Health(#[source] tonic::Status),
}

/// Reads exactly [`READY_ANNOUNCEMENT`] and the end of the stream.
async fn read_announcement(stream: UnixStream) -> std::result::Result<(), AnnouncementError> {
    let mut received = Vec::with_capacity(READY_ANNOUNCEMENT.len() + 1);
    let limit = u64::try_from(READY_ANNOUNCEMENT.len() + 1).unwrap_or(u64::MAX);
    let mut stream = stream.take(limit);
    let read = stream.read_to_end(&mut received);
    match tokio::time::timeout(ANNOUNCEMENT_TIMEOUT, read).await {
        Err(_) => Err(AnnouncementError::Late(ANNOUNCEMENT_TIMEOUT)),
        Ok(Err(error)) => Err(AnnouncementError::Read(error)),
        Ok(Ok(_)) if received == READY_ANNOUNCEMENT => Ok(()),
        Ok(Ok(_)) => Err(AnnouncementError::Unexpected(
            String::from_utf8_lossy(&received).into_owned(),
        )),
    }
}

/// Phase 2: dials until the agent answers Health, for at most `grace`
/// ([`DIAL_GRACE`] after an announcement).
async fn dial(
    vmm: &mut Backend,
    announced: Instant,
    grace: Duration,
    deadline: Deadline,
) -> Result<Reached> {
    let give_up = (announced + grace).min(deadline.at);
    let transport = vmm.transport();
    let mut backoff = Duration::from_millis(2);
    loop {
        check_processes(vmm)?;
        let attempt = probe(transport.clone(), None);
        let last_error = match tokio::time::timeout(PROBE_TIMEOUT, attempt).await {
            Ok(Ok(ready)) => return Ok(ready),
            Ok(Err(error)) => crate::error_chain(&error),
            Err(_) => format!("no answer within {PROBE_TIMEOUT:?}"),
        };
        tracing::debug!(%last_error, "the announced agent did not answer yet");
        if Instant::now() >= give_up {
            check_processes(vmm)?;
            return Err(Error::AgentUnreachable {
                waited: announced.elapsed(),
                last_error,
                device: vmm.device_diagnostics(DEVICE_LOG_BYTES),
                console_tail: vmm.diagnostics(CONSOLE_TAIL_BYTES),
            });
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_millis(100));
    }
}

/// Builds a channel (on `opened`, if given) and checks Health on it.
async fn probe(
    transport: AgentTransport,
    opened: Option<AgentStream>,
) -> std::result::Result<Reached, ProbeError> {
    let quiesce = Quiesce::default();
    let channel = transport
        .channel_quiesced(opened, quiesce.clone())
        .await
        .map_err(ProbeError::Connect)?;
    let health = HealthClient::new(channel.clone())
        .capped()
        .check(CheckRequest {})
        .await
        .map_err(ProbeError::Health)?
        .into_inner();
    Ok(Reached {
        channel,
        health,
        answered: Instant::now(),
        quiesce,
    })
}

/// Fails if the VMM (QEMU) or the vsock device has exited.
fn check_processes(vmm: &mut Backend) -> Result<()> {
    if let Some(status) = vmm.try_exit()? {
        return Err(Error::VmExited {
            status: status.to_string(),
            console_tail: vmm.diagnostics(CONSOLE_TAIL_BYTES),
        });
    }
    vmm.check_device()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    async fn announce(
        bytes: &'static [u8],
        close: bool,
    ) -> std::result::Result<(), AnnouncementError> {
        let (host, mut guest) = UnixStream::pair().unwrap();
        tokio::spawn(async move {
            guest.write_all(bytes).await.unwrap();
            if close {
                guest.shutdown().await.unwrap();
                drop(guest);
            } else {
                // Keeps the stream open without writing more.
                std::future::pending::<()>().await;
            }
        });
        read_announcement(host).await
    }

    #[tokio::test]
    async fn the_exact_announcement_is_accepted() {
        let answer = announce(READY_ANNOUNCEMENT, true).await;
        assert!(answer.is_ok(), "{answer:?}");
    }

    #[tokio::test]
    async fn anything_else_is_refused() {
        for bytes in [
            &b""[..],
            b"airlock-agent ready",
            b"airlock-agent ready\nmore",
            b"hello\n",
        ] {
            let error = announce(bytes, true).await.unwrap_err().to_string();
            assert!(error.contains("unexpected announcement"), "{error}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_guest_times_out() {
        let error = announce(b"airlock", false).await.unwrap_err().to_string();
        assert!(error.contains("did not arrive"), "{error}");
    }
}
