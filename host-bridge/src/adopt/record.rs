//! The adoption record (`adopt.json` in an adoptable sandbox's state
//! directory): everything a new owner needs to rebuild the
//! [`Sandbox`](crate::Sandbox) around the VM that still runs.
//!
//! It names the machine (the [`SavedVm`] QEMU runs, or the agent binary of
//! the process backend), the VMM process by pid and start time, the clock
//! (wall-clock start, time paused and on disk, guest CPU of earlier VM
//! processes), the policies (lifetime ceiling, idle, paused calls), the
//! defaults every program gets (limits, user, environment) and the
//! network: rules, bounds, the upstream roots, and the guest's identity
//! toward the host, which must stay what the guest holds: each secret
//! with its value and its placeholder, and the sandbox CA with its private
//! key. A resolver is not recorded; the adopting builder gives one.
//!
//! Written atomically and durably (a fresh file renamed over the old one,
//! both synced), mode 0600 and owned by the library's user: the state
//! directory may be shared with the VMM's unprivileged group (`state_dir::share_with_group`), which
//! can create files there but can neither read this one nor replace it
//! (the directory is sticky). A record that is not a private file of this
//! user is refused. `Debug` never shows a secret's value or the CA's key.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use airlock_atomic_file::Mode;
use serde::{Deserialize, Serialize};

use crate::saved::SavedVm;
use crate::state_dir::owner::ProcessId;

/// The record's file name inside a state directory.
pub const ADOPT_FILE: &str = "adopt.json";

/// The record format this library writes and reads.
pub(crate) const RECORD_VERSION: u32 = 1;

/// Errors reading or writing an adoption record.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not an adoption record")]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "{path} has record version {version}, not {RECORD_VERSION}; adopt it with the airlock \
         that wrote it"
    )]
    Version { path: PathBuf, version: u32 },
    #[error("{path} is not a private file of this user (owner and mode 0600); refusing it")]
    NotPrivate { path: PathBuf },
}

impl RecordError {
    /// The record does not exist: the sandbox is not adoptable.
    pub fn is_missing(&self) -> bool {
        matches!(self, RecordError::Read { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

/// What `adopt.json` says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AdoptRecord {
    pub version: u32,
    /// The sandbox's id: its state directory's name.
    pub id: String,
    pub backend: RecordedBackend,
    /// `kvm` or `tcg`.
    pub accel: String,
    /// The guest vsock port the agent serves on (its kernel command line).
    pub agent_port: u32,
    /// The workspace disk, locked again by the adopter.
    pub workspace: Option<PathBuf>,
    /// QEMU, or the agent on the process backend.
    pub vmm: ProcessId,
    pub clock: RecordedClock,
    pub policy: RecordedPolicy,
    pub defaults: RecordedDefaults,
    pub network: Option<RecordedNetwork>,
}

/// What runs the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum RecordedBackend {
    /// QEMU with the agent on the virtio-serial port (`agent.sock`).
    Qemu { machine: SavedVm },
    /// The agent binary as a host process on `agent.sock`.
    Process { agent: PathBuf },
}

/// The sandbox's time, as of `at_unix_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub(crate) struct RecordedClock {
    /// When its life began (a pooled sandbox's: its handout), Unix ms.
    pub started_at_unix_ms: u64,
    /// Time spent saved to disk, which the lifetime ceiling leaves out.
    pub on_disk_ms: u64,
    /// Time paused (frozen or on disk) until `at_unix_ms`.
    pub paused_ms: u64,
    /// Whether it was paused at `at_unix_ms`.
    pub paused: bool,
    /// When these figures were taken, Unix ms.
    pub at_unix_ms: u64,
    /// Guest CPU time of VM processes before the current one.
    pub guest_cpu_base_ms: u64,
}

/// The policies the watchdog and the calls follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RecordedPolicy {
    pub max_lifetime_ms: Option<u64>,
    pub idle: Option<RecordedIdle>,
    pub paused_calls: RecordedPausedCalls,
    pub unresponsive_after_ms: Option<u64>,
    pub console_log_budget: u64,
}

/// The idle timeout and what it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RecordedIdle {
    pub after_ms: u64,
    pub policy: RecordedIdlePolicy,
}

/// [`IdlePolicy`](crate::IdlePolicy) as recorded (`lifecycle` converts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RecordedIdlePolicy {
    Pause,
    PauseToDisk,
    Stop,
}

/// [`PausedCalls`](crate::PausedCalls) as recorded (`lifecycle` converts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum RecordedPausedCalls {
    Resume,
    Wait,
    Fail,
}

/// What every program gets unless it says otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub(crate) struct RecordedDefaults {
    pub limits: RecordedLimits,
    pub user: Option<String>,
    /// The directory programs start in (a template's `WORKDIR`); absent in
    /// records written before it was kept.
    #[serde(default)]
    pub cwd: Option<String>,
    /// The builder's environment ([`SandboxBuilder::env`](crate::SandboxBuilder::env)), in order.
    pub env: Vec<(String, String)>,
}

/// [`Limits`](crate::Limits) as recorded (`exec::limits` converts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct RecordedLimits {
    pub memory_bytes: Option<u64>,
    pub pids: Option<u32>,
    pub cpu_millis: Option<u32>,
    pub open_files: Option<u64>,
    pub core_bytes: Option<u64>,
    pub file_size_bytes: Option<u64>,
    pub stack_bytes: Option<u64>,
}

/// The sandbox's network, as the adopter rebuilds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RecordedNetwork {
    /// The allow rules in force, as `NetRule` writes them.
    pub rules: Vec<String>,
    pub secrets: Vec<RecordedSecret>,
    /// The sandbox CA, when secrets are bound.
    pub ca: Option<RecordedCa>,
    /// Extra roots trusted upstream, DER in base64.
    pub upstream_roots: Vec<String>,
    pub max_connections: usize,
    pub idle_timeout_ms: u64,
    pub head_timeout_ms: u64,
    pub max_header_bytes: usize,
    /// Whether the guest may reach the host itself; a record without it
    /// (written before it was kept) is denied.
    #[serde(default)]
    pub host_access: bool,
}

/// A secret, its hosts and the placeholder the guest holds for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RecordedSecret {
    pub name: String,
    pub value: Hidden,
    pub hosts: Vec<String>,
    pub placeholder: String,
}

/// The sandbox CA the guest trusts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RecordedCa {
    /// The 8 hex digits of its name.
    pub id: String,
    pub cert_pem: String,
    /// Its private key, PKCS #8 in PEM.
    pub key_pem: Hidden,
    pub not_after_unix_secs: u64,
}

/// A string kept in the record that `Debug` never shows.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct Hidden(pub String);

impl fmt::Debug for Hidden {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl AdoptRecord {
    /// Reads `dir`'s record: a private file of this user, of this format.
    pub fn read(dir: &Path) -> Result<Self, RecordError> {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let path = dir.join(ADOPT_FILE);
        let read = |source| RecordError::Read {
            path: path.clone(),
            source,
        };
        // Never through a link: the directory may be shared with the VMM's
        // group, which could have placed one before the first record.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(&path)
            .map_err(read)?;
        let meta = file.metadata().map_err(read)?;
        if !meta.is_file()
            || meta.uid() != nix::unistd::geteuid().as_raw()
            || meta.mode() & 0o077 != 0
        {
            return Err(RecordError::NotPrivate { path });
        }
        let record: AdoptRecord =
            serde_json::from_reader(std::io::BufReader::new(file)).map_err(|source| {
                RecordError::Parse {
                    path: path.clone(),
                    source,
                }
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
    /// private file renamed over the old record (`airlock_atomic_file`).
    pub fn write(&self, dir: &Path) -> Result<(), RecordError> {
        let path = dir.join(ADOPT_FILE);
        let fail = |source| RecordError::Write {
            path: path.clone(),
            source,
        };
        let mut bytes = serde_json::to_vec(self).map_err(|e| fail(e.into()))?;
        bytes.push(b'\n');
        airlock_atomic_file::write(&path, &bytes, Mode::Private).map_err(fail)
    }

    /// When the lifetime ceiling ends the sandbox, if it has one: its
    /// start, plus the ceiling, plus the time it spent on disk.
    pub fn ends_at(&self) -> Option<SystemTime> {
        let limit = self.policy.max_lifetime_ms?;
        Some(
            from_unix_ms(self.clock.started_at_unix_ms)
                + Duration::from_millis(self.clock.on_disk_ms)
                + Duration::from_millis(limit),
        )
    }

    /// When its life began (a pooled sandbox's: its handout).
    pub fn started_at(&self) -> SystemTime {
        from_unix_ms(self.clock.started_at_unix_ms)
    }
}

/// `duration` in whole milliseconds.
pub(crate) fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// `time` as Unix milliseconds (0 before 1970).
pub(crate) fn unix_ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, ms)
}

/// Unix milliseconds as a time.
pub(crate) fn from_unix_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::lifecycle::{IdlePolicy, PausedCalls};
    use crate::saved::SavedDisk;

    /// A record with every part set, a secret and a CA among them.
    pub(crate) fn sample() -> AdoptRecord {
        AdoptRecord {
            version: RECORD_VERSION,
            id: "sandbox-abc".into(),
            backend: RecordedBackend::Qemu {
                machine: SavedVm {
                    accel: "tcg".into(),
                    cpu: Some("max,erms=off,la57=off".into()),
                    memory_mib: 256,
                    vcpus: 1,
                    kernel: "/k".into(),
                    initramfs: "/i".into(),
                    kernel_cmdline: "console=ttyS0".into(),
                    disks: vec![SavedDisk {
                        id: "root".into(),
                        path: "/r".into(),
                        read_only: true,
                    }],
                    serial_ports: Vec::new(),
                },
            },
            accel: "tcg".into(),
            agent_port: 1024,
            workspace: Some("/w/ws.img".into()),
            vmm: ProcessId {
                pid: 42,
                start_time: 4242,
            },
            clock: RecordedClock {
                started_at_unix_ms: 1_000_000,
                on_disk_ms: 5_000,
                paused_ms: 7_000,
                paused: true,
                at_unix_ms: 1_060_000,
                guest_cpu_base_ms: 300,
            },
            policy: RecordedPolicy {
                max_lifetime_ms: Some(3_600_000),
                idle: Some(RecordedIdle {
                    after_ms: 60_000,
                    policy: IdlePolicy::PauseToDisk.into(),
                }),
                paused_calls: PausedCalls::Wait.into(),
                unresponsive_after_ms: Some(60_000),
                console_log_budget: 16 << 20,
            },
            defaults: RecordedDefaults {
                limits: crate::Limits::new().pids(64).memory_bytes(1 << 28).into(),
                user: Some("nobody".into()),
                cwd: Some("/srv/app".into()),
                env: vec![("LANG".into(), "C.UTF-8".into())],
            },
            network: Some(RecordedNetwork {
                rules: vec!["api.test:443".into(), "127.0.0.0/8".into()],
                secrets: vec![RecordedSecret {
                    name: "API_TOKEN".into(),
                    value: Hidden("hunter2-secret-value".into()),
                    hosts: vec!["api.test".into()],
                    placeholder: format!("airlock-placeholder-api_token-{}", "0".repeat(32)),
                }],
                ca: Some(RecordedCa {
                    id: "0badcafe".into(),
                    cert_pem: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
                        .into(),
                    key_pem: Hidden(
                        "-----BEGIN PRIVATE KEY-----\nprivate-key-body\n-----END PRIVATE KEY-----\n"
                            .into(),
                    ),
                    not_after_unix_secs: 2_000_000_000,
                }),
                upstream_roots: vec!["AAEC".into()],
                max_connections: 12,
                idle_timeout_ms: 300_000,
                head_timeout_ms: 10_000,
                max_header_bytes: 65_536,
                host_access: false,
            }),
        }
    }

    #[test]
    fn a_record_round_trips_private_and_atomically() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let record = sample();
        record.write(dir.path()).unwrap();
        assert_eq!(AdoptRecord::read(dir.path()).unwrap(), record);
        let mode = std::fs::metadata(dir.path().join(ADOPT_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);

        let mut changed = record.clone();
        changed
            .network
            .as_mut()
            .unwrap()
            .rules
            .push("other.test".into());
        changed.write(dir.path()).unwrap();
        assert_eq!(AdoptRecord::read(dir.path()).unwrap(), changed);
        // Only the record: no temporary file left beside it.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn another_version_or_a_readable_record_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let mut record = sample();
        record.version = 2;
        record.write(dir.path()).unwrap();
        let error = AdoptRecord::read(dir.path()).unwrap_err();
        assert!(
            matches!(error, RecordError::Version { version: 2, .. }),
            "{error}"
        );
        assert!(error.to_string().contains("version 2"), "{error}");

        // A link is not followed, even to a private file of this user.
        let path = dir.path().join(ADOPT_FILE);
        let elsewhere = dir.path().join("elsewhere.json");
        sample().write(dir.path()).unwrap();
        std::fs::rename(&path, &elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        assert!(matches!(
            AdoptRecord::read(dir.path()),
            Err(RecordError::Read { .. })
        ));
        std::fs::remove_file(&path).unwrap();

        sample().write(dir.path()).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert!(matches!(
            AdoptRecord::read(dir.path()),
            Err(RecordError::NotPrivate { .. })
        ));

        std::fs::write(&path, b"{").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(
            AdoptRecord::read(dir.path()),
            Err(RecordError::Parse { .. })
        ));
        let empty = tempfile::tempdir().unwrap();
        assert!(AdoptRecord::read(empty.path()).unwrap_err().is_missing());
    }

    #[test]
    fn defaults_written_before_the_directory_was_kept_still_read() {
        let older = r#"{"limits":{},"user":"nobody","env":[["LANG","C.UTF-8"]]}"#;
        let read: RecordedDefaults = serde_json::from_str(older).unwrap();
        assert_eq!(read.cwd, None);
        assert_eq!(read.user.as_deref(), Some("nobody"));
    }

    #[test]
    fn debug_never_shows_a_secret_or_the_ca_key() {
        let record = sample();
        let shown = format!("{record:?}");
        assert!(shown.contains("API_TOKEN"), "{shown}");
        assert!(!shown.contains("hunter2-secret-value"), "{shown}");
        assert!(!shown.contains("private-key-body"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
    }

    #[test]
    fn the_lifetime_ends_after_the_ceiling_plus_the_time_on_disk() {
        let mut record = sample();
        assert_eq!(
            record.ends_at(),
            Some(from_unix_ms(1_000_000 + 5_000 + 3_600_000))
        );
        assert_eq!(record.started_at(), from_unix_ms(1_000_000));
        record.policy.max_lifetime_ms = None;
        assert_eq!(record.ends_at(), None);
    }
}
