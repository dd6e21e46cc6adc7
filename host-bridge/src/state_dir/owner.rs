//! Who owns a state directory: the owner record (`owner.json`) and the
//! identities of the processes it names.
//!
//! A bare pid can be reused, so a process is named by its pid plus its start
//! time (field 22 of `/proc/PID/stat`, clock ticks since boot): a recycled pid
//! has a later start time and is never mistaken for the recorded process.
//! The record also names the boot and the pid namespace it was written in,
//! so pids are only ever compared where they mean the same thing.

use std::path::{Path, PathBuf};

use airlock_atomic_file::Mode;
use serde::{Deserialize, Serialize};

/// The owner record's file name inside a state directory.
pub const OWNER_FILE: &str = "owner.json";

/// The record format this library writes and reads.
const RECORD_VERSION: u32 = 1;

/// A process, named so that a recycled pid does not match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessId {
    pub pid: u32,
    /// Start time in clock ticks after boot (`/proc/PID/stat` field 22).
    pub start_time: u64,
}

impl ProcessId {
    /// The calling process.
    pub fn current() -> Option<Self> {
        Self::of(std::process::id())
    }

    /// The live process `pid`, if there is one (zombies excluded).
    pub fn of(pid: u32) -> Option<Self> {
        let stat = read_stat(pid)?;
        (!stat.dead).then_some(ProcessId {
            pid,
            start_time: stat.start_time,
        })
    }

    /// Whether this very process still runs: same pid, same start time, not
    /// a zombie.
    pub fn is_running(&self) -> bool {
        read_stat(self.pid).is_some_and(|stat| !stat.dead && stat.start_time == self.start_time)
    }

    /// Whether this very process runs and is stopped (SIGSTOP: a paused
    /// sandbox's VMM).
    pub fn is_stopped(&self) -> bool {
        read_stat(self.pid)
            .is_some_and(|stat| !stat.dead && stat.stopped && stat.start_time == self.start_time)
    }
}

/// What a state directory records about its owner and its VMM processes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerRecord {
    pub version: u32,
    /// `/proc/sys/kernel/random/boot_id` when written: pids and start times
    /// mean nothing after a reboot.
    pub boot_id: Option<String>,
    /// The owner's pid namespace (`/proc/self/ns/pid`): another namespace's
    /// pids cannot be checked from here.
    pub pid_namespace: Option<String>,
    /// The process holding the sandbox (the embedding program).
    pub owner: ProcessId,
    /// QEMU and its device processes, added as they start.
    #[serde(default)]
    pub vmm: Vec<ProcessId>,
    /// Set when the owner let the sandbox go on purpose
    /// ([`Sandbox::detach`](crate::Sandbox::detach)): the sandbox is then
    /// an orphan whether the owner still runs or not.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub detached: bool,
}

impl OwnerRecord {
    /// A record naming the calling process, with no VMM processes yet.
    pub fn for_current_process() -> std::io::Result<Self> {
        let owner = ProcessId::current()
            .ok_or_else(|| std::io::Error::other("cannot read /proc/self/stat"))?;
        Ok(OwnerRecord {
            version: RECORD_VERSION,
            boot_id: boot_id(),
            pid_namespace: pid_namespace(),
            owner,
            vmm: Vec::new(),
            detached: false,
        })
    }

    /// Reads `dir`'s record.
    pub fn read(dir: &Path) -> Result<Self, RecordError> {
        let path = dir.join(OWNER_FILE);
        let text = std::fs::read(&path).map_err(|source| RecordError::Read {
            path: path.clone(),
            source,
        })?;
        let record: OwnerRecord =
            serde_json::from_slice(&text).map_err(|source| RecordError::Parse {
                path: path.clone(),
                source,
            })?;
        if record.version != RECORD_VERSION {
            return Err(RecordError::Version {
                path,
                version: record.version,
            });
        }
        Ok(record)
    }

    /// Writes the record into `dir` atomically and durably: a fresh
    /// private file (never one someone else placed there) renamed over the
    /// old record (`airlock_atomic_file`).
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        let mut bytes = serde_json::to_vec(self)?;
        bytes.push(b'\n');
        airlock_atomic_file::write(&dir.join(OWNER_FILE), &bytes, Mode::Private)
    }

    /// Whether the sandbox has an owner that holds it: the recorded owner
    /// still runs and has not detached it.
    pub fn is_held(&self) -> bool {
        !self.detached && self.owner.is_running()
    }

    /// Whether pids in this record can be checked from this process: same
    /// boot and same pid namespace.
    pub fn comparable_here(&self) -> Comparable {
        match (&self.boot_id, boot_id()) {
            (Some(recorded), Some(now)) if *recorded != now => return Comparable::OtherBoot,
            _ => {}
        }
        match (&self.pid_namespace, pid_namespace()) {
            (Some(recorded), Some(now)) if *recorded != now => Comparable::OtherPidNamespace,
            _ => Comparable::Yes,
        }
    }
}

/// Whether a record's pids mean the same processes here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparable {
    Yes,
    /// Written before the last reboot: every process it names is gone.
    OtherBoot,
    /// Written in another pid namespace: its pids cannot be checked here.
    OtherPidNamespace,
}

/// Errors reading an owner record.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not an owner record")]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "{path} has record version {version}, not {RECORD_VERSION}; use the airlock that wrote it"
    )]
    Version { path: PathBuf, version: u32 },
}

impl RecordError {
    /// The record does not exist (yet).
    pub fn is_missing(&self) -> bool {
        matches!(self, RecordError::Read { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

/// The fields of `/proc/PID/stat` this module uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    start_time: u64,
    /// Zombie or dead: no longer runs, only waits to be reaped.
    dead: bool,
    /// Stopped by a signal (SIGSTOP) or by a tracer.
    stopped: bool,
}

fn read_stat(pid: u32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Parses `pid (comm) state ppid ... starttime ...`; `comm` may hold spaces
/// and parentheses, so fields are counted after the last `)`.
fn parse_stat(stat: &str) -> Option<Stat> {
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_ascii_whitespace();
    // Field 3 is the state; field 22 the start time, 19 fields later.
    let state = fields.next()?;
    let start_time = fields.nth(18)?.parse().ok()?;
    Some(Stat {
        start_time,
        dead: matches!(state, "Z" | "X" | "x"),
        stopped: matches!(state, "T" | "t"),
    })
}

/// The process's short name (`/proc/PID/comm`), at most 15 bytes.
pub(crate) fn comm(pid: u32) -> Option<String> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(comm.trim_end_matches('\n').to_owned())
}

fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(id.trim().to_owned())
}

fn pid_namespace() -> Option<String> {
    let link = std::fs::read_link("/proc/self/ns/pid").ok()?;
    Some(link.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_last_parenthesis() {
        let line = "42 (a) b) c) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 \
                    123456 1000 10 18446744073709551615";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                start_time: 123456,
                dead: false,
                stopped: false,
            })
        );
        let zombie = line.replace(") S ", ") Z ");
        assert!(parse_stat(&zombie).is_some_and(|stat| stat.dead));
        let stopped = line.replace(") S ", ") T ");
        assert!(parse_stat(&stopped).is_some_and(|stat| stat.stopped && !stat.dead));
        assert_eq!(parse_stat("42 (x) S 1"), None);
    }

    #[test]
    fn a_process_is_named_by_pid_and_start_time() {
        let me = ProcessId::current().unwrap();
        assert!(me.is_running());
        let recycled = ProcessId {
            start_time: me.start_time + 1,
            ..me
        };
        assert!(!recycled.is_running());
    }

    #[test]
    fn records_round_trip_and_reject_other_versions() {
        let dir = tempfile::tempdir().unwrap();
        let mut record = OwnerRecord::for_current_process().unwrap();
        record.write(dir.path()).unwrap();
        assert_eq!(OwnerRecord::read(dir.path()).unwrap(), record);
        assert_eq!(record.comparable_here(), Comparable::Yes);

        record.vmm.push(record.owner);
        record.write(dir.path()).unwrap();
        assert_eq!(OwnerRecord::read(dir.path()).unwrap().vmm.len(), 1);

        record.version = 99;
        record.write(dir.path()).unwrap();
        let error = OwnerRecord::read(dir.path()).unwrap_err();
        assert!(error.to_string().contains("version 99"), "{error}");
        assert!(!error.is_missing());
        let empty = tempfile::tempdir().unwrap();
        assert!(OwnerRecord::read(empty.path()).unwrap_err().is_missing());
    }

    #[test]
    fn another_boot_is_not_comparable() {
        let mut record = OwnerRecord::for_current_process().unwrap();
        record.boot_id = Some("not-this-boot".into());
        assert_eq!(record.comparable_here(), Comparable::OtherBoot);
    }
}
