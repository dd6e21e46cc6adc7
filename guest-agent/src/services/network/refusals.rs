//! The guest's refusal log ([`REFUSAL_LOG`]): one line per refusal the host
//! tells the agent of, so that a program whose connection was reset (raw
//! TCP, TLS whose server name is refused: protocols with no way to answer)
//! or a model reading its output can learn why with `cat`. Refusals the
//! host answered itself (an HTTP 403, NXDOMAIN) are written too.
//!
//! A line is `TIME WHERE OUTCOME: REASON`, e.g.
//! `2026-12-02T10:00:00Z 192.0.2.7:22 connection reset: no rule allows 192.0.2.7:22`
//! or `2026-12-02T10:00:01Z dns answered NXDOMAIN: no rule allows evil.example`.
//! TIME is the guest's UTC clock (the host sets it at start), WHERE the
//! address and port the program connected to (198.18.0.1:3128 for the
//! proxy) or `dns`. The file is mode 0644 in a root-owned directory on the
//! `/run` tmpfs: every program may read it, only root write it. It is
//! bounded: past [`MAX_BYTES`] it moves to `net.log.1` (replacing the one
//! before) and starts again; an identical line within [`REPEAT_WINDOW`]
//! (a resolver asking for A and AAAA at once) is written once. Writing
//! never fails a connection: an error is logged on the console.

use std::fs::{DirBuilder, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use airlock_proto::contract::paths::REFUSAL_LOG;

/// The size past which the log moves aside and starts again.
pub const MAX_BYTES: u64 = 256 * 1024;
/// How long an identical line is not written again.
pub const REPEAT_WINDOW: Duration = Duration::from_secs(1);
/// The most characters of a reason kept.
const MAX_REASON: usize = 1024;

/// The refusal log of one guest.
#[derive(Debug)]
pub struct RefusalLog {
    path: PathBuf,
    /// The last line written (without its time), and when.
    last: Mutex<Option<(String, Instant)>>,
}

impl RefusalLog {
    /// The log at [`REFUSAL_LOG`] under `root` (`/` in a guest).
    pub fn new(root: &Path) -> Self {
        Self {
            path: root.join(REFUSAL_LOG.trim_start_matches('/')),
            last: Mutex::new(None),
        }
    }

    /// Appends `TIME WHERE OUTCOME: REASON`.
    pub fn record(&self, place: &str, outcome: &str, reason: &str) {
        let reason: String = reason
            .chars()
            .take(MAX_REASON)
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        let entry = format!("{place} {outcome}: {reason}");
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if let Some((line, at)) = last.as_ref() {
            if *line == entry && now.duration_since(*at) < REPEAT_WINDOW {
                return;
            }
        }
        let line = format!("{} {entry}\n", utc_now());
        match self.append(line.as_bytes()) {
            Ok(()) => *last = Some((entry, now)),
            Err(error) => {
                tracing::warn!(path = %self.path.display(), %error, "writing the refusal log");
            }
        }
    }

    fn append(&self, line: &[u8]) -> io::Result<()> {
        if let Some(dir) = self.path.parent() {
            DirBuilder::new().recursive(true).mode(0o755).create(dir)?;
        }
        match std::fs::symlink_metadata(&self.path) {
            Ok(meta) if meta.len() >= MAX_BYTES => {
                std::fs::rename(&self.path, self.path.with_extension("log.1"))?;
            }
            _ => {}
        }
        // Never through a link a guest program left in its place.
        let mut file = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o644)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&self.path)?;
        file.write_all(line)
    }
}

/// The time now as `YYYY-MM-DDTHH:MM:SSZ`.
fn utc_now() -> String {
    let seconds = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    utc(seconds)
}

/// `seconds` since the epoch as `YYYY-MM-DDTHH:MM:SSZ` (the proleptic
/// Gregorian calendar, from Howard Hinnant's `civil_from_days`).
fn utc(seconds: u64) -> String {
    let days = seconds / 86_400;
    let of_day = seconds % 86_400;
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn lines(root: &Path) -> Vec<String> {
        std::fs::read_to_string(root.join("run/airlock/net.log"))
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn times_are_utc_dates() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc(1_796_209_261), "2026-12-02T11:01:01Z");
    }

    #[test]
    fn each_refusal_is_one_readable_line() {
        let root = tempfile::tempdir().unwrap();
        let log = RefusalLog::new(root.path());
        log.record(
            "192.0.2.7:22",
            "connection reset",
            "no rule allows 192.0.2.7:22",
        );
        log.record(
            "198.18.0.1:3128",
            "answered HTTP 403",
            "no rule allows\nevil.example:443",
        );
        let lines = lines(root.path());
        assert_eq!(lines.len(), 2, "{lines:?}");
        let (time, rest) = lines[0].split_once(' ').unwrap();
        assert!(time.ends_with('Z') && time.len() == 20, "{time}");
        assert_eq!(
            rest,
            "192.0.2.7:22 connection reset: no rule allows 192.0.2.7:22"
        );
        assert!(
            lines[1]
                .ends_with(" 198.18.0.1:3128 answered HTTP 403: no rule allows evil.example:443"),
            "{lines:?}"
        );
        let path = root.path().join("run/airlock/net.log");
        let mode = std::fs::metadata(path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o644);
    }

    #[test]
    fn a_repeat_at_once_is_written_once_and_the_log_is_bounded() {
        let root = tempfile::tempdir().unwrap();
        let log = RefusalLog::new(root.path());
        for _ in 0..2 {
            log.record("dns", "answered NXDOMAIN", "no rule allows evil.example");
        }
        log.record("dns", "answered NXDOMAIN", "no rule allows other.example");
        assert_eq!(lines(root.path()).len(), 2);

        let long = "x".repeat(MAX_REASON);
        for i in 0..(MAX_BYTES as usize / MAX_REASON + 10) {
            log.record(&i.to_string(), "connection reset", &long);
        }
        let dir = root.path().join("run/airlock");
        let size = std::fs::metadata(dir.join("net.log")).unwrap().len();
        assert!(size < MAX_BYTES, "{size}");
        assert!(dir.join("net.log.1").exists());
    }

    #[test]
    fn a_link_in_its_place_is_not_followed() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("run/airlock");
        std::fs::create_dir_all(&dir).unwrap();
        let target = root.path().join("elsewhere");
        std::fs::write(&target, "kept\n").unwrap();
        std::os::unix::fs::symlink(&target, dir.join("net.log")).unwrap();
        RefusalLog::new(root.path()).record("dns", "answered NXDOMAIN", "x");
        assert_eq!(std::fs::read_to_string(target).unwrap(), "kept\n");
    }
}
