//! Server records as lines a model reads: sandboxes, times, states.

use std::time::{SystemTime, UNIX_EPOCH};

use airlock_client::api::{SandboxInfo, SandboxState};

/// `running`, `paused`, `on disk`, `ended`.
pub fn state(state: SandboxState) -> &'static str {
    match state {
        SandboxState::Running => "running",
        SandboxState::Paused => "paused",
        SandboxState::OnDisk => "on disk",
        SandboxState::Ended => "ended",
        SandboxState::Unspecified => "unknown",
    }
}

/// `1h 5m`, `3m 20s`, `12s`.
pub fn duration(secs: u64) -> String {
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m {s}s"),
        _ => format!("{h}h {m}m"),
    }
}

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

/// One line about a sandbox, with `marks` (such as "this session's
/// sandbox") at its end.
pub fn sandbox(info: &SandboxInfo, marks: &[&str]) -> String {
    let now = now_ms();
    let image = if info.image.is_empty() {
        "none (busybox)"
    } else {
        &info.image
    };
    let mut line = format!(
        "{}  {}  image {image}  {} MiB  {} vCPU",
        info.sandbox_id,
        state(info.state()),
        info.memory_mib,
        info.vcpus
    );
    line.push_str(if info.network {
        "  network"
    } else {
        "  no network"
    });
    if info.created_at_ms > 0 {
        let age = now.saturating_sub(info.created_at_ms) / 1000;
        line.push_str(&format!("  up {}", duration(age)));
    }
    if info.state() == SandboxState::Ended {
        if !info.end_reason.is_empty() {
            line.push_str(&format!("  ({})", info.end_reason));
        }
    } else if info.ends_at_ms > 0 {
        let left = info.ends_at_ms.saturating_sub(now) / 1000;
        line.push_str(&format!("  ends in {}", duration(left)));
    }
    for mark in marks {
        line.push_str(&format!("  [{mark}]"));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_hours_minutes_seconds() {
        assert_eq!(duration(12), "12s");
        assert_eq!(duration(200), "3m 20s");
        assert_eq!(duration(3900), "1h 5m");
    }

    #[test]
    fn a_sandbox_line_says_what_a_model_needs() {
        let info = SandboxInfo {
            sandbox_id: "sb-1".into(),
            state: SandboxState::Running as i32,
            image: "default".into(),
            memory_mib: 512,
            vcpus: 1,
            created_at_ms: now_ms() - 65_000,
            ends_at_ms: now_ms() + 3_000_000,
            ..Default::default()
        };
        let line = sandbox(&info, &["this session's sandbox"]);
        assert!(
            line.starts_with("sb-1  running  image default  512 MiB  1 vCPU  no network  up 1m"),
            "{line}"
        );
        assert!(line.ends_with("[this session's sandbox]"), "{line}");
    }
}
