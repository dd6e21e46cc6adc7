//! [`KeyStore`]: the API keys' hashes, names and quotas, on disk.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use airlock_atomic_file::Mode;
use base64::Engine;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use airlock_api::auth::{self, KEY_BYTES, KEY_PREFIX};
use airlock_api::limits::{
    DEFAULT_MAX_SNAPSHOTS, DEFAULT_MAX_STORAGE_MIB, DEFAULT_MAX_WORKSPACES,
    DEFAULT_MAX_WORKSPACE_MIB, MAX_KEY_NAME_BYTES,
};

/// The file's name in the data directory.
const FILE: &str = "keys.json";
/// The file format this server writes and reads.
const VERSION: u32 = 1;

/// Errors of the key store.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot {action} {}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not a key file this server reads: {reason}", path.display())]
    Corrupt { path: PathBuf, reason: String },
    #[error("a key named {0} exists already")]
    Exists(String),
    #[error("no key named {0}")]
    NoSuchKey(String),
    #[error(
        "a key's name is 1 to {MAX_KEY_NAME_BYTES} bytes of letters, digits, '.', '_' and '-', \
         and not {OWNER_NAME}, '.' or '..'"
    )]
    BadName,
}

/// What a key may use at once. Zero means no limit of the key's own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quota {
    /// Live sandboxes.
    pub max_sandboxes: u32,
    /// The sum of their memory, in MiB.
    pub max_memory_mib: u64,
    /// Calls in flight (0: the server's default).
    pub max_concurrent_calls: u32,
    /// Named workspaces (0: [`DEFAULT_MAX_WORKSPACES`]).
    #[serde(default)]
    pub max_workspaces: u32,
    /// The sum of their sizes, MiB (0: [`DEFAULT_MAX_WORKSPACE_MIB`]).
    #[serde(default)]
    pub max_workspace_mib: u64,
    /// Snapshots (0: [`DEFAULT_MAX_SNAPSHOTS`]).
    #[serde(default)]
    pub max_snapshots: u32,
    /// What its snapshots and templates take on disk, MiB (0:
    /// [`DEFAULT_MAX_STORAGE_MIB`]).
    #[serde(default)]
    pub max_storage_mib: u64,
}

impl Quota {
    /// The most named workspaces the key may keep.
    pub fn workspaces(&self) -> u32 {
        match self.max_workspaces {
            0 => DEFAULT_MAX_WORKSPACES,
            n => n,
        }
    }

    /// The most bytes its named workspaces may take in all (their sizes).
    pub fn workspace_bytes(&self) -> u64 {
        let mib = match self.max_workspace_mib {
            0 => DEFAULT_MAX_WORKSPACE_MIB,
            n => n,
        };
        mib.saturating_mul(1 << 20)
    }

    /// The most snapshots the key may keep.
    pub fn snapshots(&self) -> u32 {
        match self.max_snapshots {
            0 => DEFAULT_MAX_SNAPSHOTS,
            n => n,
        }
    }

    /// The most bytes its snapshots and templates may take on disk.
    pub fn storage_bytes(&self) -> u64 {
        let mib = match self.max_storage_mib {
            0 => DEFAULT_MAX_STORAGE_MIB,
            n => n,
        };
        mib.saturating_mul(1 << 20)
    }
}

/// A key as listed: never its secret, never its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyInfo {
    pub name: Arc<str>,
    pub quota: Quota,
    pub created_at_ms: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredKey {
    name: String,
    /// SHA-256 of the key, hex.
    sha256: String,
    quota: Quota,
    created_at_ms: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct KeyFile {
    version: u32,
    keys: Vec<StoredKey>,
}

/// The server's API keys, loaded once and written through on each change.
#[derive(Debug)]
pub struct KeyStore {
    path: PathBuf,
    keys: Mutex<Vec<StoredKey>>,
}

impl KeyStore {
    /// The store in `data_dir` (made if missing, mode 0700), with the keys
    /// its file holds (none if there is no file yet).
    pub fn open(data_dir: &Path) -> Result<KeyStore, KeyError> {
        let io = |action, path: &Path| {
            let path = path.to_owned();
            move |source| KeyError::Io {
                action,
                path,
                source,
            }
        };
        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
            .create(data_dir)
            .map_err(io("create", data_dir))?;
        let path = data_dir.join(FILE);
        let keys = match std::fs::read(&path) {
            Ok(bytes) => {
                let file: KeyFile =
                    serde_json::from_slice(&bytes).map_err(|e| KeyError::Corrupt {
                        path: path.clone(),
                        reason: e.to_string(),
                    })?;
                if file.version != VERSION {
                    return Err(KeyError::Corrupt {
                        path,
                        reason: format!("version {} (this server reads {VERSION})", file.version),
                    });
                }
                file.keys
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io("read", &path)(e)),
        };
        Ok(KeyStore {
            path,
            keys: Mutex::new(keys),
        })
    }

    fn keys(&self) -> MutexGuard<'_, Vec<StoredKey>> {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes a key named `name`; returns it with its secret, which is not
    /// kept and cannot be shown again.
    pub fn create(&self, name: &str, quota: Quota) -> Result<(KeyInfo, String), KeyError> {
        if !is_valid_name(name) {
            return Err(KeyError::BadName);
        }
        let mut keys = self.keys();
        if keys.iter().any(|key| key.name == name) {
            return Err(KeyError::Exists(name.to_owned()));
        }
        let secret = new_secret().map_err(|source| KeyError::Io {
            action: "read random bytes from",
            path: airlock::random::SOURCE.into(),
            source,
        })?;
        let stored = StoredKey {
            name: name.to_owned(),
            sha256: hash(&secret),
            quota,
            created_at_ms: now_ms(),
        };
        let info = info(&stored);
        keys.push(stored);
        if let Err(error) = self.write(&keys) {
            keys.pop();
            return Err(error);
        }
        Ok((info, secret))
    }

    /// Every key, by name.
    pub fn list(&self) -> Vec<KeyInfo> {
        let mut all: Vec<KeyInfo> = self.keys().iter().map(info).collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// The key named `name`.
    pub fn get(&self, name: &str) -> Option<KeyInfo> {
        self.keys().iter().find(|key| key.name == name).map(info)
    }

    /// Removes the key named `name`: it authenticates nothing from now on.
    pub fn remove(&self, name: &str) -> Result<(), KeyError> {
        let mut keys = self.keys();
        let Some(at) = keys.iter().position(|key| key.name == name) else {
            return Err(KeyError::NoSuchKey(name.to_owned()));
        };
        let removed = keys.remove(at);
        if let Err(error) = self.write(&keys) {
            keys.insert(at, removed);
            return Err(error);
        }
        Ok(())
    }

    /// The key a presented secret is, if any: its hash is compared with
    /// every stored hash in constant time, so the time taken tells nothing
    /// of which key, or how much of one, matched.
    pub fn verify(&self, secret: &str) -> Option<KeyInfo> {
        if !auth::is_well_formed(secret) {
            return None;
        }
        let presented = hash(secret);
        let keys = self.keys();
        let mut found = None;
        for key in keys.iter() {
            let same: bool = key.sha256.as_bytes().ct_eq(presented.as_bytes()).into();
            if same {
                found = Some(info(key));
            }
        }
        found
    }

    /// Writes `keys` beside the file and renames it into place, atomically
    /// and durably, mode 0600.
    fn write(&self, keys: &[StoredKey]) -> Result<(), KeyError> {
        let io = |action, source| KeyError::Io {
            action,
            path: self.path.clone(),
            source,
        };
        let file = KeyFile {
            version: VERSION,
            keys: keys.to_vec(),
        };
        let bytes = serde_json::to_vec_pretty(&file).map_err(|e| KeyError::Corrupt {
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        airlock_atomic_file::write(&self.path, &bytes, Mode::Private).map_err(|e| io("write", e))
    }
}

fn info(key: &StoredKey) -> KeyInfo {
    KeyInfo {
        name: Arc::from(key.name.as_str()),
        quota: key.quota,
        created_at_ms: key.created_at_ms,
    }
}

/// The name the owner's own named workspaces are kept under, beside the
/// keys' (so no key may have it).
pub const OWNER_NAME: &str = "_owner";

/// Whether `name` can name a key: a directory name of its own under the
/// workspaces' (never `.`, `..` or the owner's).
pub fn is_valid_name(name: &str) -> bool {
    !matches!(name, "." | ".." | OWNER_NAME)
        && !name.is_empty()
        && name.len() <= MAX_KEY_NAME_BYTES
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// A new key: the prefix and 256 random bits in base64url.
fn new_secret() -> std::io::Result<String> {
    let bytes = airlock::random::bytes::<KEY_BYTES>()?;
    let encoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    Ok(format!("{KEY_PREFIX}{encoded}"))
}

fn hash(secret: &str) -> String {
    let digest = Sha256::digest(secret.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_key_is_shown_once_and_kept_only_as_a_hash() {
        let dir = tempfile::tempdir().unwrap();
        let store = KeyStore::open(dir.path()).unwrap();
        let (info, secret) = store.create("ci", Quota::default()).unwrap();
        assert_eq!(&*info.name, "ci");
        assert!(auth::is_well_formed(&secret), "{secret}");
        let file = std::fs::read_to_string(dir.path().join(FILE)).unwrap();
        assert!(!file.contains(&secret[KEY_PREFIX.len()..]), "{file}");
        assert!(file.contains(&hash(&secret)));
        let mode = std::fs::metadata(dir.path().join(FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(store.verify(&secret).map(|k| k.name), Some(info.name));
    }

    #[test]
    fn wrong_removed_and_malformed_keys_verify_as_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = KeyStore::open(dir.path()).unwrap();
        let (_, alice) = store.create("alice", Quota::default()).unwrap();
        let (_, bob) = store.create("bob", Quota::default()).unwrap();
        assert_ne!(alice, bob);
        let mut wrong = alice.clone().into_bytes();
        let last = wrong.len() - 1;
        wrong[last] = if wrong[last] == b'A' { b'B' } else { b'A' };
        assert!(store.verify(&String::from_utf8(wrong).unwrap()).is_none());
        assert!(store.verify("ak_short").is_none());
        assert!(store.verify("").is_none());
        store.remove("alice").unwrap();
        assert!(store.verify(&alice).is_none());
        assert_eq!(store.verify(&bob).map(|k| k.name), Some("bob".into()));
        assert!(matches!(store.remove("alice"), Err(KeyError::NoSuchKey(_))));
    }

    #[test]
    fn keys_survive_a_restart_and_names_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let quota = Quota {
            max_sandboxes: 2,
            max_memory_mib: 1024,
            max_concurrent_calls: 0,
            max_workspaces: 3,
            max_workspace_mib: 512,
            max_snapshots: 4,
            max_storage_mib: 2048,
        };
        let secret = {
            let store = KeyStore::open(dir.path()).unwrap();
            assert!(matches!(
                store.create("bad name", quota),
                Err(KeyError::BadName)
            ));
            assert!(matches!(store.create("", quota), Err(KeyError::BadName)));
            for taken in ["_owner", ".", ".."] {
                assert!(
                    matches!(store.create(taken, quota), Err(KeyError::BadName)),
                    "{taken}"
                );
            }
            let (_, secret) = store.create("ci", quota).unwrap();
            assert!(matches!(
                store.create("ci", quota),
                Err(KeyError::Exists(_))
            ));
            secret
        };
        let store = KeyStore::open(dir.path()).unwrap();
        let listed = store.list();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].quota, quota);
        assert!(store.verify(&secret).is_some());
    }

    #[test]
    fn a_key_file_from_before_workspace_quotas_gets_the_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let file = r#"{"version": 1, "keys": [{"name": "old", "sha256": "00",
            "quota": {"max_sandboxes": 1, "max_memory_mib": 0, "max_concurrent_calls": 0},
            "created_at_ms": 1}]}"#;
        std::fs::write(dir.path().join(FILE), file).unwrap();
        let store = KeyStore::open(dir.path()).unwrap();
        let quota = store.get("old").unwrap().quota;
        assert_eq!(quota.max_sandboxes, 1);
        assert_eq!(quota.workspaces(), DEFAULT_MAX_WORKSPACES);
        assert_eq!(quota.workspace_bytes(), DEFAULT_MAX_WORKSPACE_MIB << 20);
    }

    #[test]
    fn a_file_from_another_version_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE), br#"{"version": 99, "keys": []}"#).unwrap();
        let error = KeyStore::open(dir.path()).unwrap_err();
        assert!(error.to_string().contains("version 99"), "{error}");
    }
}
