//! `airlock.api.v1.Templates`: templates built through the API, and
//! `Sandboxes.ListTemplates`.
//!
//! A build reads its header first and checks it (`templates_build`), then
//! the principal's claims (a key may not take one of the server's own
//! names, its storage quota, one build at a time), then the context
//! (`templates_context`), and only then answers with the build's events
//! from a task of the server's: a refusal before the build is the call's
//! status, a failure during it the stream's last item. The key's storage
//! is checked again before the result becomes its template.

use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use airlock::template::BuildOptions;
use airlock_api::reason::{self, invalid};
use airlock_api::v1::{self as api, build_template_event::Event, templates_server, ErrorReason};

use super::templates_build::{self, Ended};
use super::Services;
use crate::keys::Quota;
use crate::principal::Principal;
use crate::state::State;
use crate::templates::{BuildSlot, Found, Templates};
use crate::templates_context;
use crate::validate;

type Events = Pin<Box<dyn Stream<Item = Result<api::BuildTemplateEvent, Status>> + Send>>;

/// Events waiting for the client.
const EVENTS: usize = 16;

/// A template as the API lists it.
pub fn template_info(found: &Found) -> api::TemplateInfo {
    let meta = found.template.meta();
    api::TemplateInfo {
        name: meta.name.clone(),
        size_bytes: found.template.disk_bytes(),
        created_at_ms: meta.built_unix_secs * 1000,
        image: meta.base.clone(),
        owner: found.owner.as_deref().unwrap_or_default().to_owned(),
        memory_mib: meta.memory_mib,
        vcpus: meta.vcpus,
    }
}

/// What `principal`'s snapshots and templates take on disk.
fn stored(state: &State, principal: &Principal) -> Result<u64, Status> {
    let (_, snapshots) = state.snapshots.totals(principal)?;
    Ok(snapshots + state.stored_template_bytes(principal))
}

fn quota_exceeded(stored: u64, quota: &Quota) -> Status {
    reason::status(
        ErrorReason::QuotaExceeded,
        format!(
            "the key's snapshots and templates take {} MiB of its {} MiB; delete some first",
            stored >> 20,
            quota.storage_bytes() >> 20
        ),
    )
}

/// Whether a sandbox of `principal` may run on a root image of a template
/// it no longer has: one started from a template name that neither it nor
/// the server has now.
fn roots_in_use(state: &State, principal: &Principal) -> bool {
    let key = principal.key();
    let store = state.templates.store(principal);
    state.registry.all().iter().any(|entry| {
        let name = &entry.record.template;
        entry.record.owner.as_deref() == key
            && !name.is_empty()
            && store.get(name).is_err()
            && state.templates.server().get(name).is_err()
    })
}

impl Services {
    /// `Sandboxes.ListTemplates`: the server's templates and the caller's.
    pub(crate) async fn list_templates_of(
        &self,
        request: Request<api::ListTemplatesRequest>,
    ) -> Result<Response<api::ListTemplatesResponse>, Status> {
        let call = self.call(&request)?;
        let templates = self
            .state
            .templates
            .list(&call.principal)?
            .iter()
            .map(template_info)
            .collect();
        Ok(Response::new(api::ListTemplatesResponse { templates }))
    }
}

/// The key's storage before its build: a store whose unused steps and
/// roots push it to its quota is tidied first.
fn check_storage(state: &State, principal: &Principal, slot: &BuildSlot) -> Result<(), Status> {
    let Some(quota) = state.quota(principal) else {
        return Ok(());
    };
    let mut bytes = stored(state, principal)?;
    if bytes >= quota.storage_bytes() {
        state.templates.tidy(slot, roots_in_use(state, principal));
        bytes = stored(state, principal)?;
    }
    if bytes >= quota.storage_bytes() {
        return Err(quota_exceeded(bytes, &quota));
    }
    Ok(())
}

/// The check before a key's build becomes its template: what the key
/// stores with it (less the template of that name it replaces) within its
/// quota.
fn before_commit(
    state: &Arc<State>,
    principal: &Principal,
    name: &str,
) -> Option<airlock::template::build::BeforeCommit> {
    let quota = state.quota(principal)?;
    let state = Arc::clone(state);
    let principal = principal.clone();
    let name = name.to_owned();
    Some(Arc::new(move |_staged: &Path| {
        let replaced = state
            .templates
            .store(&principal)
            .get(&name)
            .map(|old| dir_bytes(old.dir()))
            .unwrap_or(0);
        let bytes = stored(&state, &principal)
            .map_err(|status| status.message().to_owned())?
            .saturating_sub(replaced);
        if bytes > quota.storage_bytes() {
            return Err(format!(
                "the built template would bring the key's snapshots and templates to {} MiB \
                 of its {} MiB; it was not kept (delete some first)",
                bytes >> 20,
                quota.storage_bytes() >> 20
            ));
        }
        Ok(())
    }))
}

/// Allocated bytes under `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    airlock::template::NamedStore::new(dir).disk_bytes()
}

#[tonic::async_trait]
impl templates_server::Templates for Services {
    type BuildStream = Events;

    async fn build(
        &self,
        request: Request<Streaming<api::BuildTemplateRequest>>,
    ) -> Result<Response<Self::BuildStream>, Status> {
        use api::build_template_request::Part;
        let call = self.admit(&request)?;
        let principal = call.principal.clone();
        let state = Arc::clone(&self.state);
        let mut stream = request.into_inner();
        let header = match stream.message().await? {
            Some(api::BuildTemplateRequest {
                part: Some(Part::Header(header)),
            }) => header,
            _ => return Err(invalid("header", "a build begins with its header")),
        };
        let build = templates_build::check(header, state.host_access(&principal))?;
        if principal.key().is_some() && state.templates.server().get(&build.name).is_ok() {
            return Err(reason::status(
                ErrorReason::AlreadyExists,
                format!(
                    "header.name: {} is one of the server's own templates; pick another name",
                    build.name
                ),
            ));
        }
        let bound = state.config.max_context_bytes;
        if build.context_bytes > bound {
            return Err(templates_context::too_large(bound));
        }
        let slot = state.templates.claim(&principal)?;
        check_storage(&state, &principal, &slot)?;
        state.templates.make_dirs(&principal)?;
        let context =
            templates_context::receive(&mut stream, &state.templates.contexts_dir(), bound).await?;
        tracing::info!(%principal, name = build.name, context_bytes = context.bytes, "building a template");
        let mut options = BuildOptions::new(&build.name, context.path());
        options.allow_net = build.rules.clone();
        options.host_access = state.host_access(&principal);
        options.memory_mib = build.resources.memory_mib;
        options.vcpus = build.resources.vcpus;
        options.sandbox = state.builder();
        options.store = state.templates.store(&principal);
        options.images = state.images.clone();
        options.before_commit = before_commit(&state, &principal, &build.name);
        let (tx, rx) = mpsc::channel(EVENTS);
        let task_state = Arc::clone(&state);
        state.spawn(async move {
            let _held = (&call, &context);
            let state = task_state;
            let ended = templates_build::run(&build, &options, &tx).await;
            let refused = matches!(&ended, Ended::Failed(status)
                if reason::reason_of(status) == Some(ErrorReason::QuotaExceeded));
            match ended {
                Ended::Built(template) => {
                    let found = Found {
                        owner: principal.key().map(Arc::from),
                        template: *template,
                    };
                    tracing::info!(%principal, name = build.name, "template built");
                    let _ = tx
                        .send(Ok(api::BuildTemplateEvent {
                            event: Some(Event::Done(template_info(&found))),
                        }))
                        .await;
                }
                Ended::Failed(status) => {
                    tracing::info!(%principal, name = build.name, error = status.message(), "template build failed");
                    let _ = tx.send(Err(status)).await;
                }
                Ended::Abandoned => {
                    tracing::info!(%principal, name = build.name, "template build stopped: the client went away");
                }
            }
            if refused {
                state.templates.tidy(&slot, roots_in_use(&state, &principal));
            }
            drop(slot);
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn delete_template(
        &self,
        request: Request<api::DeleteTemplateRequest>,
    ) -> Result<Response<api::DeleteTemplateResponse>, Status> {
        let call = self.admit(&request)?;
        let name = &request.get_ref().name;
        validate::name("name", name)?;
        let templates: &Templates = &self.state.templates;
        templates.delete(&call.principal, name)?;
        if let Ok(slot) = templates.claim(&call.principal) {
            templates.tidy(&slot, roots_in_use(&self.state, &call.principal));
        }
        Ok(Response::new(api::DeleteTemplateResponse {}))
    }
}
