//! Running code in persistent contexts, as a notebook does (protocol
//! revision 7): [`Sandbox::run_code`](crate::Sandbox::run_code) runs a
//! [`Cell`] and streams its output, its value and rich outputs as
//! [`MimeBundle`]s, and its error; [`Contexts`] (from
//! [`Sandbox::contexts`](crate::Sandbox::contexts)) creates, lists,
//! interrupts, restarts and deletes contexts.
//!
//! - `cell`: [`Cell`], [`CellExecution`], [`CellEvent`].
//! - `output`: [`MimeBundle`], [`CellError`], [`CellDone`], [`CellOutput`].
//! - `context`: [`Language`], [`ContextOptions`], [`ContextInfo`].

mod cell;
mod context;
mod output;

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use airlock_proto::v1::code_client::CodeClient;
use airlock_proto::v1::{ContextRequest, CreateContextRequest, ListContextsRequest};
use airlock_proto::Feature;

pub use cell::{Cell, CellEvent, CellExecution};
pub use context::{ContextInfo, ContextOptions, Language};
pub use output::{CellDone, CellError, CellOutput, CellStatus, MimeBundle};

use crate::error::{Error, Result};
use crate::features::AgentFeatures;
use crate::lifecycle::channel::AgentChannel;
use crate::lifecycle::vm::VmShared;
use crate::transport::CapMessages;

/// The sandbox's interpreter contexts. Cheap to clone; usable from any
/// task.
#[derive(Debug, Clone)]
pub struct Contexts {
    client: CodeClient<AgentChannel>,
    features: AgentFeatures,
    vm: Arc<VmShared>,
    defaults: ContextDefaults,
    /// The languages whose default context is known to have been made
    /// with `defaults`.
    defaults_made: Arc<DefaultContexts>,
}

/// What every context created through [`Contexts`] gets unless its options
/// say otherwise: the sandbox's own defaults, as its commands get them.
#[derive(Debug, Clone, Default)]
pub(crate) struct ContextDefaults {
    /// The builder's environment and the sandbox's network (proxy, CA,
    /// placeholders).
    pub(crate) env: Arc<[(String, String)]>,
    /// Who runs the interpreter (a named template's `USER`).
    pub(crate) user: Option<String>,
    /// Where it starts (a named template's `WORKDIR`).
    pub(crate) cwd: Option<String>,
}

impl ContextDefaults {
    /// Nothing to add: the agent's own defaults stand.
    fn is_empty(&self) -> bool {
        self.env.is_empty() && self.user.is_none() && self.cwd.is_none()
    }

    /// Fills what `request` leaves unset.
    fn apply(&self, request: &mut CreateContextRequest) {
        for (key, value) in self.env.iter() {
            request
                .env
                .entry(key.clone())
                .or_insert_with(|| value.clone());
        }
        if request.user.is_empty() {
            request.user = self.user.clone().unwrap_or_default();
        }
        if request.cwd.is_empty() {
            request.cwd = self.cwd.clone().unwrap_or_default();
        }
    }
}

/// The languages whose default context a sandbox made itself, with its
/// environment (shared by every [`Contexts`] of one sandbox).
#[derive(Debug, Default)]
pub(crate) struct DefaultContexts(Mutex<HashSet<Language>>);

impl DefaultContexts {
    fn set(&self) -> std::sync::MutexGuard<'_, HashSet<Language>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Contexts>();
    assert_send_sync::<CellExecution>();
};

impl Contexts {
    pub(crate) fn new(
        channel: AgentChannel,
        features: AgentFeatures,
        vm: Arc<VmShared>,
        defaults: ContextDefaults,
        defaults_made: Arc<DefaultContexts>,
    ) -> Self {
        Contexts {
            client: CodeClient::new(channel).capped(),
            features,
            vm,
            defaults,
            defaults_made,
        }
    }

    fn client(&self) -> Result<CodeClient<AgentChannel>> {
        self.features.require(Feature::RunCode)?;
        Ok(self.client.clone())
    }

    /// Runs a cell; returns once the agent took it (the context exists and
    /// its interpreter started), streaming from there. A cell for a
    /// language's default context, in a sandbox with a default environment,
    /// user or working directory, first makes that context with them (the
    /// agent would make it bare).
    pub async fn run(&self, cell: impl Into<Cell>) -> Result<CellExecution> {
        let cell = cell.into();
        if cell.context.is_none() && !self.defaults.is_empty() {
            self.make_default(cell.language.unwrap_or_default()).await?;
        }
        let request = cell.to_request();
        let events = self
            .client()?
            .run_code(request)
            .await
            .map_err(|s| Error::agent("Code.RunCode", s))?
            .into_inner();
        Ok(CellExecution::new(events, Arc::clone(&self.vm)))
    }

    /// Starts a context. It gets the sandbox's environment (with a network,
    /// its proxy, CA and placeholder variables), default user and working
    /// directory (a named template's `USER` and `WORKDIR`) unless `options`
    /// sets them.
    pub async fn create(&self, options: &ContextOptions) -> Result<ContextInfo> {
        let mut request = options.to_request();
        self.defaults.apply(&mut request);
        let info = self
            .client()?
            .create_context(request)
            .await
            .map_err(|s| Error::agent("Code.CreateContext", s))?
            .into_inner();
        ContextInfo::from_proto(info)
    }

    /// Makes `language`'s default context (the agent names it after the
    /// language) with the sandbox's defaults, unless it exists.
    async fn make_default(&self, language: Language) -> Result<()> {
        if self.defaults_made.set().contains(&language) {
            return Ok(());
        }
        let mut request = CreateContextRequest {
            language: language.as_str().to_owned(),
            id: language.as_str().to_owned(),
            ..Default::default()
        };
        self.defaults.apply(&mut request);
        match self.client()?.create_context(request).await {
            Ok(_) => {
                tracing::debug!(%language, "default context made with the sandbox's environment")
            }
            // Made before: by this sandbox's previous owner, or by a cell.
            Err(status) if status.code() == tonic::Code::AlreadyExists => {}
            Err(status) => return Err(Error::agent("Code.CreateContext", status)),
        }
        self.defaults_made.set().insert(language);
        Ok(())
    }

    /// Every context, oldest first.
    pub async fn list(&self) -> Result<Vec<ContextInfo>> {
        self.client()?
            .list_contexts(ListContextsRequest {})
            .await
            .map_err(|s| Error::agent("Code.ListContexts", s))?
            .into_inner()
            .contexts
            .into_iter()
            .map(ContextInfo::from_proto)
            .collect()
    }

    /// Interrupts the context's running cell (KeyboardInterrupt; the
    /// variables stay).
    pub async fn interrupt(&self, context: &str) -> Result<ContextInfo> {
        let info = self
            .client()?
            .interrupt_context(ContextRequest { id: context.into() })
            .await
            .map_err(|s| Error::agent("Code.InterruptContext", s))?
            .into_inner();
        ContextInfo::from_proto(info)
    }

    /// Replaces the context's interpreter with a fresh one: every variable
    /// is gone.
    pub async fn restart(&self, context: &str) -> Result<ContextInfo> {
        let info = self
            .client()?
            .restart_context(ContextRequest { id: context.into() })
            .await
            .map_err(|s| Error::agent("Code.RestartContext", s))?
            .into_inner();
        ContextInfo::from_proto(info)
    }

    /// Kills the context's interpreter and forgets it.
    pub async fn delete(&self, context: &str) -> Result<()> {
        self.client()?
            .delete_context(ContextRequest { id: context.into() })
            .await
            .map_err(|s| Error::agent("Code.DeleteContext", s))?;
        // A default context deleted is made again by the next cell.
        self.defaults_made
            .set()
            .retain(|language| language.as_str() != context);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> ContextDefaults {
        ContextDefaults {
            env: Arc::from(vec![
                ("HTTPS_PROXY".to_owned(), "http://10.0.2.2:3128".to_owned()),
                ("LANG".to_owned(), "C.UTF-8".to_owned()),
            ]),
            user: Some("app".to_owned()),
            cwd: Some("/srv/app".to_owned()),
        }
    }

    #[test]
    fn a_context_without_options_gets_the_sandboxs_defaults() {
        let mut request = ContextOptions::new(Language::Python).to_request();
        defaults().apply(&mut request);
        assert_eq!(request.cwd, "/srv/app");
        assert_eq!(request.user, "app");
        assert_eq!(request.env["LANG"], "C.UTF-8");
        assert_eq!(request.env.len(), 2);
    }

    #[test]
    fn a_contexts_own_options_stand() {
        let options = ContextOptions::new(Language::Bash)
            .cwd("/tmp")
            .user("root")
            .env("LANG", "en_GB.UTF-8");
        let mut request = options.to_request();
        defaults().apply(&mut request);
        assert_eq!(request.cwd, "/tmp");
        assert_eq!(request.user, "root");
        assert_eq!(request.env["LANG"], "en_GB.UTF-8");
        assert_eq!(request.env["HTTPS_PROXY"], "http://10.0.2.2:3128");
    }

    #[test]
    fn no_defaults_leave_the_request_bare() {
        let empty = ContextDefaults::default();
        assert!(empty.is_empty());
        assert!(!defaults().is_empty());
        let mut request = ContextOptions::new(Language::Python).to_request();
        empty.apply(&mut request);
        assert_eq!(request, ContextOptions::new(Language::Python).to_request());
    }
}
