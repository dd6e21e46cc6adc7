//! [`Hooks`]: the registered webhooks. A principal's own (a key's, or the
//! owner's) are kept in `hooks.json` (mode 0600: it holds their secrets),
//! written atomically on each change; the server-wide ones come from
//! `airlock serve --webhook URL` at each start, with ids from their URLs
//! and one secret kept in `server.secret` beside it (made on first use;
//! the owner reads it there).

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use airlock_atomic_file::Mode;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::error::HooksError;
use super::sign;
use crate::events::{Event, EventKind};

/// Webhooks a principal may have.
pub const MAX_PER_PRINCIPAL: usize = 8;

/// One webhook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hook {
    /// `wh_` and 16 hex digits.
    pub id: String,
    pub url: String,
    /// The key it belongs to; `None`: the owner's (or server-wide).
    pub owner: Option<String>,
    #[serde(default)]
    pub server_wide: bool,
    pub secret: String,
    /// Only these kinds (none: all).
    #[serde(default)]
    pub kinds: Vec<EventKind>,
    pub created_at_ms: u64,
}

impl Hook {
    /// Whether `event` is for this webhook: its owner's sandboxes' (every
    /// sandbox's for the owner's and server-wide ones), of its kinds.
    pub fn wants(&self, event: &Event) -> bool {
        let whose = self.server_wide
            || self.owner.is_none()
            || self.owner.as_deref() == event.owner.as_deref();
        whose && (self.kinds.is_empty() || self.kinds.contains(&event.kind))
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Stored {
    hooks: Vec<Hook>,
}

/// The webhooks, the stored and the server-wide.
#[derive(Debug)]
pub struct Hooks {
    path: PathBuf,
    hooks: Mutex<Vec<Hook>>,
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> HooksError {
    let path = path.to_owned();
    move |source| HooksError::Io {
        action,
        path,
        source,
    }
}

/// The id of a server-wide webhook of `url`.
fn server_id(url: &str) -> String {
    let digest = Sha256::digest(url.as_bytes());
    let mut id = String::from("wh_");
    for byte in &digest[..8] {
        id.push_str(&format!("{byte:02x}"));
    }
    id
}

/// A new id for a principal's webhook.
pub fn new_id() -> Result<String, HooksError> {
    Ok(format!(
        "wh_{}",
        airlock::random::hex::<8>().map_err(HooksError::Secret)?
    ))
}

impl Hooks {
    /// The webhooks stored in `dir`, and the server-wide `urls` (checked
    /// before) signed with the secret in `dir/server.secret`.
    pub fn open(dir: &Path, urls: &[String], now_ms: u64) -> Result<Hooks, HooksError> {
        std::fs::create_dir_all(dir).map_err(io("make", dir))?;
        let path = dir.join("hooks.json");
        let mut hooks = match std::fs::read(&path) {
            Ok(bytes) => {
                serde_json::from_slice::<Stored>(&bytes)
                    .map_err(|source| HooksError::Corrupt {
                        path: path.clone(),
                        source,
                    })?
                    .hooks
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(error) => return Err(io("read", &path)(error)),
        };
        hooks.retain(|hook| !hook.server_wide);
        if !urls.is_empty() {
            let secret = server_secret(&dir.join("server.secret"))?;
            for url in urls {
                hooks.push(Hook {
                    id: server_id(url),
                    url: url.clone(),
                    owner: None,
                    server_wide: true,
                    secret: secret.clone(),
                    kinds: Vec::new(),
                    created_at_ms: now_ms,
                });
            }
        }
        Ok(Hooks {
            path,
            hooks: Mutex::new(hooks),
        })
    }

    fn hooks(&self) -> MutexGuard<'_, Vec<Hook>> {
        self.hooks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn save(&self, hooks: &[Hook]) -> Result<(), HooksError> {
        let stored = Stored {
            hooks: hooks.iter().filter(|h| !h.server_wide).cloned().collect(),
        };
        // Serializing strings and numbers does not fail.
        let bytes = serde_json::to_vec_pretty(&stored).unwrap_or_default();
        airlock_atomic_file::write(&self.path, &bytes, Mode::Private)
            .map_err(io("write", &self.path))
    }

    /// Every webhook.
    pub fn all(&self) -> Vec<Hook> {
        self.hooks().clone()
    }

    /// The webhook `id`.
    pub fn get(&self, id: &str) -> Option<Hook> {
        self.hooks().iter().find(|hook| hook.id == id).cloned()
    }

    /// The webhook of `owner` with `url`, if it has one.
    pub fn find(&self, owner: Option<&str>, url: &str) -> Option<Hook> {
        self.hooks()
            .iter()
            .find(|h| !h.server_wide && h.owner.as_deref() == owner && h.url == url)
            .cloned()
    }

    /// How many webhooks `owner` has.
    pub fn count(&self, owner: Option<&str>) -> usize {
        self.hooks()
            .iter()
            .filter(|h| !h.server_wide && h.owner.as_deref() == owner)
            .count()
    }

    /// Adds `hook`, or replaces the one with its id.
    pub fn put(&self, hook: Hook) -> Result<(), HooksError> {
        let mut hooks = self.hooks();
        let mut changed = hooks.clone();
        match changed.iter_mut().find(|h| h.id == hook.id) {
            Some(old) => *old = hook,
            None => changed.push(hook),
        }
        self.save(&changed)?;
        *hooks = changed;
        Ok(())
    }

    /// Removes the webhook `id`; answers it.
    pub fn remove(&self, id: &str) -> Result<Option<Hook>, HooksError> {
        let mut hooks = self.hooks();
        let Some(index) = hooks.iter().position(|h| h.id == id) else {
            return Ok(None);
        };
        let mut changed = hooks.clone();
        let removed = changed.remove(index);
        self.save(&changed)?;
        *hooks = changed;
        Ok(Some(removed))
    }
}

/// The server-wide webhooks' secret, made on first use.
fn server_secret(path: &Path) -> Result<String, HooksError> {
    match std::fs::read_to_string(path) {
        Ok(secret) if !secret.trim().is_empty() => return Ok(secret.trim().to_owned()),
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(io("read", path)(error)),
    }
    let secret = sign::new_secret().map_err(HooksError::Secret)?;
    airlock_atomic_file::write(path, format!("{secret}\n").as_bytes(), Mode::Private)
        .map_err(io("write", path))?;
    tracing::info!(path = %path.display(), "made the server-wide webhooks' secret");
    Ok(secret)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::Draft;

    fn hook(id: &str, owner: Option<&str>) -> Hook {
        Hook {
            id: id.into(),
            url: format!("https://hooks.example/{id}"),
            owner: owner.map(str::to_owned),
            server_wide: false,
            secret: "whsec_x".into(),
            kinds: Vec::new(),
            created_at_ms: 1,
        }
    }

    #[test]
    fn stored_webhooks_come_back_and_server_wide_ones_keep_id_and_secret() {
        let dir = tempfile::tempdir().unwrap();
        let urls = vec!["http://127.0.0.1:9/all".to_owned()];
        let hooks = Hooks::open(dir.path(), &urls, 1).unwrap();
        hooks.put(hook("wh_1", Some("alice"))).unwrap();
        let server = hooks.all().into_iter().find(|h| h.server_wide).unwrap();
        drop(hooks);
        let hooks = Hooks::open(dir.path(), &urls, 2).unwrap();
        assert_eq!(hooks.count(Some("alice")), 1);
        let again = hooks.all().into_iter().find(|h| h.server_wide).unwrap();
        assert_eq!((again.id, again.secret), (server.id, server.secret));
        let stored = std::fs::read_to_string(dir.path().join("hooks.json")).unwrap();
        assert!(!stored.contains("/all"), "{stored}");
        assert_eq!(
            hooks.remove("wh_1").unwrap().map(|h| h.id),
            Some("wh_1".into())
        );
        assert!(hooks.remove("wh_1").unwrap().is_none());
        assert_eq!(Hooks::open(dir.path(), &[], 3).unwrap().all(), []);
    }

    #[test]
    fn a_keys_webhook_wants_its_own_sandboxes_events_of_its_kinds() {
        let mut alice = hook("wh_1", Some("alice"));
        let owner = hook("wh_2", None);
        let of_alice = Draft::new(EventKind::Created, "a", Some("alice")).numbered(1, 1);
        let of_bob = Draft::new(EventKind::Created, "b", Some("bob")).numbered(2, 1);
        assert!(alice.wants(&of_alice));
        assert!(!alice.wants(&of_bob));
        assert!(owner.wants(&of_bob));
        alice.kinds = vec![EventKind::Killed];
        assert!(!alice.wants(&of_alice));
    }
}
