//! Collecting orphaned sandboxes: VMs whose owner died without ending them.
//!
//! A sandbox is killed and its state directory removed when its owner drops
//! it, but an owner killed by SIGKILL (or a crash past `Drop`) leaves QEMU
//! and vhost-device-vsock running. Every state directory records its owner
//! and its VMM processes by pid and start time (see
//! [`state_dir::owner`](crate::state_dir::owner)); [`collect`] scans a base
//! directory and, for each sandbox whose owner is gone, kills the VMM
//! processes that are still the recorded ones (SIGKILL, then waits until
//! they are gone) and removes the directory. `airlock gc` runs it; so does
//! [`SandboxBuilder::collect_orphans`](crate::SandboxBuilder::collect_orphans)
//! before each start.
//!
//! Each directory is judged on its own:
//! - owner running (same pid and start time) and not detached: kept;
//! - owner gone (or it detached the sandbox), and the sandbox adoptable
//!   (an adoption record, see [`crate::adopt`]) with its VMM still running
//!   and its lifetime ceiling not passed: kept, waiting for adoption;
//! - owner gone otherwise (not adoptable, its VM gone, or its lifetime
//!   passed while nobody enforced it), or the record is from before the
//!   last reboot: collected;
//! - no record yet: a sandbox being created; collected only once older than
//!   the grace period ([`DEFAULT_GRACE`]);
//! - record from another pid namespace, or unreadable (an adoption record
//!   of another format included): kept, since nothing here can tell
//!   whether its owner lives or what it asked for.
//!
//! Besides the recorded pids, QEMU and vhost-device-vsock processes whose
//! command line names the directory are killed too: that covers an owner
//! that died between starting a process and recording it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::adopt::Standing;
use crate::state_dir::owner::{comm, Comparable, OwnerRecord, ProcessId};
use crate::state_dir::DIR_PREFIX;

/// How old a state directory without an owner record must be before it is
/// taken for the remains of a crash rather than a sandbox being created.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(60);
/// How long killed processes may take to go.
const KILL_TIMEOUT: Duration = Duration::from_secs(10);
/// The VMM programs' names as the kernel keeps them (15 bytes at most).
const VMM_COMMS: [&str; 2] = ["qemu-system-x86", "vhost-device-vs"];

/// How [`collect`] works.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcOptions {
    dry_run: bool,
    grace: Duration,
}

impl Default for GcOptions {
    fn default() -> Self {
        GcOptions {
            dry_run: false,
            grace: DEFAULT_GRACE,
        }
    }
}

impl GcOptions {
    /// Collects for real, with the default grace period.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only reports what would be killed and removed.
    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// How old a directory without an owner record must be to be collected
    /// (default [`DEFAULT_GRACE`]).
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }
}

/// What [`collect`] did, directory by directory.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct GcReport {
    /// Orphans killed and removed (in a dry run: those that would be).
    pub removed: Vec<Removed>,
    /// Directories left alone, and why.
    pub kept: Vec<Kept>,
    /// Orphans that could not be killed or removed.
    pub failed: Vec<Failed>,
}

/// An orphaned sandbox that was collected.
#[derive(Debug)]
#[non_exhaustive]
pub struct Removed {
    pub dir: PathBuf,
    pub why: Orphaned,
    /// The VMM processes killed (in a dry run: that would be killed).
    pub killed: Vec<u32>,
}

/// Why a sandbox counts as orphaned.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Orphaned {
    /// The recorded owner no longer runs.
    OwnerGone { pid: u32 },
    /// The owner let the sandbox go ([`Sandbox::detach`](crate::Sandbox::detach)),
    /// and it can no longer be adopted (its VM is gone).
    Detached { pid: u32 },
    /// It waited for adoption until its lifetime ceiling passed.
    LifetimeEnded { limit: Duration },
    /// The record was written before the last reboot.
    OtherBoot,
    /// No owner record, and older than the grace period.
    NoRecord { age: Duration },
}

/// A sandbox directory left alone.
#[derive(Debug)]
#[non_exhaustive]
pub struct Kept {
    pub dir: PathBuf,
    pub why: KeepReason,
}

/// Why a directory was left alone.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeepReason {
    /// Its owner still runs.
    OwnerAlive { pid: u32 },
    /// No owner record yet, but younger than the grace period: probably
    /// being created.
    Young { age: Duration },
    /// The owner lives in another pid namespace, where its pid cannot be
    /// checked from here.
    OtherPidNamespace,
    /// Its owner is gone (or detached it), but it is adoptable, its VM
    /// (VMM process `pid`) runs and its lifetime has not passed: a later
    /// process may adopt it ([`crate::adopt::orphans`]).
    AwaitingAdoption {
        pid: u32,
        /// When its lifetime ceiling ends it (then it is collected).
        ends_at: Option<SystemTime>,
    },
    /// The owner record cannot be read or understood.
    Unreadable { error: String },
}

/// An orphan that could not be collected.
#[derive(Debug)]
#[non_exhaustive]
pub struct Failed {
    pub dir: PathBuf,
    pub error: GcError,
}

/// Errors collecting orphans.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GcError {
    #[error("cannot list {path}")]
    ReadBase {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot kill process {pid}; run gc as the sandboxes' user or as root")]
    Kill {
        pid: u32,
        #[source]
        source: nix::Error,
    },
    #[error("process {pid} still runs {timeout:?} after SIGKILL")]
    StillRunning { pid: u32, timeout: Duration },
    #[error("cannot remove {path}")]
    Remove {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl std::fmt::Display for Orphaned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Orphaned::OwnerGone { pid } => write!(f, "owner pid {pid} is gone"),
            Orphaned::Detached { pid } => {
                write!(f, "detached by owner pid {pid}, and its VM is gone")
            }
            Orphaned::LifetimeEnded { limit } => write!(
                f,
                "its lifetime ceiling of {} s passed while it waited for adoption",
                limit.as_secs()
            ),
            Orphaned::OtherBoot => f.write_str("written before the last reboot"),
            Orphaned::NoRecord { age } => {
                write!(f, "no owner record, {} s old", age.as_secs())
            }
        }
    }
}

impl std::fmt::Display for KeepReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeepReason::OwnerAlive { pid } => write!(f, "owner pid {pid} is running"),
            KeepReason::Young { age } => write!(
                f,
                "no owner record yet, {} ms old (being created?)",
                age.as_millis()
            ),
            KeepReason::OtherPidNamespace => {
                f.write_str("owner in another pid namespace; run gc there")
            }
            KeepReason::AwaitingAdoption { pid, ends_at } => {
                write!(
                    f,
                    "waiting for adoption (no owner holds it; VMM pid {pid} runs; "
                )?;
                match ends_at {
                    Some(at) => {
                        let left = at.duration_since(SystemTime::now()).unwrap_or_default();
                        write!(f, "its lifetime ends in {} s)", left.as_secs())
                    }
                    None => f.write_str("no lifetime ceiling)"),
                }
            }
            KeepReason::Unreadable { error } => write!(f, "{error}"),
        }
    }
}

/// Finds the orphaned sandboxes under `base` (such as
/// [`state_dir::default_base`](crate::state_dir::default_base)), kills their
/// VMM processes and removes their directories. A missing `base` holds no
/// sandboxes. Blocks while killed processes go; call it from
/// `spawn_blocking` in async code.
pub fn collect(base: &Path, options: &GcOptions) -> Result<GcReport, GcError> {
    let mut report = GcReport::default();
    let entries = match std::fs::read_dir(base) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(report),
        Err(source) => {
            return Err(GcError::ReadBase {
                path: base.to_owned(),
                source,
            })
        }
    };
    for entry in entries.flatten() {
        let is_sandbox = entry.file_name().to_string_lossy().starts_with(DIR_PREFIX)
            && entry.file_type().is_ok_and(|kind| kind.is_dir());
        if !is_sandbox {
            continue;
        }
        let dir = entry.path();
        match judge(&dir, options.grace) {
            Verdict::Keep(why) => {
                tracing::debug!(dir = %dir.display(), %why, "sandbox kept");
                report.kept.push(Kept { dir, why });
            }
            Verdict::Collect(why, recorded) => {
                let victims = vmm_processes(&dir, &recorded);
                let killed = victims.iter().map(|process| process.pid).collect();
                if !options.dry_run {
                    if let Err(error) = end(&dir, &victims) {
                        tracing::warn!(dir = %dir.display(), %error, "cannot collect orphan");
                        report.failed.push(Failed { dir, error });
                        continue;
                    }
                    tracing::info!(dir = %dir.display(), %why, ?killed, "orphaned sandbox collected");
                }
                report.removed.push(Removed { dir, why, killed });
            }
        }
    }
    Ok(report)
}

/// Runs [`collect`] on `base` from async code, logging what it did; used
/// by [`SandboxBuilder::collect_orphans`](crate::SandboxBuilder::collect_orphans).
/// Failures are logged, not returned: they must not stop a start.
pub(crate) async fn collect_before_start(base: PathBuf) {
    let result = tokio::task::spawn_blocking(move || collect(&base, &GcOptions::default())).await;
    match result {
        Ok(Ok(report)) => {
            if !report.removed.is_empty() || !report.failed.is_empty() {
                tracing::info!(
                    removed = report.removed.len(),
                    failed = report.failed.len(),
                    "collected orphaned sandboxes"
                );
            }
        }
        Ok(Err(error)) => tracing::warn!(%error, "cannot collect orphaned sandboxes"),
        Err(error) => tracing::warn!(%error, "orphan collection did not finish"),
    }
}

enum Verdict {
    Keep(KeepReason),
    /// Orphaned; the VMM processes the record names.
    Collect(Orphaned, Vec<ProcessId>),
}

fn judge(dir: &Path, grace: Duration) -> Verdict {
    match OwnerRecord::read(dir) {
        Ok(record) => match record.comparable_here() {
            Comparable::OtherPidNamespace => Verdict::Keep(KeepReason::OtherPidNamespace),
            Comparable::OtherBoot => Verdict::Collect(Orphaned::OtherBoot, Vec::new()),
            Comparable::Yes if record.is_held() => Verdict::Keep(KeepReason::OwnerAlive {
                pid: record.owner.pid,
            }),
            Comparable::Yes => {
                let pid = record.owner.pid;
                let orphaned = if record.detached {
                    Orphaned::Detached { pid }
                } else {
                    Orphaned::OwnerGone { pid }
                };
                match crate::adopt::standing(dir) {
                    Standing::Waiting(adoptable) => Verdict::Keep(KeepReason::AwaitingAdoption {
                        pid: adoptable.vmm.pid,
                        ends_at: adoptable.ends_at(),
                    }),
                    Standing::Foreign(error) => Verdict::Keep(KeepReason::Unreadable {
                        error: crate::error_chain(&error),
                    }),
                    Standing::LifetimeEnded { limit } => {
                        Verdict::Collect(Orphaned::LifetimeEnded { limit }, record.vmm)
                    }
                    Standing::NotAdoptable | Standing::VmGone | Standing::Broken(_) => {
                        Verdict::Collect(orphaned, record.vmm)
                    }
                }
            }
        },
        Err(error) if error.is_missing() => {
            let age = std::fs::metadata(dir)
                .and_then(|meta| meta.modified())
                .ok()
                .and_then(|modified| SystemTime::now().duration_since(modified).ok())
                .unwrap_or(Duration::ZERO);
            if age < grace {
                Verdict::Keep(KeepReason::Young { age })
            } else {
                Verdict::Collect(Orphaned::NoRecord { age }, Vec::new())
            }
        }
        Err(error) => Verdict::Keep(KeepReason::Unreadable {
            error: crate::error_chain(&error),
        }),
    }
}

/// The recorded processes that still run, plus any VMM process whose
/// command line names `dir`.
fn vmm_processes(dir: &Path, recorded: &[ProcessId]) -> Vec<ProcessId> {
    let mut processes: Vec<ProcessId> = recorded
        .iter()
        .copied()
        .filter(ProcessId::is_running)
        .collect();
    for process in processes_naming(dir) {
        if !processes.iter().any(|known| known.pid == process.pid) {
            processes.push(process);
        }
    }
    processes
}

/// Live QEMU and vhost-device-vsock processes with `dir/` in their
/// command line.
fn processes_naming(dir: &Path) -> Vec<ProcessId> {
    let mut needle = dir.as_os_str().as_encoded_bytes().to_vec();
    needle.push(b'/');
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| comm(*pid).is_some_and(|name| VMM_COMMS.contains(&name.as_str())))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                cmdline
                    .windows(needle.len())
                    .any(|window| window == needle.as_slice())
            })
        })
        .filter_map(ProcessId::of)
        .collect()
}

/// Kills `processes` (each only while it is still the same process),
/// waits until they are gone, and removes `dir`.
fn end(dir: &Path, processes: &[ProcessId]) -> Result<(), GcError> {
    for process in processes {
        if !process.is_running() {
            continue;
        }
        let pid = i32::try_from(process.pid).map_err(|_| GcError::Kill {
            pid: process.pid,
            source: nix::Error::EINVAL,
        })?;
        match kill(Pid::from_raw(pid), Signal::SIGKILL) {
            Ok(()) | Err(nix::Error::ESRCH) => {}
            Err(source) => {
                return Err(GcError::Kill {
                    pid: process.pid,
                    source,
                })
            }
        }
    }
    let deadline = Instant::now() + KILL_TIMEOUT;
    while let Some(process) = processes.iter().find(|process| process.is_running()) {
        if Instant::now() >= deadline {
            return Err(GcError::StillRunning {
                pid: process.pid,
                timeout: KILL_TIMEOUT,
            });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(GcError::Remove {
            path: dir.to_owned(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    /// A process that has exited and been reaped: its identity is stale.
    fn dead_process() -> ProcessId {
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        let process = ProcessId::of(pid).unwrap_or(ProcessId { pid, start_time: 1 });
        child.wait().unwrap();
        process
    }

    fn sandbox_dir(base: &Path, name: &str, record: Option<&OwnerRecord>) -> PathBuf {
        let dir = base.join(format!("{DIR_PREFIX}{name}"));
        std::fs::create_dir(&dir).unwrap();
        if let Some(record) = record {
            record.write(&dir).unwrap();
        }
        dir
    }

    #[test]
    fn orphans_are_killed_and_removed_and_live_sandboxes_kept() {
        let base = tempfile::tempdir().unwrap();
        let mut vmm = Command::new("sleep")
            .arg("1000")
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let vmm_id = ProcessId::of(vmm.id()).unwrap();

        let mut orphan_record = OwnerRecord::for_current_process().unwrap();
        orphan_record.owner = dead_process();
        orphan_record.vmm = vec![vmm_id];
        let orphan = sandbox_dir(base.path(), "orphan", Some(&orphan_record));

        let mut live_record = OwnerRecord::for_current_process().unwrap();
        live_record.vmm = vec![vmm_id];
        let live = sandbox_dir(base.path(), "live", Some(&live_record));
        let young = sandbox_dir(base.path(), "young", None);
        std::fs::create_dir(base.path().join("not-a-sandbox")).unwrap();

        let dry = collect(base.path(), &GcOptions::new().dry_run(true)).unwrap();
        assert_eq!(dry.removed.len(), 1);
        assert_eq!(dry.removed[0].killed, [vmm.id()]);
        assert!(orphan.exists() && vmm_id.is_running());

        let report = collect(base.path(), &GcOptions::new()).unwrap();
        assert!(report.failed.is_empty(), "{:?}", report.failed);
        assert_eq!(report.removed.len(), 1, "{report:?}");
        assert_eq!(report.removed[0].dir, orphan);
        assert_eq!(
            report.removed[0].why,
            Orphaned::OwnerGone {
                pid: orphan_record.owner.pid
            }
        );
        assert!(!orphan.exists());
        // The recorded "VMM" was killed: it only awaits its reaper (us).
        assert!(!vmm_id.is_running());
        vmm.wait().unwrap();

        assert!(live.exists() && young.exists());
        assert_eq!(report.kept.len(), 2, "{report:?}");
        let reason = |dir: &Path| {
            report
                .kept
                .iter()
                .find(|kept| kept.dir == dir)
                .map(|kept| kept.why.clone())
        };
        assert_eq!(
            reason(&live),
            Some(KeepReason::OwnerAlive {
                pid: std::process::id()
            })
        );
        assert!(matches!(reason(&young), Some(KeepReason::Young { .. })));
        assert!(base.path().join("not-a-sandbox").exists());
    }

    #[test]
    fn a_recycled_vmm_pid_is_not_killed() {
        let base = tempfile::tempdir().unwrap();
        let mut bystander = Command::new("sleep").arg("1000").spawn().unwrap();
        let mut record = OwnerRecord::for_current_process().unwrap();
        record.owner = dead_process();
        // Same pid, another start time: the recorded process is gone and
        // the pid now belongs to someone else.
        let now = ProcessId::of(bystander.id()).unwrap();
        record.vmm = vec![ProcessId {
            start_time: now.start_time.saturating_sub(1),
            ..now
        }];
        let dir = sandbox_dir(base.path(), "recycled", Some(&record));
        let report = collect(base.path(), &GcOptions::new()).unwrap();
        assert_eq!(report.removed.len(), 1);
        assert!(report.removed[0].killed.is_empty());
        assert!(!dir.exists());
        assert!(now.is_running(), "the bystander must live");
        bystander.kill().unwrap();
        bystander.wait().unwrap();
    }

    #[test]
    fn half_created_directories_go_after_the_grace_period() {
        let base = tempfile::tempdir().unwrap();
        let dir = sandbox_dir(base.path(), "half", None);
        let report = collect(base.path(), &GcOptions::new()).unwrap();
        assert!(report.removed.is_empty() && dir.exists());
        let report = collect(base.path(), &GcOptions::new().grace(Duration::ZERO)).unwrap();
        assert!(matches!(report.removed[0].why, Orphaned::NoRecord { .. }));
        assert!(!dir.exists());
    }

    #[test]
    fn unreadable_records_and_other_namespaces_are_kept() {
        let base = tempfile::tempdir().unwrap();
        let junk = sandbox_dir(base.path(), "junk", None);
        std::fs::write(junk.join(crate::state_dir::owner::OWNER_FILE), b"{").unwrap();
        let mut record = OwnerRecord::for_current_process().unwrap();
        record.owner = dead_process();
        record.pid_namespace = Some("pid:[1]".into());
        let foreign = sandbox_dir(base.path(), "foreign", Some(&record));
        let report = collect(base.path(), &GcOptions::new().grace(Duration::ZERO)).unwrap();
        assert!(report.removed.is_empty(), "{report:?}");
        assert!(junk.exists() && foreign.exists());
        assert_eq!(report.kept.len(), 2);
    }

    /// An orphan whose "VMM" is `vmm`, with an adoption record whose life
    /// began `age` ago with a ceiling of an hour.
    fn adoptable_orphan(
        base: &Path,
        name: &str,
        vmm: &std::process::Child,
        age: Duration,
    ) -> PathBuf {
        let mut owner = OwnerRecord::for_current_process().unwrap();
        owner.owner = dead_process();
        let vmm_id = ProcessId::of(vmm.id()).unwrap();
        owner.vmm = vec![vmm_id];
        let dir = sandbox_dir(base, name, Some(&owner));
        let mut record = crate::adopt::sample_record();
        record.id = format!("{DIR_PREFIX}{name}");
        record.vmm = vmm_id;
        record.clock.on_disk_ms = 0;
        record.clock.started_at_unix_ms =
            crate::adopt::unix_ms(SystemTime::now().checked_sub(age).unwrap());
        record.write(&dir).unwrap();
        dir
    }

    #[test]
    fn an_adoptable_orphan_waits_while_its_vm_runs_and_its_lifetime_lasts() {
        let base = tempfile::tempdir().unwrap();
        let mut young = Command::new("sleep").arg("1000").spawn().unwrap();
        let mut old = Command::new("sleep").arg("1000").spawn().unwrap();
        let waiting = adoptable_orphan(base.path(), "waiting", &young, Duration::from_secs(60));
        let expired = adoptable_orphan(base.path(), "expired", &old, Duration::from_secs(3601));

        let report = collect(base.path(), &GcOptions::new()).unwrap();
        assert!(report.failed.is_empty(), "{:?}", report.failed);
        assert_eq!(report.kept.len(), 1, "{report:?}");
        assert_eq!(report.kept[0].dir, waiting);
        let KeepReason::AwaitingAdoption { pid, ends_at } = report.kept[0].why.clone() else {
            panic!("{report:?}");
        };
        assert_eq!(pid, young.id());
        let left = ends_at.unwrap().duration_since(SystemTime::now()).unwrap();
        assert!(left > Duration::from_secs(3400), "{left:?}");
        assert!(report.kept[0]
            .why
            .to_string()
            .contains("waiting for adoption"));
        assert!(waiting.exists());

        // Its lifetime passed while nobody held it: collected, VM killed.
        assert_eq!(report.removed.len(), 1, "{report:?}");
        assert_eq!(report.removed[0].dir, expired);
        assert!(matches!(
            report.removed[0].why,
            Orphaned::LifetimeEnded { .. }
        ));
        assert_eq!(report.removed[0].killed, [old.id()]);
        assert!(!expired.exists());
        old.wait().unwrap();

        // Its VM gone: collected.
        young.kill().unwrap();
        young.wait().unwrap();
        let report = collect(base.path(), &GcOptions::new()).unwrap();
        assert_eq!(report.removed.len(), 1, "{report:?}");
        assert!(matches!(report.removed[0].why, Orphaned::OwnerGone { .. }));
        assert!(!waiting.exists());
    }

    #[test]
    fn a_detached_sandbox_of_a_live_owner_waits_and_another_format_is_kept() {
        let base = tempfile::tempdir().unwrap();
        let mut vmm = Command::new("sleep").arg("1000").spawn().unwrap();
        let dir = adoptable_orphan(base.path(), "detached", &vmm, Duration::ZERO);
        let mut owner = OwnerRecord::read(&dir).unwrap();
        owner.owner = ProcessId::current().unwrap();
        owner.detached = true;
        owner.write(&dir).unwrap();
        let report = collect(base.path(), &GcOptions::new()).unwrap();
        assert!(
            matches!(report.kept[0].why, KeepReason::AwaitingAdoption { .. }),
            "{report:?}"
        );

        let mut record = crate::adopt::sample_record();
        record.version = 99;
        record.write(&dir).unwrap();
        let report = collect(base.path(), &GcOptions::new()).unwrap();
        assert!(
            matches!(&report.kept[0].why, KeepReason::Unreadable { error } if error.contains("version 99")),
            "{report:?}"
        );
        assert!(dir.exists());
        vmm.kill().unwrap();
        vmm.wait().unwrap();
    }

    #[test]
    fn a_missing_base_holds_nothing() {
        let report = collect(Path::new("/nonexistent/airlock"), &GcOptions::new()).unwrap();
        assert!(report.removed.is_empty() && report.kept.is_empty());
    }
}
