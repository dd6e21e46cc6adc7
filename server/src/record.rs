//! What the server keeps about each of its sandboxes beyond what the
//! library keeps about the machine: who owns it, its labels, the
//! environment it was created with, and how it was asked for. One file per
//! sandbox (`sandboxes/<id>.json` in the data directory, mode 0600, since
//! environment values may be credentials), written atomically, removed when
//! the sandbox ends; a restarted server reads them back to give the
//! sandboxes it adopts or restores their owners and labels again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use airlock_atomic_file::Mode;
use serde::{Deserialize, Serialize};

/// The record format this server writes and reads.
const VERSION: u32 = 1;

/// Errors reading or writing records.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("cannot {action} {}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not a sandbox record this server reads: {reason}", path.display())]
    Corrupt { path: PathBuf, reason: String },
}

/// One sandbox as the server knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub version: u32,
    pub id: String,
    /// The key that created it; `None`: the owner.
    pub owner: Option<String>,
    pub metadata: BTreeMap<String, String>,
    /// Every program and code context gets these.
    pub envs: BTreeMap<String, String>,
    /// The image's name ("" for none) and the template's.
    pub image: String,
    pub template: String,
    pub memory_mib: u32,
    pub vcpus: u32,
    pub created_at_ms: u64,
    /// Whether it has a network.
    pub network: bool,
    /// When it will be killed (0: never), in milliseconds since the Unix
    /// epoch.
    #[serde(default)]
    pub ends_at_ms: u64,
    /// The bound secrets' names and hosts (never their values).
    #[serde(default)]
    pub secrets: Vec<(String, Vec<String>)>,
    /// It came from the warm pool.
    #[serde(default)]
    pub pooled: bool,
    /// Guest ports the HTTP ingress serves without the traffic token.
    #[serde(default)]
    pub public_ports: Vec<u16>,
    /// The traffic token a request to any other port needs (empty in a
    /// record from before ingress: the server makes one on reading it).
    #[serde(default)]
    pub ingress_token: String,
    /// The named workspace it holds ("" for none, or a host path's).
    #[serde(default)]
    pub workspace: String,
    /// The snapshot it started from, by name ("" for none).
    #[serde(default)]
    pub snapshot: String,
}

impl Record {
    /// A record of this format.
    pub fn new(id: String) -> Record {
        Record {
            version: VERSION,
            id,
            owner: None,
            metadata: BTreeMap::new(),
            envs: BTreeMap::new(),
            image: String::new(),
            template: String::new(),
            memory_mib: 0,
            vcpus: 0,
            created_at_ms: 0,
            network: false,
            ends_at_ms: 0,
            secrets: Vec::new(),
            pooled: false,
            public_ports: Vec::new(),
            ingress_token: String::new(),
            workspace: String::new(),
            snapshot: String::new(),
        }
    }
}

/// The directory of records.
#[derive(Debug, Clone)]
pub struct Records {
    dir: PathBuf,
}

impl Records {
    /// Records in `dir`, made if missing (mode 0700).
    pub fn open(dir: PathBuf) -> Result<Records, RecordError> {
        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
            .create(&dir)
            .map_err(|source| RecordError::Io {
                action: "create",
                path: dir.clone(),
                source,
            })?;
        Ok(Records { dir })
    }

    fn path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    /// Writes `record` (replacing the one of its id) atomically and
    /// durably, mode 0600.
    pub fn write(&self, record: &Record) -> Result<(), RecordError> {
        let path = self.path(&record.id);
        let io = |action, source| RecordError::Io {
            action,
            path: path.clone(),
            source,
        };
        let bytes = serde_json::to_vec_pretty(record).map_err(|e| RecordError::Corrupt {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        airlock_atomic_file::write(&path, &bytes, Mode::Private).map_err(|e| io("write", e))
    }

    /// Removes the record of `id`, if there is one.
    pub fn remove(&self, id: &str) {
        match std::fs::remove_file(self.path(id)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => tracing::warn!(%error, id, "cannot remove a sandbox record"),
        }
    }

    /// Every readable record; unreadable ones are logged and skipped.
    pub fn load(&self) -> Vec<Record> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(error) => {
                tracing::warn!(%error, dir = %self.dir.display(), "cannot list sandbox records");
                return Vec::new();
            }
        };
        let mut records = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') || !name.ends_with(".json") {
                continue;
            }
            match read(&path) {
                Ok(record) => records.push(record),
                Err(error) => tracing::warn!(%error, "skipping a sandbox record"),
            }
        }
        records.sort_by(|a, b| a.id.cmp(&b.id));
        records
    }
}

fn read(path: &Path) -> Result<Record, RecordError> {
    let bytes = std::fs::read(path).map_err(|source| RecordError::Io {
        action: "read",
        path: path.to_owned(),
        source,
    })?;
    let record: Record = serde_json::from_slice(&bytes).map_err(|e| RecordError::Corrupt {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    if record.version != VERSION {
        return Err(RecordError::Corrupt {
            path: path.to_owned(),
            reason: format!("version {} (this server reads {VERSION})", record.version),
        });
    }
    Ok(record)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn records_round_trip_privately_and_bad_ones_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let records = Records::open(dir.path().join("sandboxes")).unwrap();
        let mut record = Record::new("sandbox-a".into());
        record.owner = Some("ci".into());
        record.metadata.insert("user".into(), "42".into());
        record.envs.insert("TOKEN".into(), "x".into());
        records.write(&record).unwrap();
        let mode = std::fs::metadata(dir.path().join("sandboxes/sandbox-a.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::write(dir.path().join("sandboxes/broken.json"), b"{").unwrap();
        assert_eq!(records.load(), vec![record]);
        records.remove("sandbox-a");
        records.remove("sandbox-a");
        assert!(records.load().is_empty());
    }
}
