//! `airlock.api.v1.Events`: lifecycle events watched (`Watch`: the log
//! after `after_seq`, then the bus), and webhooks registered, listed and
//! removed. The caller sees its own sandboxes' events and webhooks; the
//! owner sees every one.

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use airlock_api::reason::{self, invalid};
use airlock_api::v1::{self as api, events_server, ErrorReason};

use super::Services;
use crate::convert::now_ms;
use crate::events::{Event, EventKind, PauseMode};
use crate::principal::Principal;
use crate::state::State;
use crate::validate;
use crate::webhooks::{Hook, Target, Webhooks, MAX_PER_PRINCIPAL};

/// Events read from the log at once for a replay.
const REPLAY_BATCH: usize = 1000;

/// Events a watcher may have unread before the server waits for it.
const STREAM_BUFFER: usize = 256;

/// The name that filters the owner's own sandboxes' events.
const OWNER_KEY: &str = "_owner";

/// The API's kind of `kind`.
fn api_kind(kind: EventKind) -> api::EventKind {
    match kind {
        EventKind::Created => api::EventKind::Created,
        EventKind::Resumed => api::EventKind::Resumed,
        EventKind::Paused => api::EventKind::Paused,
        EventKind::Snapshotted => api::EventKind::Snapshotted,
        EventKind::Forked => api::EventKind::Forked,
        EventKind::TimedOut => api::EventKind::TimedOut,
        EventKind::Killed => api::EventKind::Killed,
        EventKind::Lost => api::EventKind::Lost,
        EventKind::Ended => api::EventKind::Ended,
    }
}

/// The server's kinds of a request's `field`.
fn kinds(field: &str, values: &[i32]) -> Result<Vec<EventKind>, Status> {
    values
        .iter()
        .map(|&value| {
            EventKind::ALL
                .into_iter()
                .find(|kind| api_kind(*kind) as i32 == value)
                .ok_or_else(|| invalid(field, format!("{value} is not an event kind")))
        })
        .collect()
}

/// `event` as the API answers it.
pub fn sandbox_event(event: &Event) -> api::SandboxEvent {
    let details = &event.details;
    api::SandboxEvent {
        seq: event.seq,
        time_ms: event.time_ms,
        kind: api_kind(event.kind) as i32,
        sandbox_id: event.sandbox_id.clone(),
        owner: event.owner.clone().unwrap_or_default(),
        reason: event.reason.clone(),
        pause_mode: match details.pause_mode {
            None => api::PauseMode::Unspecified,
            Some(PauseMode::Memory) => api::PauseMode::Memory,
            Some(PauseMode::Disk) => api::PauseMode::Disk,
        } as i32,
        origin: details.origin.clone(),
        snapshot: details.snapshot.clone(),
        parent: details.parent.clone(),
        children: details.children.clone(),
        image: details.image.clone(),
        template: details.template.clone(),
        memory_mib: details.memory_mib,
        vcpus: details.vcpus,
    }
}

/// Which events a `Watch` passes.
#[derive(Debug, Clone)]
struct Filter {
    principal: Principal,
    /// The owner's filter by key: `Some(None)` is the owner's own.
    key: Option<Option<String>>,
    kinds: Vec<EventKind>,
    sandbox_id: String,
}

impl Filter {
    fn passes(&self, event: &Event) -> bool {
        self.principal.may_see(event.owner.as_deref())
            && self
                .key
                .as_ref()
                .is_none_or(|key| key.as_deref() == event.owner.as_deref())
            && (self.kinds.is_empty() || self.kinds.contains(&event.kind))
            && (self.sandbox_id.is_empty() || self.sandbox_id == event.sandbox_id)
    }
}

/// Sends the logged events after `cursor` that pass; answers the last
/// read, or `None` when the client went away.
async fn replay(
    state: &State,
    filter: &Filter,
    mut cursor: u64,
    until: Option<u64>,
    sender: &mpsc::Sender<Result<api::SandboxEvent, Status>>,
) -> Option<u64> {
    loop {
        let batch = match state.events.after(cursor, REPLAY_BATCH) {
            Ok(batch) => batch,
            Err(error) => {
                let _ = sender
                    .send(Err(reason::status(
                        ErrorReason::Internal,
                        format!(
                            "cannot read the event log: {}",
                            airlock::error_chain(&error)
                        ),
                    )))
                    .await;
                return None;
            }
        };
        let Some(last) = batch.last().map(|event| event.seq) else {
            return Some(cursor);
        };
        for event in batch.iter().filter(|event| filter.passes(event)) {
            if until.is_some_and(|until| event.seq > until) {
                return Some(cursor);
            }
            sender.send(Ok(sandbox_event(event))).await.ok()?;
        }
        cursor = last;
        if until.is_some_and(|until| cursor >= until) {
            return Some(cursor);
        }
    }
}

/// A `Watch`'s stream: the replay, then the bus (the log again for what a
/// slow client missed).
async fn pump(
    state: Arc<State>,
    filter: Filter,
    after_seq: Option<u64>,
    replay_only: bool,
    sender: mpsc::Sender<Result<api::SandboxEvent, Status>>,
) {
    let (mut events, last) = state.events.subscribe_at();
    let mut cursor = last;
    if let Some(after) = after_seq {
        let until = replay_only.then_some(last);
        let Some(read) = replay(&state, &filter, after, until, &sender).await else {
            return;
        };
        cursor = read.max(last.min(read));
    }
    if replay_only {
        return;
    }
    loop {
        match events.recv().await {
            Ok(event) if event.seq <= cursor => {}
            Ok(event) => {
                cursor = event.seq;
                if filter.passes(&event) && sender.send(Ok(sandbox_event(&event))).await.is_err() {
                    return;
                }
            }
            Err(broadcast::error::RecvError::Lagged(_)) => {
                match replay(&state, &filter, cursor, None, &sender).await {
                    Some(read) => cursor = read,
                    None => return,
                }
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

impl Services {
    fn webhooks(&self) -> Result<&Arc<Webhooks>, Status> {
        self.state
            .webhooks
            .as_ref()
            .ok_or_else(|| reason::status(ErrorReason::Unsupported, "this server has no webhooks"))
    }

    fn webhook_info(&self, webhooks: &Webhooks, hook: &Hook) -> api::WebhookInfo {
        let (stats, pending) = webhooks.stats(&hook.id);
        api::WebhookInfo {
            id: hook.id.clone(),
            url: hook.url.clone(),
            kinds: hook.kinds.iter().map(|k| api_kind(*k) as i32).collect(),
            owner: hook.owner.clone().unwrap_or_default(),
            server_wide: hook.server_wide,
            created_at_ms: hook.created_at_ms,
            pending: u32::try_from(pending).unwrap_or(u32::MAX),
            dropped: stats.dropped,
            last_error: stats.last_error,
            last_delivered_ms: stats.last_delivered_ms,
        }
    }
}

fn internal(what: &str, error: &dyn std::error::Error) -> Status {
    reason::status(
        ErrorReason::Internal,
        format!("{what}: {}", airlock::error_chain(error)),
    )
}

#[tonic::async_trait]
impl events_server::Events for Services {
    type WatchStream = Pin<Box<dyn Stream<Item = Result<api::SandboxEvent, Status>> + Send>>;

    async fn watch(
        &self,
        request: Request<api::WatchEventsRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let call = self.admit(&request)?;
        let request = request.into_inner();
        let key = match request.key.as_str() {
            "" => None,
            key => {
                call.principal
                    .require_owner("watching another key's events (key)")?;
                if key == OWNER_KEY {
                    Some(None)
                } else {
                    validate::name("key", key)?;
                    Some(Some(key.to_owned()))
                }
            }
        };
        if !request.sandbox_id.is_empty() {
            validate::sandbox_id("sandbox_id", &request.sandbox_id)?;
        }
        let filter = Filter {
            principal: call.principal.clone(),
            key,
            kinds: kinds("kinds", &request.kinds)?,
            sandbox_id: request.sandbox_id,
        };
        let (sender, receiver) = mpsc::channel(STREAM_BUFFER);
        let state = Arc::clone(&self.state);
        self.state.spawn(async move {
            // The call's place is held until the stream ends.
            let _call = call;
            pump(
                state,
                filter,
                request.after_seq,
                request.replay_only,
                sender,
            )
            .await;
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(receiver))))
    }

    async fn set_webhook(
        &self,
        request: Request<api::SetWebhookRequest>,
    ) -> Result<Response<api::SetWebhookResponse>, Status> {
        let call = self.admit(&request)?;
        let request = request.into_inner();
        let webhooks = self.webhooks()?;
        let owner = call.principal.key();
        let may_reach_host = owner.is_none();
        let target = Target::parse(&request.url, may_reach_host).map_err(|e| invalid("url", e))?;
        if !may_reach_host {
            target.resolve(false).await.map_err(|e| invalid("url", e))?;
        }
        let kinds = kinds("kinds", &request.kinds)?;
        if let Some(mut hook) = webhooks.hooks.find(owner, &request.url) {
            hook.kinds = kinds;
            webhooks
                .hooks
                .put(hook.clone())
                .map_err(|e| internal("cannot keep the webhook", &e))?;
            tracing::info!(id = hook.id, principal = %call.principal, "webhook changed");
            return Ok(Response::new(api::SetWebhookResponse {
                webhook: Some(self.webhook_info(webhooks, &hook)),
                secret: String::new(),
            }));
        }
        if webhooks.hooks.count(owner) >= MAX_PER_PRINCIPAL {
            return Err(reason::status(
                ErrorReason::QuotaExceeded,
                format!(
                    "{} may have {MAX_PER_PRINCIPAL} webhooks and has them; remove one first",
                    call.principal
                ),
            ));
        }
        let secret = crate::webhooks::new_secret()
            .map_err(|e| internal("cannot make a webhook secret", &e))?;
        let hook = Hook {
            id: crate::webhooks::new_id().map_err(|e| internal("cannot make a webhook id", &e))?,
            url: request.url,
            owner: owner.map(str::to_owned),
            server_wide: false,
            secret: secret.clone(),
            kinds,
            created_at_ms: now_ms(),
        };
        webhooks
            .hooks
            .put(hook.clone())
            .map_err(|e| internal("cannot keep the webhook", &e))?;
        self.state.spawn(webhooks.worker(&hook.id));
        tracing::info!(id = hook.id, url = hook.url, principal = %call.principal, "webhook registered");
        Ok(Response::new(api::SetWebhookResponse {
            webhook: Some(self.webhook_info(webhooks, &hook)),
            secret,
        }))
    }

    async fn list_webhooks(
        &self,
        request: Request<api::ListWebhooksRequest>,
    ) -> Result<Response<api::ListWebhooksResponse>, Status> {
        let call = self.call(&request)?;
        let webhooks = self.webhooks()?;
        let list = webhooks
            .hooks
            .all()
            .iter()
            .filter(|hook| match &call.principal {
                Principal::Owner => true,
                Principal::Key(name) => !hook.server_wide && hook.owner.as_deref() == Some(name),
            })
            .map(|hook| self.webhook_info(webhooks, hook))
            .collect();
        Ok(Response::new(api::ListWebhooksResponse { webhooks: list }))
    }

    async fn remove_webhook(
        &self,
        request: Request<api::RemoveWebhookRequest>,
    ) -> Result<Response<api::RemoveWebhookResponse>, Status> {
        let call = self.admit(&request)?;
        let id = request.into_inner().id;
        let webhooks = self.webhooks()?;
        let not_found = || reason::status(ErrorReason::NotFound, format!("no webhook {id}"));
        let hook = webhooks.hooks.get(&id).ok_or_else(not_found)?;
        let yours = match &call.principal {
            Principal::Owner => true,
            Principal::Key(name) => !hook.server_wide && hook.owner.as_deref() == Some(name),
        };
        if !yours {
            return Err(not_found());
        }
        if hook.server_wide {
            return Err(reason::status(
                ErrorReason::Unsupported,
                format!(
                    "{id} is a server-wide webhook (airlock serve --webhook {}); restart the \
                     server without it",
                    hook.url
                ),
            ));
        }
        webhooks
            .remove(&id)
            .map_err(|e| internal("cannot remove the webhook", &e))?;
        tracing::info!(%id, principal = %call.principal, "webhook removed");
        Ok(Response::new(api::RemoveWebhookResponse {}))
    }
}
