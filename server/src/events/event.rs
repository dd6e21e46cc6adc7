//! [`Event`]: one thing that happened in a sandbox's life, as the log keeps
//! it, the bus carries it, `Events.Watch` answers it and a webhook posts it
//! (its JSON form is the webhook's body, see docs/operations.md).

use serde::{Deserialize, Serialize};

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A sandbox started: cold, from the pool, a snapshot, a template, or
    /// as a fork's child (`origin`, `parent`, `snapshot` say which).
    Created,
    /// It runs again after a pause (by a call, or a call made while it was
    /// paused).
    Resumed,
    /// Its guest stopped: in memory or saved to disk (`pause_mode`).
    Paused,
    /// A named snapshot was taken of it (`snapshot`).
    Snapshotted,
    /// It was forked (`children`; each child has its own `created`).
    Forked,
    /// It reached its timeout and was killed.
    TimedOut,
    /// A call (or a stopping server) killed it.
    Killed,
    /// The server had it in its records, but it was gone when the server
    /// started.
    Lost,
    /// It ended otherwise: the VM exited, its agent stopped answering, or
    /// the idle policy stopped it (`reason` says which).
    Ended,
}

impl EventKind {
    /// Every kind, in the order the API numbers them.
    pub const ALL: [EventKind; 9] = [
        EventKind::Created,
        EventKind::Resumed,
        EventKind::Paused,
        EventKind::Snapshotted,
        EventKind::Forked,
        EventKind::TimedOut,
        EventKind::Killed,
        EventKind::Lost,
        EventKind::Ended,
    ];

    /// Its name, as the log and the API's docs write it.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Created => "created",
            EventKind::Resumed => "resumed",
            EventKind::Paused => "paused",
            EventKind::Snapshotted => "snapshotted",
            EventKind::Forked => "forked",
            EventKind::TimedOut => "timed_out",
            EventKind::Killed => "killed",
            EventKind::Lost => "lost",
            EventKind::Ended => "ended",
        }
    }

    /// Whether the sandbox is over after it.
    pub fn is_end(self) -> bool {
        matches!(
            self,
            EventKind::TimedOut | EventKind::Killed | EventKind::Lost | EventKind::Ended
        )
    }
}

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How a sandbox was paused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PauseMode {
    /// The VM stopped; its memory is held.
    Memory,
    /// Saved to disk; the VM process is gone.
    Disk,
}

/// What a kind of event says beyond the common fields; empty fields are
/// left out of the JSON form.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Details {
    /// `paused`: in memory or on disk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pause_mode: Option<PauseMode>,
    /// `created`: how it started (`cold`, `pool`, `snapshot`, `fork`,
    /// `clone`, `restored`, `adopted`, as `SandboxInfo.origin`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub origin: String,
    /// `snapshotted`: the snapshot taken; `created`: the one it started
    /// from.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub snapshot: String,
    /// `created` by a fork: the sandbox it was forked from.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub parent: String,
    /// `forked`: the children.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<String>,
    /// `created`: its image and template ("" for none).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub image: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub template: String,
    /// `created`: its guest memory and vCPUs.
    #[serde(skip_serializing_if = "is_zero")]
    pub memory_mib: u32,
    #[serde(skip_serializing_if = "is_zero")]
    pub vcpus: u32,
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}

/// One event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Increases by one with each event, across restarts of the server.
    pub seq: u64,
    /// When, in milliseconds since the Unix epoch.
    pub time_ms: u64,
    pub kind: EventKind,
    pub sandbox_id: String,
    /// The key that owns the sandbox; `None`: the machine's owner.
    pub owner: Option<String>,
    /// Why, in words (for an end, the library's end reason).
    pub reason: String,
    #[serde(default)]
    pub details: Details,
}

/// An event before the bus numbers and times it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Draft {
    pub kind: EventKind,
    pub sandbox_id: String,
    pub owner: Option<String>,
    pub reason: String,
    pub details: Details,
}

impl Draft {
    /// A `kind` event of the sandbox `sandbox_id` owned by `owner`.
    pub fn new(kind: EventKind, sandbox_id: &str, owner: Option<&str>) -> Draft {
        Draft {
            kind,
            sandbox_id: sandbox_id.to_owned(),
            owner: owner.map(str::to_owned),
            reason: String::new(),
            details: Details::default(),
        }
    }

    /// With why it happened.
    pub fn because(mut self, reason: impl Into<String>) -> Draft {
        self.reason = reason.into();
        self
    }

    /// With the kind's details.
    pub fn with(mut self, details: Details) -> Draft {
        self.details = details;
        self
    }

    /// The event, numbered `seq` at `time_ms`.
    pub fn numbered(self, seq: u64, time_ms: u64) -> Event {
        Event {
            seq,
            time_ms,
            kind: self.kind,
            sandbox_id: self.sandbox_id,
            owner: self.owner,
            reason: self.reason,
            details: self.details,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_leaves_out_empty_details_and_names_kinds_in_snake_case() {
        let event = Draft::new(EventKind::TimedOut, "sb-1", Some("alice"))
            .because("killed at its maximum lifetime of 2s")
            .numbered(7, 1_000);
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(json["kind"], "timed_out");
        assert_eq!(json["owner"], "alice");
        assert_eq!(json["details"], serde_json::json!({}));
        let back: Event = serde_json::from_value(json).unwrap();
        assert_eq!(back, event);
    }

    #[test]
    fn pause_mode_is_written_by_name() {
        let event = Draft::new(EventKind::Paused, "sb-1", None)
            .with(Details {
                pause_mode: Some(PauseMode::Disk),
                ..Details::default()
            })
            .numbered(1, 1);
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(json["details"]["pause_mode"], "disk");
        assert_eq!(json["owner"], serde_json::Value::Null);
    }

    #[test]
    fn every_kind_has_its_serde_name() {
        for kind in EventKind::ALL {
            let json = serde_json::to_value(kind).unwrap();
            assert_eq!(json, kind.name());
        }
    }
}
