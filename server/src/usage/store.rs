//! [`UsageStore`]: the usage ledger on disk, an SQLite file in the data
//! directory (`usage.sqlite3`, mode 0600, write-ahead log).
//!
//! Two tables, made and changed only by the numbered [`MIGRATIONS`] (each
//! applied once, in a transaction, and noted in `schema_migrations`), in
//! SQL that PostgreSQL takes as it is (`BIGINT`, `TEXT`, `ON CONFLICT`):
//!
//! - `sandboxes`: one row per sandbox ever seen: its key, size and life, and
//!   the cumulative clock as last accrued (the library's `SandboxUsage`),
//!   which the next reading is compared with, so a figure is counted once
//!   whatever restarts, adoptions and restores came between.
//! - `usage`: what each sandbox used in each UTC hour (`hour_ms`, its start),
//!   every figure a sum of what accrued in it.
//!
//! An accrual ([`UsageStore::accrue`]) takes readings of the library's
//! clocks, adds what each grew by since its row's last reading to the
//! hours between the two (spread in proportion), and moves the row on, all
//! in one transaction. A [`Query`] sums the hours in a period by sandbox,
//! key or day.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use rusqlite::{params, Connection, OptionalExtension, Transaction};

pub use super::error::UsageError;
use super::period::{day_name, hour_of, hours, spread, DAY_MS, HOUR_MS};

/// The ledger's file name in the data directory.
pub const FILE_NAME: &str = "usage.sqlite3";

/// The schema, one step per version; never edit a step that shipped, add
/// one.
pub const MIGRATIONS: &[(u32, &str)] = &[(
    1,
    "CREATE TABLE sandboxes (
        sandbox_id TEXT PRIMARY KEY,
        key_name TEXT NOT NULL,
        memory_mib BIGINT NOT NULL,
        vcpus BIGINT NOT NULL,
        created_at_ms BIGINT NOT NULL,
        ended_at_ms BIGINT,
        running_ms BIGINT NOT NULL DEFAULT 0,
        paused_ms BIGINT NOT NULL DEFAULT 0,
        on_disk_ms BIGINT NOT NULL DEFAULT 0,
        guest_cpu_ms BIGINT NOT NULL DEFAULT 0,
        accrued_at_ms BIGINT NOT NULL
    );
    CREATE TABLE usage (
        sandbox_id TEXT NOT NULL REFERENCES sandboxes (sandbox_id),
        key_name TEXT NOT NULL,
        hour_ms BIGINT NOT NULL,
        running_ms BIGINT NOT NULL DEFAULT 0,
        paused_ms BIGINT NOT NULL DEFAULT 0,
        on_disk_ms BIGINT NOT NULL DEFAULT 0,
        guest_cpu_ms BIGINT NOT NULL DEFAULT 0,
        vcpu_ms BIGINT NOT NULL DEFAULT 0,
        memory_mib_ms BIGINT NOT NULL DEFAULT 0,
        disk_mib_ms BIGINT NOT NULL DEFAULT 0,
        egress_sent_bytes BIGINT NOT NULL DEFAULT 0,
        egress_received_bytes BIGINT NOT NULL DEFAULT 0,
        ingress_received_bytes BIGINT NOT NULL DEFAULT 0,
        ingress_sent_bytes BIGINT NOT NULL DEFAULT 0,
        PRIMARY KEY (sandbox_id, hour_ms)
    );
    CREATE INDEX usage_by_key_hour ON usage (key_name, hour_ms);
    CREATE INDEX usage_by_hour ON usage (hour_ms);",
)];

/// The figures a row sums, in the ledger's units.
const FIGURES: [&str; 11] = [
    "running_ms",
    "paused_ms",
    "on_disk_ms",
    "guest_cpu_ms",
    "vcpu_ms",
    "memory_mib_ms",
    "disk_mib_ms",
    "egress_sent_bytes",
    "egress_received_bytes",
    "ingress_received_bytes",
    "ingress_sent_bytes",
];

const MIB: u64 = 1 << 20;

/// A sandbox's cumulative clock: the library's `SandboxUsage` in
/// milliseconds, paused time split by where the memory was.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Clock {
    pub running_ms: u64,
    /// Paused in memory.
    pub paused_ms: u64,
    /// Saved to disk.
    pub on_disk_ms: u64,
    pub guest_cpu_ms: u64,
}

impl From<airlock::SandboxUsage> for Clock {
    fn from(usage: airlock::SandboxUsage) -> Self {
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Clock {
            running_ms: ms(usage.running),
            paused_ms: ms(usage.paused_in_memory()),
            on_disk_ms: ms(usage.on_disk),
            guest_cpu_ms: ms(usage.guest_cpu),
        }
    }
}

/// Bytes carried since the last reading (not cumulative: the library's
/// counts start again with each handle).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Bytes {
    pub egress_sent: u64,
    pub egress_received: u64,
    pub ingress_received: u64,
    pub ingress_sent: u64,
}

/// One sandbox's state at `at_ms`, as the ledger accrues it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reading {
    pub sandbox_id: String,
    /// The key it belongs to ("" for the machine's owner).
    pub key: String,
    pub memory_mib: u32,
    pub vcpus: u32,
    pub created_at_ms: u64,
    /// When the reading was taken (Unix ms).
    pub at_ms: u64,
    pub clock: Clock,
    /// The size of the workspace it holds (0 for none).
    pub workspace_bytes: u64,
    /// What its saved files take on disk (0 when it has none).
    pub saved_bytes: u64,
    pub bytes: Bytes,
    /// It has ended for good (not left for another server, not on disk).
    pub ended: bool,
}

/// What a row of a query sums; times in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Figures {
    pub running_ms: u64,
    pub paused_ms: u64,
    pub on_disk_ms: u64,
    pub guest_cpu_ms: u64,
    /// vCPUs times running time.
    pub vcpu_ms: u64,
    /// MiB of guest memory times the time it held it (running or paused
    /// in memory).
    pub memory_mib_ms: u64,
    /// MiB of disk held times the time it was held: the workspace's size
    /// while the sandbox lives, and its saved files while on disk.
    pub disk_mib_ms: u64,
    pub egress_sent_bytes: u64,
    pub egress_received_bytes: u64,
    pub ingress_received_bytes: u64,
    pub ingress_sent_bytes: u64,
}

impl Figures {
    fn values(&self) -> [u64; 11] {
        [
            self.running_ms,
            self.paused_ms,
            self.on_disk_ms,
            self.guest_cpu_ms,
            self.vcpu_ms,
            self.memory_mib_ms,
            self.disk_mib_ms,
            self.egress_sent_bytes,
            self.egress_received_bytes,
            self.ingress_received_bytes,
            self.ingress_sent_bytes,
        ]
    }

    fn from_values(v: [u64; 11]) -> Figures {
        Figures {
            running_ms: v[0],
            paused_ms: v[1],
            on_disk_ms: v[2],
            guest_cpu_ms: v[3],
            vcpu_ms: v[4],
            memory_mib_ms: v[5],
            disk_mib_ms: v[6],
            egress_sent_bytes: v[7],
            egress_received_bytes: v[8],
            ingress_received_bytes: v[9],
            ingress_sent_bytes: v[10],
        }
    }
}

/// How a query groups its rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Grouping {
    /// One row per sandbox.
    #[default]
    Sandbox,
    /// One row per key.
    Key,
    /// One row per key and UTC day.
    Day,
}

/// What to sum.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query {
    /// One key's sandboxes ("" the owner's); `None`: every key's.
    pub key: Option<String>,
    /// The hours starting at or after this (Unix ms; 0: from the first).
    pub since_ms: u64,
    /// The hours starting before this (`None`: to the last).
    pub until_ms: Option<u64>,
    pub by: Grouping,
}

/// One row of a query's answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Row {
    /// By sandbox: the sandbox.
    pub sandbox_id: String,
    /// The key ("" for the owner).
    pub key: String,
    /// By day: `YYYY-MM-DD` (UTC).
    pub day: String,
    /// How many sandboxes the row sums.
    pub sandboxes: u32,
    /// The start of the row's first hour and the end of its last.
    pub from_ms: u64,
    pub to_ms: u64,
    /// By sandbox: its size and life (`ended_at_ms` 0 while it lives).
    pub memory_mib: u32,
    pub vcpus: u32,
    pub created_at_ms: u64,
    pub ended_at_ms: u64,
    pub figures: Figures,
}

/// The ledger.
#[derive(Debug)]
pub struct UsageStore {
    path: PathBuf,
    connection: Mutex<Connection>,
}

fn int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn uint(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

impl UsageStore {
    /// The ledger in `data_dir` (made, and brought to the current schema,
    /// as needed).
    pub fn open(data_dir: &Path) -> Result<UsageStore, UsageError> {
        let path = data_dir.join(FILE_NAME);
        // Private from the start: SQLite gives its log files the same
        // mode.
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&path)
            .map_err(|source| UsageError::Create {
                path: path.clone(),
                source,
            })?;
        let connection = Connection::open(&path).map_err(|source| UsageError::Open {
            path: path.clone(),
            source,
        })?;
        connection.busy_timeout(std::time::Duration::from_secs(5))?;
        connection.pragma_update(None, "journal_mode", "WAL")?;
        // Durable across a crash of the server (not of the machine's power).
        connection.pragma_update(None, "synchronous", "NORMAL")?;
        connection.pragma_update(None, "foreign_keys", "ON")?;
        let mut store = UsageStore {
            path,
            connection: Mutex::new(connection),
        };
        store.migrate()?;
        Ok(store)
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn connection(&self) -> MutexGuard<'_, Connection> {
        self.connection
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The schema version of the file.
    pub fn version(&self) -> Result<u32, UsageError> {
        schema_version(&self.connection())
    }

    /// Applies the migrations the file lacks, each in its transaction.
    fn migrate(&mut self) -> Result<(), UsageError> {
        let connection = self
            .connection
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        connection.execute_batch(
            "CREATE TABLE IF NOT EXISTS schema_migrations (
                version BIGINT PRIMARY KEY,
                applied_at_ms BIGINT NOT NULL
            )",
        )?;
        let found = schema_version(connection)?;
        let known = MIGRATIONS.last().map_or(0, |&(version, _)| version);
        if found > known {
            return Err(UsageError::TooNew {
                path: self.path.clone(),
                found,
                known,
            });
        }
        for &(version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > found) {
            let transaction = connection.transaction()?;
            transaction.execute_batch(sql)?;
            transaction.execute(
                "INSERT INTO schema_migrations (version, applied_at_ms) VALUES (?1, ?2)",
                params![
                    version,
                    int(crate::convert::unix_ms(std::time::SystemTime::now()))
                ],
            )?;
            transaction.commit()?;
            tracing::info!(version, path = %self.path.display(), "usage ledger migrated");
        }
        Ok(())
    }

    /// Adds what each reading's sandbox used since its last reading, in
    /// one transaction.
    pub fn accrue(&self, readings: &[Reading]) -> Result<(), UsageError> {
        if readings.is_empty() {
            return Ok(());
        }
        let mut connection = self.connection();
        let transaction = connection.transaction()?;
        for reading in readings {
            accrue_one(&transaction, reading)?;
        }
        transaction.commit()?;
        Ok(())
    }

    /// The rows `query` asks for.
    pub fn query(&self, query: &Query) -> Result<Vec<Row>, UsageError> {
        let sums = FIGURES
            .iter()
            .map(|figure| format!("SUM(u.{figure})"))
            .collect::<Vec<_>>()
            .join(", ");
        let (columns, group, order) = match query.by {
            Grouping::Sandbox => (
                "u.sandbox_id, u.key_name, -1, s.memory_mib, s.vcpus, s.created_at_ms, s.ended_at_ms",
                "u.sandbox_id, u.key_name, s.memory_mib, s.vcpus, s.created_at_ms, s.ended_at_ms",
                "MIN(u.hour_ms), u.sandbox_id",
            ),
            Grouping::Key => ("'', u.key_name, -1, 0, 0, 0, NULL", "u.key_name", "u.key_name"),
            Grouping::Day => (
                "'', u.key_name, u.hour_ms / 86400000, 0, 0, 0, NULL",
                "u.key_name, u.hour_ms / 86400000",
                "u.hour_ms / 86400000, u.key_name",
            ),
        };
        let sql = format!(
            "SELECT {columns}, COUNT(DISTINCT u.sandbox_id), MIN(u.hour_ms), MAX(u.hour_ms), {sums}
             FROM usage u JOIN sandboxes s ON s.sandbox_id = u.sandbox_id
             WHERE (?1 IS NULL OR u.key_name = ?1) AND u.hour_ms >= ?2 AND u.hour_ms < ?3
             GROUP BY {group} ORDER BY {order}"
        );
        let connection = self.connection();
        let mut statement = connection.prepare(&sql)?;
        let since = hour_of(query.since_ms);
        let until = query.until_ms.map_or(i64::MAX, int);
        let rows =
            statement.query_map(params![query.key.as_deref(), int(since), until], |row| {
                let day: i64 = row.get(2)?;
                let mut sums = [0u64; 11];
                for (index, sum) in sums.iter_mut().enumerate() {
                    *sum = uint(row.get(10 + index)?);
                }
                Ok(Row {
                    sandbox_id: row.get(0)?,
                    key: row.get(1)?,
                    day: if day >= 0 {
                        day_name(uint(day) * DAY_MS)
                    } else {
                        String::new()
                    },
                    memory_mib: u32::try_from(row.get::<_, i64>(3)?).unwrap_or(0),
                    vcpus: u32::try_from(row.get::<_, i64>(4)?).unwrap_or(0),
                    created_at_ms: uint(row.get(5)?),
                    ended_at_ms: row.get::<_, Option<i64>>(6)?.map_or(0, uint),
                    sandboxes: u32::try_from(row.get::<_, i64>(7)?).unwrap_or(u32::MAX),
                    from_ms: uint(row.get(8)?),
                    to_ms: uint(row.get(9)?) + HOUR_MS,
                    figures: Figures::from_values(sums),
                })
            })?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    /// The cumulative clock the ledger last accrued for `sandbox_id`.
    pub fn accrued_clock(&self, sandbox_id: &str) -> Result<Option<Clock>, UsageError> {
        Ok(self
            .connection()
            .query_row(
                "SELECT running_ms, paused_ms, on_disk_ms, guest_cpu_ms FROM sandboxes \
                 WHERE sandbox_id = ?1",
                params![sandbox_id],
                |row| {
                    Ok(Clock {
                        running_ms: uint(row.get(0)?),
                        paused_ms: uint(row.get(1)?),
                        on_disk_ms: uint(row.get(2)?),
                        guest_cpu_ms: uint(row.get(3)?),
                    })
                },
            )
            .optional()?)
    }
}

fn schema_version(connection: &Connection) -> Result<u32, UsageError> {
    let version: Option<i64> =
        connection.query_row("SELECT MAX(version) FROM schema_migrations", [], |row| {
            row.get(0)
        })?;
    Ok(version.map_or(0, |v| u32::try_from(v).unwrap_or(u32::MAX)))
}

/// The sandbox's row as last accrued.
struct Accrued {
    clock: Clock,
    at_ms: u64,
}

fn accrue_one(transaction: &Transaction<'_>, reading: &Reading) -> Result<(), UsageError> {
    let accrued = transaction
        .query_row(
            "SELECT running_ms, paused_ms, on_disk_ms, guest_cpu_ms, accrued_at_ms \
             FROM sandboxes WHERE sandbox_id = ?1",
            params![reading.sandbox_id],
            |row| {
                Ok(Accrued {
                    clock: Clock {
                        running_ms: uint(row.get(0)?),
                        paused_ms: uint(row.get(1)?),
                        on_disk_ms: uint(row.get(2)?),
                        guest_cpu_ms: uint(row.get(3)?),
                    },
                    at_ms: uint(row.get(4)?),
                })
            },
        )
        .optional()?;
    let accrued = match accrued {
        Some(accrued) => accrued,
        None => {
            // Its life so far accrued since it was created.
            let start = match reading.created_at_ms {
                0 => reading.at_ms,
                created => created.min(reading.at_ms),
            };
            transaction.execute(
                "INSERT INTO sandboxes (sandbox_id, key_name, memory_mib, vcpus, created_at_ms, \
                 accrued_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    reading.sandbox_id,
                    reading.key,
                    reading.memory_mib,
                    reading.vcpus,
                    int(start),
                    int(start)
                ],
            )?;
            Accrued {
                clock: Clock::default(),
                at_ms: start,
            }
        }
    };
    let now = reading.clock;
    let was = accrued.clock;
    // What grew since: never less than nothing, so a clock read lower
    // (one that began again) is not counted twice when it grows back.
    let grew = Clock {
        running_ms: now.running_ms.saturating_sub(was.running_ms),
        paused_ms: now.paused_ms.saturating_sub(was.paused_ms),
        on_disk_ms: now.on_disk_ms.saturating_sub(was.on_disk_ms),
        guest_cpu_ms: now.guest_cpu_ms.saturating_sub(was.guest_cpu_ms),
    };
    let held_memory_ms = grew.running_ms + grew.paused_ms;
    let lived_ms = held_memory_ms + grew.on_disk_ms;
    let mib_ms = |bytes: u64, ms: u64| {
        u64::try_from(u128::from(bytes) * u128::from(ms) / u128::from(MIB)).unwrap_or(u64::MAX)
    };
    let timed = Figures {
        running_ms: grew.running_ms,
        paused_ms: grew.paused_ms,
        on_disk_ms: grew.on_disk_ms,
        guest_cpu_ms: grew.guest_cpu_ms,
        vcpu_ms: u64::from(reading.vcpus) * grew.running_ms,
        memory_mib_ms: u64::from(reading.memory_mib) * held_memory_ms,
        disk_mib_ms: mib_ms(reading.workspace_bytes, lived_ms)
            + mib_ms(reading.saved_bytes, grew.on_disk_ms),
        ..Figures::default()
    };
    // Time spreads over the hours it passed in; bytes go to the hour of
    // the reading (they were counted since the last one, or since the
    // handle began).
    let cut = hours(accrued.at_ms, reading.at_ms);
    let spread_values: Vec<Vec<u64>> = timed
        .values()
        .iter()
        .map(|&value| spread(value, &cut))
        .collect();
    for (index, &(hour, _)) in cut.iter().enumerate() {
        let mut values = [0u64; 11];
        for (figure, parts) in values.iter_mut().zip(&spread_values) {
            *figure = parts[index];
        }
        add(transaction, reading, hour, values)?;
    }
    let bytes = Figures {
        egress_sent_bytes: reading.bytes.egress_sent,
        egress_received_bytes: reading.bytes.egress_received,
        ingress_received_bytes: reading.bytes.ingress_received,
        ingress_sent_bytes: reading.bytes.ingress_sent,
        ..Figures::default()
    };
    add(transaction, reading, hour_of(reading.at_ms), bytes.values())?;
    transaction.execute(
        "UPDATE sandboxes SET running_ms = ?2, paused_ms = ?3, on_disk_ms = ?4, \
         guest_cpu_ms = ?5, accrued_at_ms = ?6, memory_mib = ?7, vcpus = ?8, \
         ended_at_ms = CASE WHEN ?9 THEN COALESCE(ended_at_ms, ?6) ELSE NULL END \
         WHERE sandbox_id = ?1",
        params![
            reading.sandbox_id,
            int(now.running_ms.max(was.running_ms)),
            int(now.paused_ms.max(was.paused_ms)),
            int(now.on_disk_ms.max(was.on_disk_ms)),
            int(now.guest_cpu_ms.max(was.guest_cpu_ms)),
            int(reading.at_ms.max(accrued.at_ms)),
            reading.memory_mib,
            reading.vcpus,
            reading.ended,
        ],
    )?;
    Ok(())
}

/// Adds `values` (in [`FIGURES`] order) to the sandbox's `hour`, unless
/// they are all zero.
fn add(
    transaction: &Transaction<'_>,
    reading: &Reading,
    hour: u64,
    values: [u64; 11],
) -> Result<(), UsageError> {
    if values.iter().all(|&value| value == 0) {
        return Ok(());
    }
    let columns = FIGURES.join(", ");
    let placeholders = (4..4 + FIGURES.len())
        .map(|n| format!("?{n}"))
        .collect::<Vec<_>>()
        .join(", ");
    let updates = FIGURES
        .iter()
        .map(|figure| format!("{figure} = usage.{figure} + excluded.{figure}"))
        .collect::<Vec<_>>()
        .join(", ");
    let sql = format!(
        "INSERT INTO usage (sandbox_id, key_name, hour_ms, {columns}) \
         VALUES (?1, ?2, ?3, {placeholders}) \
         ON CONFLICT (sandbox_id, hour_ms) DO UPDATE SET {updates}"
    );
    let mut statement = transaction.prepare_cached(&sql)?;
    let mut bound: Vec<i64> = vec![int(hour)];
    bound.extend(values.iter().map(|&value| int(value)));
    statement.execute(rusqlite::params_from_iter(
        [
            rusqlite::types::Value::Text(reading.sandbox_id.clone()),
            rusqlite::types::Value::Text(reading.key.clone()),
        ]
        .into_iter()
        .chain(bound.into_iter().map(rusqlite::types::Value::Integer)),
    ))?;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const T0: u64 = 1_700_000_000_000 - 1_700_000_000_000 % HOUR_MS;

    fn reading(id: &str, key: &str, at_ms: u64, clock: Clock) -> Reading {
        Reading {
            sandbox_id: id.to_owned(),
            key: key.to_owned(),
            memory_mib: 512,
            vcpus: 2,
            created_at_ms: T0,
            at_ms,
            clock,
            ..Reading::default()
        }
    }

    fn clock(running_s: u64, paused_s: u64, on_disk_s: u64) -> Clock {
        Clock {
            running_ms: running_s * 1000,
            paused_ms: paused_s * 1000,
            on_disk_ms: on_disk_s * 1000,
            guest_cpu_ms: running_s * 100,
        }
    }

    fn by(store: &UsageStore, by: Grouping) -> Vec<Row> {
        store
            .query(&Query {
                by,
                ..Query::default()
            })
            .unwrap()
    }

    #[test]
    fn a_new_ledger_is_at_the_last_migration_and_reopens_without_reapplying() {
        let dir = tempfile::tempdir().unwrap();
        let store = UsageStore::open(dir.path()).unwrap();
        assert_eq!(store.version().unwrap(), MIGRATIONS.last().unwrap().0);
        store
            .accrue(&[reading("a", "k", T0 + 5_000, clock(5, 0, 0))])
            .unwrap();
        drop(store);
        let store = UsageStore::open(dir.path()).unwrap();
        let applied: i64 = store
            .connection()
            .query_row("SELECT COUNT(*) FROM schema_migrations", [], |r| r.get(0))
            .unwrap();
        assert_eq!(applied, i64::try_from(MIGRATIONS.len()).unwrap());
        assert_eq!(by(&store, Grouping::Sandbox)[0].figures.running_ms, 5_000);
        let mode = std::fs::metadata(store.path()).unwrap().permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o600
        );
        let journal: String = store
            .connection()
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(journal, "wal");
    }

    #[test]
    fn a_ledger_from_a_newer_server_is_refused_naming_both_versions() {
        let dir = tempfile::tempdir().unwrap();
        drop(UsageStore::open(dir.path()).unwrap());
        let connection = Connection::open(dir.path().join(FILE_NAME)).unwrap();
        connection
            .execute(
                "INSERT INTO schema_migrations (version, applied_at_ms) VALUES (99, 0)",
                [],
            )
            .unwrap();
        drop(connection);
        let error = UsageStore::open(dir.path()).unwrap_err();
        assert!(
            matches!(error, UsageError::TooNew { found: 99, .. }),
            "{error:?}"
        );
        assert!(error.to_string().contains("schema version 99"), "{error}");
    }

    #[test]
    fn figures_accrue_from_the_clock_with_their_derived_units() {
        let dir = tempfile::tempdir().unwrap();
        let store = UsageStore::open(dir.path()).unwrap();
        let mut first = reading("a", "k", T0 + 10_000, clock(10, 0, 0));
        first.workspace_bytes = 1024 * MIB;
        first.bytes = Bytes {
            egress_sent: 100,
            egress_received: 2_000,
            ingress_received: 30,
            ingress_sent: 400,
        };
        store.accrue(&[first.clone()]).unwrap();
        let mut second = first.clone();
        second.at_ms = T0 + 40_000;
        second.clock = clock(10, 20, 10);
        second.saved_bytes = 300 * MIB;
        second.bytes = Bytes::default();
        store.accrue(&[second]).unwrap();
        let rows = by(&store, Grouping::Sandbox);
        assert_eq!(rows.len(), 1);
        let row = &rows[0];
        assert_eq!((row.sandbox_id.as_str(), row.key.as_str()), ("a", "k"));
        assert_eq!((row.memory_mib, row.vcpus, row.sandboxes), (512, 2, 1));
        assert_eq!(row.ended_at_ms, 0);
        let f = row.figures;
        assert_eq!(
            (f.running_ms, f.paused_ms, f.on_disk_ms),
            (10_000, 20_000, 10_000)
        );
        assert_eq!(f.guest_cpu_ms, 1_000);
        assert_eq!(f.vcpu_ms, 2 * 10_000);
        assert_eq!(f.memory_mib_ms, 512 * 30_000);
        assert_eq!(f.disk_mib_ms, 1024 * 40_000 + 300 * 10_000);
        assert_eq!((f.egress_sent_bytes, f.egress_received_bytes), (100, 2_000));
        assert_eq!((f.ingress_received_bytes, f.ingress_sent_bytes), (30, 400));
    }

    #[test]
    fn a_clock_read_again_or_lower_is_never_counted_twice() {
        let dir = tempfile::tempdir().unwrap();
        let store = UsageStore::open(dir.path()).unwrap();
        store
            .accrue(&[reading("a", "k", T0 + 5_000, clock(5, 0, 0))])
            .unwrap();
        store
            .accrue(&[reading("a", "k", T0 + 6_000, clock(5, 0, 0))])
            .unwrap();
        // A clock that began again (read lower), then grew back past the
        // ledger's: only what passes the ledger's counts.
        store
            .accrue(&[reading("a", "k", T0 + 7_000, clock(1, 0, 0))])
            .unwrap();
        store
            .accrue(&[reading("a", "k", T0 + 9_000, clock(7, 0, 0))])
            .unwrap();
        let f = by(&store, Grouping::Sandbox)[0].figures;
        assert_eq!(f.running_ms, 7_000);
        assert_eq!(store.accrued_clock("a").unwrap(), Some(clock(7, 0, 0)));
    }

    #[test]
    fn a_reopened_ledger_goes_on_from_its_last_reading() {
        let dir = tempfile::tempdir().unwrap();
        let store = UsageStore::open(dir.path()).unwrap();
        store
            .accrue(&[reading("a", "k", T0 + 5_000, clock(5, 0, 0))])
            .unwrap();
        // The server dies; the sandbox's clock goes on (adopted, or on
        // disk) and the next server's first reading has the gap in it.
        drop(store);
        let store = UsageStore::open(dir.path()).unwrap();
        store
            .accrue(&[reading("a", "k", T0 + 65_000, clock(50, 15, 0))])
            .unwrap();
        let f = by(&store, Grouping::Sandbox)[0].figures;
        assert_eq!((f.running_ms, f.paused_ms), (50_000, 15_000));
    }

    #[test]
    fn time_spreads_over_the_hours_and_days_it_passed_in() {
        let dir = tempfile::tempdir().unwrap();
        let store = UsageStore::open(dir.path()).unwrap();
        // Midnight UTC after T0, and a sandbox that was on disk from an
        // hour before it to an hour after.
        let midnight = T0 - T0 % DAY_MS + DAY_MS;
        let mut first = reading("a", "k", midnight - HOUR_MS, clock(0, 0, 0));
        first.created_at_ms = midnight - HOUR_MS;
        store.accrue(&[first.clone()]).unwrap();
        let mut later = first;
        later.at_ms = midnight + HOUR_MS;
        later.clock = clock(0, 0, 7_200);
        store.accrue(&[later]).unwrap();
        let days = by(&store, Grouping::Day);
        assert_eq!(days.len(), 2, "{days:?}");
        assert_eq!(days[0].day, day_name(midnight - 1));
        assert_eq!(days[1].day, day_name(midnight));
        assert_eq!(days[0].figures.on_disk_ms, 3_600_000);
        assert_eq!(days[1].figures.on_disk_ms, 3_600_000);
        assert_eq!(
            (days[0].from_ms, days[0].to_ms),
            (midnight - HOUR_MS, midnight)
        );
        // A period selects its hours.
        let since = store
            .query(&Query {
                since_ms: midnight,
                ..Query::default()
            })
            .unwrap();
        assert_eq!(since[0].figures.on_disk_ms, 3_600_000);
        let until = store
            .query(&Query {
                until_ms: Some(midnight),
                ..Query::default()
            })
            .unwrap();
        assert_eq!(until[0].figures.on_disk_ms, 3_600_000);
    }

    #[test]
    fn rows_group_by_key_and_a_key_sees_only_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let store = UsageStore::open(dir.path()).unwrap();
        store
            .accrue(&[
                reading("a", "alice", T0 + 5_000, clock(5, 0, 0)),
                reading("b", "alice", T0 + 5_000, clock(3, 0, 0)),
                reading("c", "bob", T0 + 5_000, clock(1, 0, 0)),
                reading("d", "", T0 + 5_000, clock(2, 0, 0)),
            ])
            .unwrap();
        let keys = by(&store, Grouping::Key);
        let summed: Vec<(&str, u32, u64)> = keys
            .iter()
            .map(|row| (row.key.as_str(), row.sandboxes, row.figures.running_ms))
            .collect();
        assert_eq!(
            summed,
            vec![("", 1, 2_000), ("alice", 2, 8_000), ("bob", 1, 1_000)]
        );
        let alice = store
            .query(&Query {
                key: Some("alice".to_owned()),
                ..Query::default()
            })
            .unwrap();
        let ids: Vec<&str> = alice.iter().map(|row| row.sandbox_id.as_str()).collect();
        assert_eq!(ids, vec!["a", "b"]);
    }

    #[test]
    fn an_end_is_kept_and_a_sandbox_seen_again_lives_on() {
        let dir = tempfile::tempdir().unwrap();
        let store = UsageStore::open(dir.path()).unwrap();
        let mut ended = reading("a", "k", T0 + 5_000, clock(5, 0, 0));
        ended.ended = true;
        store.accrue(&[ended.clone()]).unwrap();
        ended.at_ms = T0 + 9_000;
        store.accrue(&[ended]).unwrap();
        assert_eq!(by(&store, Grouping::Sandbox)[0].ended_at_ms, T0 + 5_000);
        store
            .accrue(&[reading("a", "k", T0 + 10_000, clock(6, 0, 0))])
            .unwrap();
        assert_eq!(by(&store, Grouping::Sandbox)[0].ended_at_ms, 0);
    }
}
