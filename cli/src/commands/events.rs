//! `airlock events`: the server's lifecycle events (created, paused,
//! resumed, snapshotted, forked, and how each sandbox ended), one line
//! each, from its log and, with `--follow`, as they happen. A key sees its
//! own sandboxes' events; the owner every sandbox's, or one key's with
//! `--key`. Through the API like `airlock sandbox ...`.

use airlock_client::{api, Client};
use serde::Serialize;

use super::remote::{message, ServerOptions};
use super::session::fail;

/// `airlock events` and its options.
#[derive(Debug, clap::Args)]
pub struct EventsArgs {
    #[command(flatten)]
    pub server: ServerOptions,

    /// Keep printing new events until interrupted.
    #[arg(long, short)]
    pub follow: bool,

    /// Start after this event number (default: the oldest the log holds;
    /// with --follow and no --after, only new events).
    #[arg(long, value_name = "SEQ")]
    pub after: Option<u64>,

    /// The owner only: this key's sandboxes' events (`_owner`: the
    /// owner's own).
    #[arg(long, value_name = "NAME")]
    pub key: Option<String>,

    /// Only this sandbox's events.
    #[arg(long, value_name = "ID")]
    pub sandbox: Option<String>,

    /// One JSON object per line instead of text.
    #[arg(long)]
    pub json: bool,
}

/// One event as `--json` prints it.
#[derive(Debug, Serialize)]
struct Line<'a> {
    seq: u64,
    time_ms: u64,
    kind: &'a str,
    sandbox_id: &'a str,
    owner: &'a str,
    reason: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    pause_mode: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    origin: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    snapshot: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    parent: &'a str,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    children: &'a [String],
}

fn kind_name(kind: i32) -> &'static str {
    match api::EventKind::try_from(kind).unwrap_or(api::EventKind::Unspecified) {
        api::EventKind::Created => "created",
        api::EventKind::Resumed => "resumed",
        api::EventKind::Paused => "paused",
        api::EventKind::Snapshotted => "snapshotted",
        api::EventKind::Forked => "forked",
        api::EventKind::TimedOut => "timed_out",
        api::EventKind::Killed => "killed",
        api::EventKind::Lost => "lost",
        api::EventKind::Ended => "ended",
        api::EventKind::Unspecified => "unknown",
    }
}

fn pause_mode(mode: i32) -> &'static str {
    match api::PauseMode::try_from(mode).unwrap_or(api::PauseMode::Unspecified) {
        api::PauseMode::Memory => "memory",
        api::PauseMode::Disk => "disk",
        api::PauseMode::Unspecified => "",
    }
}

/// `at_ms` as RFC 3339 in UTC, to the second.
fn time(at_ms: u64) -> String {
    let secs = at_ms / 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
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
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// `event` as a line of text: number, time, kind, sandbox, owner, what
/// its kind adds, and why.
fn text(event: &api::SandboxEvent) -> String {
    let mut extra = Vec::new();
    let mode = pause_mode(event.pause_mode);
    if !mode.is_empty() {
        extra.push(format!("mode={mode}"));
    }
    for (name, value) in [
        ("origin", &event.origin),
        ("snapshot", &event.snapshot),
        ("parent", &event.parent),
    ] {
        if !value.is_empty() {
            extra.push(format!("{name}={value}"));
        }
    }
    if !event.children.is_empty() {
        extra.push(format!("children={}", event.children.join(",")));
    }
    let owner = if event.owner.is_empty() {
        "(owner)"
    } else {
        &event.owner
    };
    // A reason may span lines (a VM's console tail): its first line only.
    let reason = event.reason.lines().next().unwrap_or("");
    format!(
        "{:>6}  {}  {:<11}  {}  {}  {}{}{}",
        event.seq,
        time(event.time_ms),
        kind_name(event.kind),
        event.sandbox_id,
        owner,
        extra.join(" "),
        if extra.is_empty() { "" } else { "  " },
        reason
    )
}

fn json(event: &api::SandboxEvent) -> String {
    let line = Line {
        seq: event.seq,
        time_ms: event.time_ms,
        kind: kind_name(event.kind),
        sandbox_id: &event.sandbox_id,
        owner: &event.owner,
        reason: &event.reason,
        pause_mode: pause_mode(event.pause_mode),
        origin: &event.origin,
        snapshot: &event.snapshot,
        parent: &event.parent,
        children: &event.children,
    };
    serde_json::to_string(&line).unwrap_or_default()
}

/// Runs `airlock events`; returns the exit code.
pub async fn run(args: EventsArgs) -> u8 {
    let client = match args.server.connect().await {
        Ok(client) => client,
        Err(message) => return fail(&message),
    };
    match watch(&client, &args).await {
        Ok(()) => 0,
        Err(message) => fail(&message),
    }
}

async fn watch(client: &Client, args: &EventsArgs) -> Result<(), String> {
    let after_seq = match (args.after, args.follow) {
        (Some(after), _) => Some(after),
        (None, false) => Some(0),
        (None, true) => None,
    };
    let mut stream = client
        .events()
        .watch(api::WatchEventsRequest {
            after_seq,
            key: args.key.clone().unwrap_or_default(),
            kinds: Vec::new(),
            sandbox_id: args.sandbox.clone().unwrap_or_default(),
            replay_only: !args.follow,
        })
        .await
        .map_err(|status| message(status.into()))?
        .into_inner();
    while let Some(event) = stream
        .message()
        .await
        .map_err(|status| message(status.into()))?
    {
        let line = if args.json {
            json(&event)
        } else {
            text(&event)
        };
        super::stdout::print(&format!("{line}\n"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_has_the_number_time_kind_sandbox_owner_details_and_reason() {
        let event = api::SandboxEvent {
            seq: 7,
            time_ms: 1_754_513_964_000,
            kind: api::EventKind::Paused as i32,
            sandbox_id: "sb-1".into(),
            owner: "alice".into(),
            reason: "paused by key alice\nmore".into(),
            pause_mode: api::PauseMode::Disk as i32,
            ..api::SandboxEvent::default()
        };
        assert_eq!(
            text(&event),
            "     7  2025-08-06T20:59:24Z  paused       sb-1  alice  mode=disk  paused by key alice"
        );
        let parsed: serde_json::Value = serde_json::from_str(&json(&event)).unwrap();
        assert_eq!(parsed["kind"], "paused");
        assert_eq!(parsed["pause_mode"], "disk");
        assert_eq!(parsed["reason"], "paused by key alice\nmore");
    }
}
