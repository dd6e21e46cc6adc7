//! The guest's clocks: uptime as the Health service reports it, and the
//! wall clock that `System.SetClock` and `System.Personalize` set.
//!
//! `CLOCK_BOOTTIME` counts from kernel start and includes suspend, so a
//! reading taken when the agent starts tells the host how long the kernel
//! took to reach PID 1.

use nix::sys::time::TimeSpec;
use nix::time::{clock_gettime, clock_settime, ClockId};

/// The latest wall clock time the agent accepts: CLOCK_REALTIME as a
/// signed 64-bit nanosecond count ends in 2262.
const MAX_UNIX_NANOS: u64 = i64::MAX as u64;

/// The wall clock could not be set.
#[derive(Debug, thiserror::Error)]
pub enum ClockError {
    /// The time is 0 (1970) or past 2262.
    #[error("clock time {0} ns is outside 1970..2262")]
    OutOfRange(u64),
    /// CLOCK_REALTIME could not be read.
    #[error("reading CLOCK_REALTIME")]
    Read(#[source] nix::Error),
    /// CLOCK_REALTIME could not be set.
    #[error("setting CLOCK_REALTIME")]
    Set(#[source] nix::Error),
}

/// A wall clock time checked for [`set_realtime`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Realtime(TimeSpec);

impl Realtime {
    /// The time `unix_nanos` nanoseconds after the Unix epoch, which must
    /// lie in 1970..2262 (and not be 0, which is what an unset field says).
    pub fn from_unix_nanos(unix_nanos: u64) -> Result<Self, ClockError> {
        if unix_nanos == 0 || unix_nanos > MAX_UNIX_NANOS {
            return Err(ClockError::OutOfRange(unix_nanos));
        }
        let secs = i64::try_from(unix_nanos / 1_000_000_000)
            .map_err(|_| ClockError::OutOfRange(unix_nanos))?;
        let nanos = i64::try_from(unix_nanos % 1_000_000_000)
            .map_err(|_| ClockError::OutOfRange(unix_nanos))?;
        Ok(Self(TimeSpec::new(secs, nanos)))
    }
}

/// Sets CLOCK_REALTIME to `target`; returns how far it moved (new minus
/// old, in nanoseconds). Needs `CAP_SYS_TIME`.
pub fn set_realtime(target: Realtime) -> Result<i64, ClockError> {
    let before = clock_gettime(ClockId::CLOCK_REALTIME).map_err(ClockError::Read)?;
    clock_settime(ClockId::CLOCK_REALTIME, target.0).map_err(ClockError::Set)?;
    let adjusted_by_nanos = nanos_of(target.0).saturating_sub(nanos_of(before));
    tracing::info!(adjusted_by_ms = adjusted_by_nanos / 1_000_000, "clock set");
    Ok(adjusted_by_nanos)
}

fn nanos_of(ts: TimeSpec) -> i64 {
    ts.tv_sec()
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec())
}

/// Microseconds since the guest kernel booted, or 0 if the clock cannot be
/// read (it always can on Linux; the fallback keeps a report, not a panic).
pub fn boottime_us() -> u64 {
    match clock_gettime(ClockId::CLOCK_BOOTTIME) {
        Ok(ts) => {
            let secs = u64::try_from(ts.tv_sec()).unwrap_or(0);
            let micros = u64::try_from(ts.tv_nsec() / 1_000).unwrap_or(0);
            secs.saturating_mul(1_000_000).saturating_add(micros)
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot read CLOCK_BOOTTIME");
            0
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn wall_clock_times_outside_1970_to_2262_are_refused() {
        for unix_nanos in [0, u64::MAX, MAX_UNIX_NANOS + 1] {
            assert!(matches!(
                Realtime::from_unix_nanos(unix_nanos),
                Err(ClockError::OutOfRange(_))
            ));
        }
        assert!(Realtime::from_unix_nanos(1).is_ok());
        assert!(Realtime::from_unix_nanos(MAX_UNIX_NANOS).is_ok());
    }

    #[test]
    fn nanos_round_trip_through_timespec() {
        let time = Realtime::from_unix_nanos(1_700_000_000_123_456_789).unwrap();
        assert_eq!(nanos_of(time.0), 1_700_000_000_123_456_789);
    }

    #[test]
    fn boottime_is_positive_and_monotonic() {
        let a = boottime_us();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = boottime_us();
        assert!(a > 0);
        assert!(b >= a + 1_000, "{a} then {b}");
    }
}
