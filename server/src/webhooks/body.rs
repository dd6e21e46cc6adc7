//! A delivery's JSON body: E2B's lifecycle webhook payload (`version`,
//! `id`, `type`, `timestamp`, `sandboxId`, `sandboxTemplateId`,
//! `eventData`) with Airlock's event beside it (`seq`, `kind`, `owner`,
//! `reason`, `details`), so that a receiver written for E2B reads it and
//! one written for Airlock loses nothing.
//!
//! E2B's types where E2B has the event (`sandbox.lifecycle.created`,
//! `.paused`, `.resumed`, `.checkpointed` for a snapshot, `.killed` for
//! every end: killed, timed out, lost, ended); `sandbox.lifecycle.forked`
//! for a fork, which E2B does not have. `kind` tells the ends apart.

use serde::Serialize;

use crate::events::{Event, EventKind};

/// A body's most bytes; a longer one has its reason cut to fit.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The webhook type (E2B's name where E2B has the event) of `kind`.
pub fn webhook_type(kind: EventKind) -> &'static str {
    match kind {
        EventKind::Created => "sandbox.lifecycle.created",
        EventKind::Resumed => "sandbox.lifecycle.resumed",
        EventKind::Paused => "sandbox.lifecycle.paused",
        EventKind::Snapshotted => "sandbox.lifecycle.checkpointed",
        EventKind::Forked => "sandbox.lifecycle.forked",
        EventKind::TimedOut | EventKind::Killed | EventKind::Lost | EventKind::Ended => {
            "sandbox.lifecycle.killed"
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Body<'a> {
    version: &'static str,
    /// The delivery's id (as its `airlock-delivery-id` header).
    id: &'a str,
    #[serde(rename = "type")]
    kind_type: &'static str,
    timestamp: String,
    sandbox_id: &'a str,
    sandbox_template_id: &'a str,
    event_data: EventData<'a>,
    #[serde(flatten)]
    event: &'a Event,
}

#[derive(Serialize)]
struct EventData<'a> {
    reason: &'a str,
}

/// The body of delivery `delivery_id` of `event`, at most
/// [`MAX_BODY_BYTES`].
pub fn body(delivery_id: &str, event: &Event) -> Vec<u8> {
    let mut event = event.clone();
    loop {
        let template = if event.details.template.is_empty() {
            event.details.image.clone()
        } else {
            event.details.template.clone()
        };
        let reason = event.reason.clone();
        let body = Body {
            version: "v1",
            id: delivery_id,
            kind_type: webhook_type(event.kind),
            timestamp: rfc3339(event.time_ms),
            sandbox_id: &event.sandbox_id,
            sandbox_template_id: &template,
            event_data: EventData { reason: &reason },
            event: &event,
        };
        // Serializing plain strings and numbers does not fail.
        let bytes = serde_json::to_vec(&body).unwrap_or_default();
        if bytes.len() <= MAX_BODY_BYTES || event.reason.is_empty() {
            return bytes;
        }
        let over = bytes.len() - MAX_BODY_BYTES;
        let mut keep = event.reason.len().saturating_sub(over.div_ceil(2) + 16);
        while !event.reason.is_char_boundary(keep) {
            keep -= 1;
        }
        event.reason.truncate(keep);
    }
}

/// `at_ms` (milliseconds since the Unix epoch) as RFC 3339 in UTC, with
/// milliseconds.
pub fn rfc3339(at_ms: u64) -> String {
    let secs = at_ms / 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX);
    let rest = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        at_ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{Details, Draft};

    #[test]
    fn times_are_rfc_3339_in_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339(1_754_513_964_000), "2025-08-06T20:59:24.000Z");
    }

    #[test]
    fn the_body_has_e2bs_fields_and_the_event() {
        let event = Draft::new(EventKind::Snapshotted, "sb-1", Some("alice"))
            .because("snapshot taken by key alice")
            .with(Details {
                snapshot: "base".into(),
                template: "python".into(),
                ..Details::default()
            })
            .numbered(42, 1_754_513_964_000);
        let json: serde_json::Value = serde_json::from_slice(&body("wh_1-42", &event)).unwrap();
        assert_eq!(json["type"], "sandbox.lifecycle.checkpointed");
        assert_eq!(json["id"], "wh_1-42");
        assert_eq!(json["sandboxId"], "sb-1");
        assert_eq!(json["sandboxTemplateId"], "python");
        assert_eq!(json["timestamp"], "2025-08-06T20:59:24.000Z");
        assert_eq!(json["seq"], 42);
        assert_eq!(json["kind"], "snapshotted");
        assert_eq!(json["owner"], "alice");
        assert_eq!(json["details"]["snapshot"], "base");
        assert_eq!(json["eventData"]["reason"], "snapshot taken by key alice");
    }

    #[test]
    fn every_end_is_e2bs_killed_and_a_long_reason_is_cut_to_fit() {
        for kind in [EventKind::TimedOut, EventKind::Lost, EventKind::Ended] {
            assert_eq!(webhook_type(kind), "sandbox.lifecycle.killed");
        }
        let event = Draft::new(EventKind::Ended, "sb", None)
            .because("x".repeat(MAX_BODY_BYTES))
            .numbered(1, 1);
        let bytes = body("d", &event);
        assert!(bytes.len() <= MAX_BODY_BYTES, "{}", bytes.len());
        assert!(serde_json::from_slice::<serde_json::Value>(&bytes).is_ok());
    }
}
