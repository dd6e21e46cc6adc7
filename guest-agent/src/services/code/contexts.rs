//! The agent's contexts by id: creation (language, id, working directory
//! and user checked), the default context of each language (created on
//! first use, named after it), lookup, listing and deletion, within
//! [`MAX_CONTEXTS`].

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use airlock_proto::contract::code::{BASH, PYTHON};
use airlock_proto::v1::CreateContextRequest;
use tokio::sync::Mutex as AsyncMutex;

use super::context::{Context, Spawner};
use super::driver::Launch;
use super::CodeError;
use crate::services::process::user;

/// The most contexts the agent keeps (each is an interpreter process).
pub const MAX_CONTEXTS: usize = 16;
/// The longest context id.
pub const MAX_ID_LEN: usize = 64;

/// Every context.
#[derive(Debug)]
pub struct Contexts {
    spawner: Spawner,
    inner: Mutex<Inner>,
    /// Serializes the creation of default contexts, so two first cells
    /// share one.
    defaults: AsyncMutex<()>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Oldest first.
    contexts: Vec<Arc<Context>>,
    /// Ids being created.
    pending: HashSet<String>,
    next: u64,
}

/// A pending id, released on drop.
struct Reservation<'a> {
    contexts: &'a Contexts,
    id: String,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.contexts.lock().pending.remove(&self.id);
    }
}

/// The language a request names, by its canonical name.
pub fn language(name: &str) -> Result<&'static str, CodeError> {
    match name {
        "" | "python" | "python3" | "py" => Ok(PYTHON),
        "bash" | "sh" | "shell" => Ok(BASH),
        other => Err(CodeError::UnknownLanguage(other.to_owned())),
    }
}

fn check_id(id: &str) -> Result<(), CodeError> {
    let ok = !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(CodeError::BadId(id.to_owned()))
    }
}

/// The working directory of a context: the request's, else the user's
/// home if it exists, else `/`.
fn working_directory(cwd: &str, user_spec: &str) -> Result<String, CodeError> {
    if !cwd.is_empty() {
        return Ok(cwd.to_owned());
    }
    let home = match user::resolve(user_spec).map_err(CodeError::Start)? {
        Some(credentials) => credentials.home,
        None => Some("/root".to_owned()),
    };
    Ok(home
        .filter(|home| std::path::Path::new(home).is_dir())
        .unwrap_or_else(|| "/".to_owned()))
}

impl Contexts {
    /// No contexts yet; interpreters start through `spawner`.
    pub fn new(spawner: Spawner) -> Self {
        Contexts {
            spawner,
            inner: Mutex::default(),
            defaults: AsyncMutex::new(()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Claims `id` (or a fresh `ctx-N`) within the limit.
    fn reserve(&self, id: Option<&str>) -> Result<Reservation<'_>, CodeError> {
        let mut inner = self.lock();
        if inner.contexts.len() + inner.pending.len() >= MAX_CONTEXTS {
            return Err(CodeError::TooMany(MAX_CONTEXTS));
        }
        let taken = |inner: &Inner, id: &str| {
            inner.pending.contains(id) || inner.contexts.iter().any(|c| c.id() == id)
        };
        let id = match id {
            Some(id) => {
                check_id(id)?;
                if taken(&inner, id) {
                    return Err(CodeError::Exists(id.to_owned()));
                }
                id.to_owned()
            }
            None => loop {
                inner.next += 1;
                let id = format!("ctx-{}", inner.next);
                if !taken(&inner, &id) {
                    break id;
                }
            },
        };
        inner.pending.insert(id.clone());
        Ok(Reservation { contexts: self, id })
    }

    /// Creates a context and starts its interpreter.
    pub async fn create(&self, request: CreateContextRequest) -> Result<Arc<Context>, CodeError> {
        let language = language(&request.language)?;
        let wanted = (!request.id.is_empty()).then_some(request.id.as_str());
        let reservation = self.reserve(wanted)?;
        let launch = Launch {
            language,
            cwd: working_directory(&request.cwd, &request.user)?,
            env: request.env,
            user: request.user,
        };
        let context = Context::start(reservation.id.clone(), launch, self.spawner.clone()).await?;
        self.lock().contexts.push(Arc::clone(&context));
        drop(reservation);
        tracing::info!(id = context.id(), language, "context created");
        Ok(context)
    }

    /// The default context of `language` (named after it), created on
    /// first use.
    pub async fn default_for(&self, language: &'static str) -> Result<Arc<Context>, CodeError> {
        let _creating = self.defaults.lock().await;
        if let Ok(context) = self.get(language) {
            return Ok(context);
        }
        self.create(CreateContextRequest {
            language: language.to_owned(),
            id: language.to_owned(),
            ..Default::default()
        })
        .await
    }

    /// The context `id` names.
    pub fn get(&self, id: &str) -> Result<Arc<Context>, CodeError> {
        self.lock()
            .contexts
            .iter()
            .find(|c| c.id() == id)
            .cloned()
            .ok_or_else(|| CodeError::NoSuchContext(id.to_owned()))
    }

    /// Every context, oldest first.
    pub fn list(&self) -> Vec<Arc<Context>> {
        self.lock().contexts.clone()
    }

    /// Forgets a context and kills its interpreter.
    pub async fn delete(&self, id: &str) -> Result<(), CodeError> {
        let context = {
            let mut inner = self.lock();
            let at = inner
                .contexts
                .iter()
                .position(|c| c.id() == id)
                .ok_or_else(|| CodeError::NoSuchContext(id.to_owned()))?;
            inner.contexts.remove(at)
        };
        context.delete().await;
        tracing::info!(id, "context deleted");
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn languages_have_aliases() {
        assert_eq!(language("").unwrap(), PYTHON);
        assert_eq!(language("python3").unwrap(), PYTHON);
        assert_eq!(language("sh").unwrap(), BASH);
        assert!(matches!(
            language("cobol"),
            Err(CodeError::UnknownLanguage(_))
        ));
    }

    #[test]
    fn ids_are_names() {
        for good in ["a", "ctx-1", "My_ctx.2", &"x".repeat(MAX_ID_LEN)] {
            check_id(good).unwrap();
        }
        for bad in ["", "a b", "../x", "a/b", &"x".repeat(MAX_ID_LEN + 1)] {
            assert!(check_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_working_directory_defaults_to_home_or_root() {
        assert_eq!(working_directory("/tmp", "").unwrap(), "/tmp");
        let default = working_directory("", "").unwrap();
        assert!(default == "/root" || default == "/", "{default}");
    }
}
