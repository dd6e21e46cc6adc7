//! Saved sandboxes on disk.
//!
//! ```text
//! <dir>/                         mode 0700
//! <dir>/<id>/record.json         what the sandbox is (SavedRecord), 0600
//! <dir>/<id>/snapshot-<gen>      a snapshot file (see `file`), 0600; the
//!                                newest two generations are kept
//! ```
//!
//! A new snapshot becomes a generation only once complete, and the record
//! names it only after that: a crash at any point leaves the previous
//! generation and a record that names it. Loading takes the newest
//! generation that passes its checks, and says which it skipped and why.

use std::fs::File;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use airlock_proto::v1::CheckResponse;
use serde::{Deserialize, Serialize};

use super::file::{self, SnapshotHeader, Writing};
use super::SavedError;
use crate::vmm::{AgentPort, Disk, GuestMemory, QemuConfig, SerialPort, VmPaths};
use crate::Accel;

const RECORD: &str = "record.json";
const SNAPSHOT_PREFIX: &str = "snapshot-";
/// How many generations of snapshots a saved sandbox keeps.
const KEEP_GENERATIONS: usize = 2;

/// Everything needed to start QEMU again for a saved sandbox: the same
/// machine, waiting for its state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedVm {
    /// `kvm` or `tcg`.
    pub accel: String,
    /// QEMU's `-cpu` model, which a restore must give the guest again: its
    /// kernel chose its copy routines and paging mode from the CPU it
    /// booted on. `None` in records written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    pub memory_mib: u32,
    pub vcpus: u32,
    pub kernel: PathBuf,
    pub initramfs: PathBuf,
    pub kernel_cmdline: String,
    pub disks: Vec<SavedDisk>,
    /// Extra virtio-serial ports: (name, host socket).
    pub serial_ports: Vec<(String, PathBuf)>,
}

/// A disk of a saved sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedDisk {
    pub id: String,
    pub path: PathBuf,
    pub read_only: bool,
}

/// Time a saved sandbox had used when it was last saved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SavedUsage {
    pub wall_ms: u64,
    pub running_ms: u64,
    pub guest_cpu_ms: u64,
    /// Time spent on disk before this save (not counted by the lifetime
    /// ceiling).
    #[serde(default)]
    pub on_disk_ms: u64,
    /// When it was saved (Unix time, ms): time on disk counts as paused.
    pub saved_at_unix_ms: u64,
}

/// What `record.json` says about a saved sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedRecord {
    pub id: String,
    pub vm: SavedVm,
    pub agent_version: String,
    pub protocol_revision: u32,
    /// The workspace disk, locked again on restore.
    pub workspace: Option<PathBuf>,
    pub usage: SavedUsage,
    /// Snapshot generations on disk, oldest first.
    pub generations: Vec<u64>,
}

impl SavedRecord {
    /// The record of sandbox `id`, never saved yet, running `vm` with the
    /// agent that answered `health`.
    pub(crate) fn new(
        id: &str,
        vm: SavedVm,
        health: &CheckResponse,
        workspace: Option<PathBuf>,
    ) -> Self {
        SavedRecord {
            id: id.to_owned(),
            vm,
            agent_version: health.agent_version.clone(),
            protocol_revision: health.protocol_revision,
            workspace,
            usage: SavedUsage::default(),
            generations: Vec::new(),
        }
    }
}

/// A snapshot that passed its checks, opened at its stream.
#[derive(Debug)]
pub(crate) struct GoodSnapshot {
    pub file: File,
    pub header: SnapshotHeader,
    pub generation: u64,
    /// Newer generations that failed their checks, with why.
    pub skipped: Vec<(u64, SavedError)>,
}

/// The directory of saved sandboxes.
#[derive(Debug, Clone)]
pub struct SavedStore {
    dir: PathBuf,
}

impl SavedStore {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        SavedStore { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn sandbox_dir(&self, id: &str) -> PathBuf {
        self.dir.join(id)
    }

    fn snapshot_path(&self, id: &str, generation: u64) -> PathBuf {
        self.sandbox_dir(id)
            .join(format!("{SNAPSHOT_PREFIX}{generation}"))
    }

    /// The record of the saved sandbox `id`.
    pub fn record(&self, id: &str) -> Result<SavedRecord, SavedError> {
        if !valid_id(id) {
            return Err(SavedError::NotSaved { id: id.to_owned() });
        }
        let path = self.sandbox_dir(id).join(RECORD);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Err(SavedError::NotSaved { id: id.to_owned() })
            }
            Err(source) => return Err(SavedError::Io { path, source }),
        };
        let record: SavedRecord =
            serde_json::from_slice(&bytes).map_err(|e| SavedError::Corrupt {
                path: path.clone(),
                reason: e.to_string(),
            })?;
        // Its snapshots and the next save are found by the record's id:
        // one that names another sandbox would act on that one's files.
        if record.id != id {
            return Err(SavedError::Corrupt {
                path,
                reason: format!("the record names sandbox {:?}", record.id),
            });
        }
        // The next save takes the number after the last and drops the
        // oldest: out of order, it would drop the snapshot it just wrote.
        if !record.generations.windows(2).all(|pair| pair[0] < pair[1]) {
            return Err(SavedError::Corrupt {
                path,
                reason: format!(
                    "its generations {:?} are not in increasing order",
                    record.generations
                ),
            });
        }
        Ok(record)
    }

    /// Whether a sandbox `id` is saved here (with a readable record).
    pub fn contains(&self, id: &str) -> bool {
        self.record(id).is_ok()
    }

    /// Every saved sandbox with a readable record, by id; unreadable ones
    /// are logged and skipped.
    pub fn list(&self) -> Result<Vec<SavedRecord>, SavedError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(SavedError::Io {
                    path: self.dir.clone(),
                    source,
                })
            }
        };
        let mut records: Vec<SavedRecord> = entries
            .filter_map(|entry| entry.ok())
            .filter_map(|entry| {
                let id = entry.file_name().to_string_lossy().into_owned();
                match self.record(&id) {
                    Ok(record) => Some(record),
                    Err(SavedError::NotSaved { .. }) => None,
                    Err(error) => {
                        tracing::warn!(id, error = %crate::error_chain(&error), "unreadable saved sandbox");
                        None
                    }
                }
            })
            .collect();
        records.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(records)
    }

    /// Starts the next snapshot of `record`'s sandbox (creating its
    /// directory, private, if needed). Returns the generation and the file
    /// QEMU writes into.
    pub(crate) fn begin(&self, record: &SavedRecord) -> Result<(u64, Writing), SavedError> {
        let dir = self.sandbox_dir(&record.id);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(SavedError::io(&dir))?;
        let generation = match record.generations.last() {
            None => 1,
            Some(last) => last.checked_add(1).ok_or_else(|| SavedError::Corrupt {
                path: dir.join(RECORD),
                reason: format!("generation {last} has no next one"),
            })?,
        };
        let writing = Writing::create(&self.snapshot_path(&record.id, generation))?;
        Ok((generation, writing))
    }

    /// Completes a snapshot begun with [`begin`](SavedStore::begin): the
    /// file goes into place, then the record names it, then generations
    /// beyond the newest two are removed.
    pub(crate) fn commit(
        &self,
        record: &mut SavedRecord,
        generation: u64,
        writing: Writing,
        header: SnapshotHeader,
    ) -> Result<SnapshotHeader, SavedError> {
        let header = writing.commit(header)?;
        let mut next = record.clone();
        next.generations.push(generation);
        let dropped: Vec<u64> = if next.generations.len() > KEEP_GENERATIONS {
            next.generations
                .drain(..next.generations.len() - KEEP_GENERATIONS)
                .collect()
        } else {
            Vec::new()
        };
        self.write_record(&next)?;
        *record = next;
        for old in dropped {
            self.remove_generation(&record.id, old);
        }
        Ok(header)
    }

    /// Removes one snapshot generation's file (the record no longer names
    /// it).
    pub(crate) fn remove_generation(&self, id: &str, generation: u64) {
        let path = self.snapshot_path(id, generation);
        if let Err(error) = std::fs::remove_file(&path) {
            if error.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(path = %path.display(), %error, "cannot remove a refused snapshot");
            }
        }
    }

    /// Writes `record` (atomically) without touching its snapshots.
    pub(crate) fn write_record(&self, record: &SavedRecord) -> Result<(), SavedError> {
        let bytes =
            serde_json::to_vec_pretty(record).map_err(|e| SavedError::Encode(e.to_string()))?;
        file::write_atomically(&self.sandbox_dir(&record.id).join(RECORD), &bytes)
    }

    /// Copies the newest good generation of `record` (as
    /// [`open_newest`](SavedStore::open_newest) finds it) to `target`, a
    /// new file, header and all. Returns its header.
    pub(crate) fn copy_newest(
        &self,
        record: &SavedRecord,
        qemu_version: &str,
        target: &Path,
    ) -> Result<SnapshotHeader, SavedError> {
        let good = self.open_newest(record, qemu_version)?;
        let source = self.snapshot_path(&record.id, good.generation);
        file::copy_new(&source, target)?;
        Ok(good.header)
    }

    /// The newest generation of `record` that passes its checks and was
    /// written by QEMU `qemu_version` (the one this host runs).
    pub(crate) fn open_newest(
        &self,
        record: &SavedRecord,
        qemu_version: &str,
    ) -> Result<GoodSnapshot, SavedError> {
        let mut skipped = Vec::new();
        for &generation in record.generations.iter().rev() {
            let path = self.snapshot_path(&record.id, generation);
            let opened = file::open(&path).and_then(|(file, header)| {
                if header.qemu_version == qemu_version {
                    Ok((file, header))
                } else {
                    Err(SavedError::OtherQemu {
                        path: path.clone(),
                        written_by: header.qemu_version,
                        here: qemu_version.to_owned(),
                    })
                }
            });
            match opened {
                Ok((file, header)) => {
                    return Ok(GoodSnapshot {
                        file,
                        header,
                        generation,
                        skipped,
                    })
                }
                Err(error) => {
                    tracing::warn!(
                        id = record.id,
                        generation,
                        error = %crate::error_chain(&error),
                        "snapshot refused"
                    );
                    skipped.push((generation, error));
                }
            }
        }
        Err(SavedError::NoGoodSnapshot {
            id: record.id.clone(),
            reasons: skipped
                .iter()
                .map(|(generation, error)| {
                    format!("generation {generation}: {}", crate::error_chain(error))
                })
                .collect::<Vec<_>>()
                .join("; "),
        })
    }

    /// What the saved sandbox `id` takes on disk: the allocated blocks of
    /// its files (0 when it is not saved here).
    pub fn disk_bytes(&self, id: &str) -> u64 {
        use std::os::unix::fs::MetadataExt;
        if !valid_id(id) {
            return 0;
        }
        let Ok(entries) = std::fs::read_dir(self.sandbox_dir(id)) else {
            return 0;
        };
        entries
            .filter_map(|entry| entry.ok()?.metadata().ok())
            .filter(|metadata| metadata.is_file())
            .map(|metadata| metadata.blocks() * 512)
            .sum()
    }

    /// Removes the saved sandbox `id` and its snapshots.
    pub fn remove(&self, id: &str) -> Result<(), SavedError> {
        if !valid_id(id) {
            return Err(SavedError::NotSaved { id: id.to_owned() });
        }
        let dir = self.sandbox_dir(id);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                Err(SavedError::NotSaved { id: id.to_owned() })
            }
            Err(source) => Err(SavedError::Io { path: dir, source }),
        }
    }

    /// Creates the store's directory, private.
    pub(crate) fn ensure(&self) -> Result<(), SavedError> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(SavedError::io(&self.dir))
    }
}

/// A sandbox id names one directory in the store, nothing else.
fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// The `-cpu` model of machines saved before records named it: the
/// host's under KVM, and TCG's whole `max` model, with ERMS and 5-level
/// paging, under TCG.
fn unrecorded_cpu_model(accel: Accel) -> &'static str {
    match accel {
        Accel::Kvm => "host",
        Accel::Tcg | Accel::Auto => "max",
    }
}

impl SavedVm {
    /// The QEMU command line's inputs for this machine in `paths`, waiting
    /// for its state; its RAM comes whole from the snapshot.
    pub(crate) fn qemu_config(&self, paths: &VmPaths) -> Result<QemuConfig, SavedError> {
        let accel: Accel = self
            .accel
            .parse()
            .map_err(|e: crate::ParseAccelError| SavedError::Encode(e.to_string()))?;
        let disks = self
            .disks
            .iter()
            .map(|disk| {
                Ok(Disk {
                    id: Disk::known_id(&disk.id)
                        .ok_or_else(|| SavedError::Encode(format!("unknown disk {:?}", disk.id)))?,
                    path: disk.path.clone(),
                    read_only: disk.read_only,
                })
            })
            .collect::<Result<Vec<_>, SavedError>>()?;
        let cpu = match &self.cpu {
            Some(cpu) => cpu.clone(),
            None => unrecorded_cpu_model(accel).to_owned(),
        };
        Ok(QemuConfig {
            accel,
            cpu,
            memory_mib: self.memory_mib,
            vcpus: self.vcpus,
            kernel: self.kernel.clone(),
            initramfs: self.initramfs.clone(),
            kernel_cmdline: self.kernel_cmdline.clone(),
            agent_port: AgentPort::Serial(paths.agent_socket.clone()),
            memory: GuestMemory::Private,
            incoming: true,
            console_log: paths.console_log.clone(),
            qmp_socket: paths.qmp_socket.clone(),
            disks,
            serial_ports: self
                .serial_ports
                .iter()
                .map(|(name, socket)| SerialPort {
                    name: name.clone(),
                    socket: socket.clone(),
                })
                .collect(),
        })
    }

    /// The machine a running QEMU config describes.
    pub(crate) fn of(config: &QemuConfig) -> Self {
        SavedVm {
            accel: config.accel.qemu_name().to_owned(),
            cpu: Some(config.cpu.clone()),
            memory_mib: config.memory_mib,
            vcpus: config.vcpus,
            kernel: config.kernel.clone(),
            initramfs: config.initramfs.clone(),
            kernel_cmdline: config.kernel_cmdline.clone(),
            disks: config
                .disks
                .iter()
                .map(|disk| SavedDisk {
                    id: disk.id.to_owned(),
                    path: disk.path.clone(),
                    read_only: disk.read_only,
                })
                .collect(),
            serial_ports: config
                .serial_ports
                .iter()
                .map(|port| (port.name.clone(), port.socket.clone()))
                .collect(),
        }
    }
}

/// Now, as Unix milliseconds.
pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::io::Write;

    use super::*;

    fn record(id: &str) -> SavedRecord {
        SavedRecord {
            id: id.into(),
            vm: SavedVm {
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
            agent_version: "0.1.0".into(),
            protocol_revision: 7,
            workspace: None,
            usage: SavedUsage::default(),
            generations: Vec::new(),
        }
    }

    fn header(id: &str) -> SnapshotHeader {
        SnapshotHeader {
            format: super::super::SNAPSHOT_FORMAT,
            qemu_version: "7.2.22".into(),
            stream_bytes: 0,
            memory_mib: 256,
            sandbox_id: id.into(),
            created_unix_secs: 0,
        }
    }

    fn save(store: &SavedStore, record: &mut SavedRecord, stream: &[u8]) -> u64 {
        let (generation, writing) = store.begin(record).unwrap();
        writing.file().write_all(stream).unwrap();
        store
            .commit(record, generation, writing, header(&record.id))
            .unwrap();
        generation
    }

    #[test]
    fn a_restore_gives_the_guest_the_cpu_it_booted_on() {
        let paths = VmPaths::in_dir(Path::new("/s"));
        let vm = record("a").vm;
        assert_eq!(vm.qemu_config(&paths).unwrap().cpu, "max,erms=off,la57=off");
        assert_eq!(SavedVm::of(&vm.qemu_config(&paths).unwrap()), vm);

        // A record from before the model was recorded.
        let mut json: serde_json::Value = serde_json::to_value(&vm).unwrap();
        json.as_object_mut().unwrap().remove("cpu");
        let old: SavedVm = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(old.cpu, None);
        assert_eq!(old.qemu_config(&paths).unwrap().cpu, "max");
        json["accel"] = "kvm".into();
        let old: SavedVm = serde_json::from_value(json).unwrap();
        assert_eq!(old.qemu_config(&paths).unwrap().cpu, "host");
    }

    #[test]
    fn generations_go_up_and_only_two_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = SavedStore::new(dir.path().join("saved"));
        store.ensure().unwrap();
        let mut saved = record("sandbox-a");
        assert_eq!(save(&store, &mut saved, b"one"), 1);
        assert_eq!(save(&store, &mut saved, b"two"), 2);
        assert_eq!(save(&store, &mut saved, b"three"), 3);
        assert_eq!(saved.generations, [2, 3]);
        assert_eq!(store.record("sandbox-a").unwrap(), saved);
        assert!(!store.snapshot_path("sandbox-a", 1).exists());
        let newest = store.open_newest(&saved, "7.2.22").unwrap();
        assert_eq!((newest.generation, newest.header.stream_bytes), (3, 5));
        assert!(newest.skipped.is_empty());
        assert_eq!(store.list().unwrap(), [saved]);
    }

    #[test]
    fn a_truncated_newest_snapshot_falls_back_to_the_one_before() {
        let dir = tempfile::tempdir().unwrap();
        let store = SavedStore::new(dir.path());
        let mut saved = record("sandbox-b");
        save(&store, &mut saved, b"older");
        save(&store, &mut saved, b"newer");
        let newest = std::fs::OpenOptions::new()
            .write(true)
            .open(store.snapshot_path("sandbox-b", 2))
            .unwrap();
        newest.set_len(4100).unwrap();
        let good = store.open_newest(&saved, "7.2.22").unwrap();
        assert_eq!(good.generation, 1);
        assert_eq!(good.skipped.len(), 1);
        assert!(good.skipped[0].1.to_string().contains("its header says"));

        // Another QEMU's snapshot is refused as well.
        let error = store.open_newest(&saved, "8.0.0").unwrap_err().to_string();
        assert!(error.contains("written by QEMU 7.2.22"), "{error}");

        std::fs::write(store.snapshot_path("sandbox-b", 1), b"junk").unwrap();
        let error = store.open_newest(&saved, "7.2.22").unwrap_err().to_string();
        assert!(
            error.contains("generation 2") && error.contains("generation 1"),
            "{error}"
        );
    }

    #[test]
    fn unknown_or_odd_ids_are_not_saved_sandboxes() {
        let dir = tempfile::tempdir().unwrap();
        let store = SavedStore::new(dir.path());
        for id in ["nope", "../etc", ".hidden", ""] {
            assert!(
                matches!(store.record(id), Err(SavedError::NotSaved { .. })),
                "{id}"
            );
            assert!(matches!(store.remove(id), Err(SavedError::NotSaved { .. })));
        }
        assert!(store.list().unwrap().is_empty());
    }

    /// Found by the `saved_file` fuzz target: a record whose `id` names
    /// another sandbox was loaded for this one, and a restore and the next
    /// save then used that sandbox's files.
    #[test]
    fn a_record_naming_another_sandbox_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = SavedStore::new(dir.path());
        let mut other = record("sandbox-b");
        save(&store, &mut other, b"b's");
        std::fs::create_dir_all(store.sandbox_dir("sandbox-a")).unwrap();
        std::fs::write(
            store.sandbox_dir("sandbox-a").join(RECORD),
            serde_json::to_vec(&other).unwrap(),
        )
        .unwrap();
        let error = store.record("sandbox-a").unwrap_err();
        assert!(
            matches!(&error, SavedError::Corrupt { reason, .. } if reason.contains("sandbox-b")),
            "{error}"
        );
        assert_eq!(store.list().unwrap(), [other]);
    }

    /// Found by the `saved_file` fuzz target: with a record's generations
    /// out of order (`[1, 0]`), the next save wrote snapshot 1 and then
    /// removed it as the oldest, leaving a record that names a missing file.
    #[test]
    fn generations_out_of_order_are_refused_and_the_last_one_has_a_next() {
        let dir = tempfile::tempdir().unwrap();
        let store = SavedStore::new(dir.path());
        let mut saved = record("sandbox-c");
        save(&store, &mut saved, b"one");
        let mut shuffled = saved.clone();
        shuffled.generations = vec![1, 0];
        store.write_record(&shuffled).unwrap();
        let error = store.record("sandbox-c").unwrap_err();
        assert!(error.to_string().contains("increasing order"), "{error}");

        let mut last = saved.clone();
        last.generations = vec![u64::MAX];
        assert!(matches!(
            store.begin(&last),
            Err(SavedError::Corrupt { .. })
        ));
    }

    #[test]
    fn a_machine_round_trips_through_its_qemu_config() {
        let vm = record("x").vm;
        let paths = VmPaths::in_dir(Path::new("/run/sandbox-x"));
        let config = vm.qemu_config(&paths).unwrap();
        assert!(config.incoming);
        assert_eq!(config.memory, GuestMemory::Private);
        assert_eq!(SavedVm::of(&config), vm);
    }
}
