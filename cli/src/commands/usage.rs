//! `airlock usage`: what sandboxes used, from the server's usage ledger
//! (`Usage.Query`), by sandbox, key or day, as a table, JSON or CSV; the
//! local server, or a remote one with `--host`/`AIRLOCK_HOST` and a key
//! (which sees its own usage only).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use airlock_client::{api, Client};
use clap::ValueEnum;
use serde::Serialize;

use super::remote::{message, ServerOptions};
use super::session::fail;

/// `airlock usage` and its options.
#[derive(Debug, clap::Args)]
pub struct UsageArgs {
    #[command(flatten)]
    pub server: ServerOptions,

    /// Whose usage: a key's name, or `_owner` for the owner's own
    /// sandboxes (the owner's choice; a key sees its own). Default: every
    /// key's the caller may see.
    #[arg(long, value_name = "K")]
    pub key: Option<String>,

    /// From this time: RFC 3339 (`2025-06-01T00:00:00Z`), a UTC date
    /// (`2025-06-01`), or a time ago (`90m`, `24h`, `7d`). Taken back to
    /// the start of its hour.
    #[arg(long, value_name = "T", value_parser = parse_time)]
    pub since: Option<u64>,

    /// Up to this time (same forms as --since).
    #[arg(long, value_name = "T", value_parser = parse_time)]
    pub until: Option<u64>,

    /// One row per sandbox, key, or key and UTC day.
    #[arg(long, value_enum, default_value_t = By::Sandbox)]
    pub by: By,

    /// Print JSON instead of a table.
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,

    /// Print CSV (a header line, then a line per row) instead of a table.
    #[arg(long)]
    pub csv: bool,
}

/// How `airlock usage` groups its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum By {
    Sandbox,
    Key,
    Day,
}

impl From<By> for api::UsageGrouping {
    fn from(by: By) -> Self {
        match by {
            By::Sandbox => api::UsageGrouping::Sandbox,
            By::Key => api::UsageGrouping::Key,
            By::Day => api::UsageGrouping::Day,
        }
    }
}

/// One row as JSON and CSV print it: the ledger's exact figures, and the
/// billing units derived from them.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct Line {
    sandbox_id: String,
    key: String,
    day: String,
    sandboxes: u32,
    from_ms: u64,
    to_ms: u64,
    running_ms: u64,
    paused_ms: u64,
    on_disk_ms: u64,
    guest_cpu_ms: u64,
    vcpu_ms: u64,
    memory_mib_ms: u64,
    disk_mib_ms: u64,
    vcpu_seconds: f64,
    memory_gib_seconds: f64,
    disk_gib_seconds: f64,
    egress_sent_bytes: u64,
    egress_received_bytes: u64,
    ingress_received_bytes: u64,
    ingress_sent_bytes: u64,
    memory_mib: u32,
    vcpus: u32,
    created_at_ms: u64,
    ended_at_ms: u64,
}

impl From<api::UsageRow> for Line {
    fn from(row: api::UsageRow) -> Line {
        let gib_seconds = |mib_ms: u64| mib_ms as f64 / 1024.0 / 1000.0;
        Line {
            vcpu_seconds: row.vcpu_ms as f64 / 1000.0,
            memory_gib_seconds: gib_seconds(row.memory_mib_ms),
            disk_gib_seconds: gib_seconds(row.disk_mib_ms),
            sandbox_id: row.sandbox_id,
            key: row.key,
            day: row.day,
            sandboxes: row.sandboxes,
            from_ms: row.from_ms,
            to_ms: row.to_ms,
            running_ms: row.running_ms,
            paused_ms: row.paused_ms,
            on_disk_ms: row.on_disk_ms,
            guest_cpu_ms: row.guest_cpu_ms,
            vcpu_ms: row.vcpu_ms,
            memory_mib_ms: row.memory_mib_ms,
            disk_mib_ms: row.disk_mib_ms,
            egress_sent_bytes: row.egress_sent_bytes,
            egress_received_bytes: row.egress_received_bytes,
            ingress_received_bytes: row.ingress_received_bytes,
            ingress_sent_bytes: row.ingress_sent_bytes,
            memory_mib: row.memory_mib,
            vcpus: row.vcpus,
            created_at_ms: row.created_at_ms,
            ended_at_ms: row.ended_at_ms,
        }
    }
}

/// Runs `airlock usage` and returns the exit code.
pub async fn run(args: UsageArgs) -> u8 {
    let client = match args.server.connect().await {
        Ok(client) => client,
        Err(message) => return fail(&message),
    };
    match call(&client, &args).await {
        Ok(text) => {
            super::stdout::print(&text);
            0
        }
        Err(message) => fail(&message),
    }
}

async fn call(client: &Client, args: &UsageArgs) -> Result<String, String> {
    let by = api::UsageGrouping::from(args.by);
    let rows = client
        .usage()
        .query(api::UsageQueryRequest {
            key: args.key.clone().unwrap_or_default(),
            since_ms: args.since.unwrap_or(0),
            until_ms: args.until.unwrap_or(0),
            by: by.into(),
        })
        .await
        .map_err(|status| message(status.into()))?
        .into_inner()
        .rows;
    let lines: Vec<Line> = rows.into_iter().map(Line::from).collect();
    if args.json {
        let text = serde_json::to_string_pretty(&lines).map_err(|e| e.to_string())?;
        Ok(format!("{text}\n"))
    } else if args.csv {
        Ok(csv(&lines))
    } else {
        Ok(table(args.by, &lines))
    }
}

/// Now, in Unix milliseconds.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Parses `--since`/`--until` into Unix milliseconds.
fn parse_time(text: &str) -> Result<u64, String> {
    parse_time_at(text, now_ms())
}

fn parse_time_at(text: &str, now_ms: u64) -> Result<u64, String> {
    let text = text.trim();
    if let Some(ago) = parse_ago(text) {
        let ago = u64::try_from(ago.as_millis()).unwrap_or(u64::MAX);
        return Ok(now_ms.saturating_sub(ago));
    }
    parse_rfc3339(text).ok_or_else(|| {
        format!(
            "{text:?} is no time: give RFC 3339 (2025-06-01T00:00:00Z), a UTC date (2025-06-01) \
             or a time ago (90m, 24h, 7d)"
        )
    })
}

/// `90s`, `30m`, `24h`, `7d`, `2w`.
fn parse_ago(text: &str) -> Option<Duration> {
    let (digits, unit) = text.split_at(text.len().checked_sub(1)?);
    let count: u64 = digits.parse().ok()?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => return None,
    };
    Some(Duration::from_secs(count.checked_mul(secs)?))
}

/// `YYYY-MM-DD` (midnight UTC), or `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`.
fn parse_rfc3339(text: &str) -> Option<u64> {
    let number = |s: &str| -> Option<i64> {
        s.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| s.parse().ok())
            .flatten()
    };
    let date = text.get(..10)?;
    let (year, month, day) = (
        number(date.get(..4)?)?,
        number(date.get(5..7)?)?,
        number(date.get(8..10)?)?,
    );
    if date.as_bytes()[4] != b'-' || date.as_bytes()[7] != b'-' {
        return None;
    }
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let rest = &text[10..];
    let mut seconds = days * 86_400;
    let mut millis = 0i64;
    if !rest.is_empty() {
        let rest = rest.strip_prefix(['T', 't', ' '])?;
        let (hour, minute, second) = (
            number(rest.get(..2)?)?,
            number(rest.get(3..5)?)?,
            number(rest.get(6..8)?)?,
        );
        if rest.get(2..3)? != ":" || rest.get(5..6)? != ":" {
            return None;
        }
        if hour > 23 || minute > 59 || second > 60 {
            return None;
        }
        seconds += hour * 3_600 + minute * 60 + second;
        let mut zone = &rest[8..];
        if let Some(fraction) = zone.strip_prefix('.') {
            let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 {
                return None;
            }
            let first: String = fraction[..digits]
                .chars()
                .chain("000".chars())
                .take(3)
                .collect();
            millis = number(&first)?;
            zone = &fraction[digits..];
        }
        seconds -= match zone {
            "Z" | "z" => 0,
            offset => {
                let sign = match offset.get(..1)? {
                    "+" => 1,
                    "-" => -1,
                    _ => return None,
                };
                if offset.len() != 6 || offset.get(3..4)? != ":" {
                    return None;
                }
                sign * (number(offset.get(1..3)?)? * 3_600 + number(offset.get(4..6)?)? * 60)
            }
        };
    }
    u64::try_from(seconds * 1000 + millis).ok()
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A duration in milliseconds as people read it: `12.3s`, `4m05s`,
/// `3h20m`.
fn duration(ms: u64) -> String {
    let secs = ms / 1000;
    if secs < 60 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else if secs < 3_600 {
        format!("{}m{:02}s", secs / 60, secs % 60)
    } else {
        format!("{}h{:02}m", secs / 3_600, (secs % 3_600) / 60)
    }
}

/// Bytes with a binary suffix: `512B`, `1.5K`, `20.0M`.
fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["K", "M", "G", "T", "P"];
    if n < 1024 {
        return format!("{n}B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1}{}", UNITS[unit])
}

/// The key as the table shows it.
fn key_name(key: &str) -> &str {
    if key.is_empty() {
        "(owner)"
    } else {
        key
    }
}

/// The table: the row's name columns, then its figures.
fn table(by: By, lines: &[Line]) -> String {
    let names: Vec<Vec<String>> = lines
        .iter()
        .map(|line| match by {
            By::Sandbox => vec![line.sandbox_id.clone(), key_name(&line.key).to_owned()],
            By::Key => vec![key_name(&line.key).to_owned(), line.sandboxes.to_string()],
            By::Day => vec![
                line.day.clone(),
                key_name(&line.key).to_owned(),
                line.sandboxes.to_string(),
            ],
        })
        .collect();
    let titles: &[&str] = match by {
        By::Sandbox => &["SANDBOX", "KEY"],
        By::Key => &["KEY", "SANDBOXES"],
        By::Day => &["DAY", "KEY", "SANDBOXES"],
    };
    let figures: Vec<[String; 10]> = lines
        .iter()
        .map(|line| {
            [
                duration(line.running_ms),
                duration(line.paused_ms),
                duration(line.on_disk_ms),
                format!("{:.1}", line.vcpu_seconds),
                format!("{:.1}", line.memory_gib_seconds),
                format!("{:.1}", line.disk_gib_seconds),
                bytes(line.egress_sent_bytes),
                bytes(line.egress_received_bytes),
                bytes(line.ingress_received_bytes),
                bytes(line.ingress_sent_bytes),
            ]
        })
        .collect();
    let figure_titles = [
        "RUNNING",
        "PAUSED",
        "ON-DISK",
        "VCPU-S",
        "MEM-GIB-S",
        "DISK-GIB-S",
        "EGRESS-OUT",
        "EGRESS-IN",
        "INGRESS-IN",
        "INGRESS-OUT",
    ];
    let name_widths: Vec<usize> = titles
        .iter()
        .enumerate()
        .map(|(i, title)| {
            names
                .iter()
                .map(|row| row[i].len())
                .max()
                .unwrap_or(0)
                .max(title.len())
        })
        .collect();
    let figure_widths: Vec<usize> = figure_titles
        .iter()
        .enumerate()
        .map(|(i, title)| {
            figures
                .iter()
                .map(|row| row[i].len())
                .max()
                .unwrap_or(0)
                .max(title.len())
        })
        .collect();
    let line = |names: &[&str], figures: &[&str]| {
        let mut cells: Vec<String> = names
            .iter()
            .zip(&name_widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        cells.extend(
            figures
                .iter()
                .zip(&figure_widths)
                .map(|(cell, width)| format!("{cell:>width$}")),
        );
        format!("{}\n", cells.join("  ").trim_end())
    };
    let mut out = line(titles, &figure_titles);
    for (names, figures) in names.iter().zip(&figures) {
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let figures: Vec<&str> = figures.iter().map(String::as_str).collect();
        out.push_str(&line(&names, &figures));
    }
    out
}

/// The CSV: every field of [`Line`] in [`CSV_HEADER`]'s order, quoted
/// where it must be.
fn csv(lines: &[Line]) -> String {
    let quote = |cell: &str| {
        if cell.contains([',', '"', '\n']) {
            format!("\"{}\"", cell.replace('"', "\"\""))
        } else {
            cell.to_owned()
        }
    };
    let mut out = CSV_HEADER.join(",");
    out.push('\n');
    for l in lines {
        let cells: [String; 24] = [
            quote(&l.sandbox_id),
            quote(&l.key),
            quote(&l.day),
            l.sandboxes.to_string(),
            l.from_ms.to_string(),
            l.to_ms.to_string(),
            l.running_ms.to_string(),
            l.paused_ms.to_string(),
            l.on_disk_ms.to_string(),
            l.guest_cpu_ms.to_string(),
            l.vcpu_ms.to_string(),
            l.memory_mib_ms.to_string(),
            l.disk_mib_ms.to_string(),
            l.vcpu_seconds.to_string(),
            l.memory_gib_seconds.to_string(),
            l.disk_gib_seconds.to_string(),
            l.egress_sent_bytes.to_string(),
            l.egress_received_bytes.to_string(),
            l.ingress_received_bytes.to_string(),
            l.ingress_sent_bytes.to_string(),
            l.memory_mib.to_string(),
            l.vcpus.to_string(),
            l.created_at_ms.to_string(),
            l.ended_at_ms.to_string(),
        ];
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    out
}

/// The CSV's columns: [`Line`]'s fields.
const CSV_HEADER: [&str; 24] = [
    "sandbox_id",
    "key",
    "day",
    "sandboxes",
    "from_ms",
    "to_ms",
    "running_ms",
    "paused_ms",
    "on_disk_ms",
    "guest_cpu_ms",
    "vcpu_ms",
    "memory_mib_ms",
    "disk_mib_ms",
    "vcpu_seconds",
    "memory_gib_seconds",
    "disk_gib_seconds",
    "egress_sent_bytes",
    "egress_received_bytes",
    "ingress_received_bytes",
    "ingress_sent_bytes",
    "memory_mib",
    "vcpus",
    "created_at_ms",
    "ended_at_ms",
];

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn row(id: &str, key: &str) -> api::UsageRow {
        api::UsageRow {
            sandbox_id: id.into(),
            key: key.into(),
            sandboxes: 1,
            running_ms: 125_000,
            paused_ms: 2_500,
            vcpu_ms: 250_000,
            memory_mib_ms: 512 * 127_500,
            egress_sent_bytes: 1536,
            ingress_sent_bytes: 20 << 20,
            ..api::UsageRow::default()
        }
    }

    #[test]
    fn times_are_rfc_3339_dates_or_times_ago() {
        let now = 1_750_000_000_000;
        assert_eq!(parse_time_at("24h", now).unwrap(), now - 86_400_000);
        assert_eq!(parse_time_at("90m", now).unwrap(), now - 5_400_000);
        assert_eq!(parse_time_at("7d", now).unwrap(), now - 7 * 86_400_000);
        assert_eq!(parse_time_at("1970-01-02", now).unwrap(), 86_400_000);
        assert_eq!(
            parse_time_at("2024-02-29T23:59:59Z", now).unwrap(),
            1_709_251_199_000
        );
        assert_eq!(
            parse_time_at("2024-03-01T01:00:00.5+01:00", now).unwrap(),
            1_709_251_200_500
        );
        for bad in [
            "yesterday",
            "24",
            "2024-13-01",
            "2024-02-29T25:00:00Z",
            "2024-02-29T10:00:00",
        ] {
            let refused = parse_time_at(bad, now).unwrap_err();
            assert!(refused.contains("RFC 3339"), "{bad}: {refused}");
        }
    }

    #[test]
    fn the_table_has_a_line_per_row_in_readable_units() {
        let lines: Vec<Line> = vec![
            row("sandbox-a", "alice").into(),
            row("sandbox-b", "").into(),
        ];
        let table = table(By::Sandbox, &lines);
        let rows: Vec<Vec<&str>> = table
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(rows.len(), 3, "{table}");
        assert_eq!(rows[0][..3], ["SANDBOX", "KEY", "RUNNING"], "{table}");
        assert_eq!(
            rows[1],
            [
                "sandbox-a",
                "alice",
                "2m05s",
                "2.5s",
                "0.0s",
                "250.0",
                "63.8",
                "0.0",
                "1.5K",
                "0B",
                "0B",
                "20.0M"
            ],
            "{table}"
        );
        assert_eq!(rows[2][1], "(owner)", "{table}");
    }

    #[test]
    fn json_and_csv_carry_the_exact_figures_and_the_billing_units() {
        let lines: Vec<Line> = vec![row("sandbox-a", "alice,inc").into()];
        let csv = csv(&lines);
        let mut csv_lines = csv.lines();
        let header: Vec<&str> = csv_lines.next().unwrap().split(',').collect();
        assert_eq!(header, CSV_HEADER);
        let first = csv_lines.next().unwrap();
        assert!(first.starts_with("sandbox-a,\"alice,inc\",,1,"), "{csv}");
        assert!(first.contains(",125000,2500,"), "{csv}");
        assert_eq!(super::csv(&[]).trim(), CSV_HEADER.join(","));
        let json = serde_json::to_value(&lines).unwrap();
        assert_eq!(json[0]["vcpu_seconds"], 250.0);
        assert_eq!(json[0]["memory_mib_ms"], 512 * 127_500);
    }
}
