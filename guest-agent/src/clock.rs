//! Guest uptime as the Health service reports it.
//!
//! `CLOCK_BOOTTIME` counts from kernel start and includes suspend, so a
//! reading taken when the agent starts tells the host how long the kernel
//! took to reach PID 1.

use nix::time::{clock_gettime, ClockId};

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
mod tests {
    use super::*;

    #[test]
    fn boottime_is_positive_and_monotonic() {
        let a = boottime_us();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = boottime_us();
        assert!(a > 0);
        assert!(b >= a + 1_000, "{a} then {b}");
    }
}
