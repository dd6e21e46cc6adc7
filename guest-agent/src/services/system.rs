//! `airlock.agent.v1.System`: the guest as a whole.
//!
//! `Shutdown` answers first, then acts from a spawned task after
//! [`REPLY_GRACE`] so the reply reaches the host: as PID 1 it syncs and
//! powers off (the VMM then exits); otherwise (tests) it asks the server
//! to stop, and the agent process exits 0.
//!
//! `SetClock` sets CLOCK_REALTIME, but only as PID 1: an agent running as
//! an ordinary process (tests, development) is on the host, whose clock is
//! not the host bridge's to move.

use std::time::Duration;

use airlock_proto::v1::{
    system_server, SetClockRequest, SetClockResponse, ShutdownRequest, ShutdownResponse,
};
use nix::sys::time::TimeSpec;
use nix::time::{clock_gettime, clock_settime, ClockId};
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

    async fn set_clock(
        &self,
        request: Request<SetClockRequest>,
    ) -> Result<Response<SetClockResponse>, Status> {
        let target = realtime_from_nanos(request.into_inner().unix_nanos)?;
        if !matches!(self.mode, ShutdownMode::PowerOff) {
            return Err(Status::failed_precondition(
                "the agent sets the clock only as PID 1 in a guest",
            ));
        }
        let before = clock_gettime(ClockId::CLOCK_REALTIME)
            .map_err(|e| Status::internal(format!("reading CLOCK_REALTIME: {e}")))?;
        clock_settime(ClockId::CLOCK_REALTIME, target)
            .map_err(|e| Status::internal(format!("setting CLOCK_REALTIME: {e}")))?;
        let adjusted_by_nanos = nanos_of(target).saturating_sub(nanos_of(before));
        tracing::info!(adjusted_by_ms = adjusted_by_nanos / 1_000_000, "clock set");
        Ok(Response::new(SetClockResponse { adjusted_by_nanos }))
    }
}

/// The latest time `SetClock` accepts: CLOCK_REALTIME as a signed 64-bit
/// nanosecond count ends in 2262.
const MAX_UNIX_NANOS: u64 = i64::MAX as u64;

fn realtime_from_nanos(unix_nanos: u64) -> Result<TimeSpec, Status> {
    if unix_nanos == 0 || unix_nanos > MAX_UNIX_NANOS {
        return Err(Status::invalid_argument(format!(
            "clock time {unix_nanos} ns is outside 1970..2262"
        )));
    }
    let secs = i64::try_from(unix_nanos / 1_000_000_000)
        .map_err(|_| Status::invalid_argument("clock time out of range"))?;
    let nanos = i64::try_from(unix_nanos % 1_000_000_000)
        .map_err(|_| Status::invalid_argument("clock time out of range"))?;
    Ok(TimeSpec::new(secs, nanos))
}

fn nanos_of(ts: TimeSpec) -> i64 {
    ts.tv_sec()
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec())
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

    #[tokio::test]
    async fn set_clock_refuses_out_of_range_times() {
        let (tx, _rx) = watch::channel(false);
        let service = SystemService::new(ShutdownMode::Stop(tx));
        for unix_nanos in [0, u64::MAX] {
            let err = service
                .set_clock(Request::new(SetClockRequest { unix_nanos }))
                .await
                .unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument, "{unix_nanos}");
        }
    }

    #[tokio::test]
    async fn set_clock_leaves_the_host_clock_alone_outside_a_guest() {
        let (tx, _rx) = watch::channel(false);
        let service = SystemService::new(ShutdownMode::Stop(tx));
        let err = service
            .set_clock(Request::new(SetClockRequest {
                unix_nanos: 1_000_000_000,
            }))
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    }

    #[test]
    fn nanos_round_trip_through_timespec() {
        let ts = realtime_from_nanos(1_700_000_000_123_456_789).unwrap();
        assert_eq!(nanos_of(ts), 1_700_000_000_123_456_789);
    }
}
