//! Watching a directory: our Files service's `Watch` stream, translated
//! (`events`), as envd's `WatchDir` server stream (a start event, then
//! changes, keepalives while idle) and as the source of a polled watcher
//! (`watchers`).

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

use futures::{Stream, StreamExt};
use tonic::Status;

use airlock_api::v1::{self as api, files_server::Files};
use airlock_e2b_wire::filesystem::{self as fs, watch_dir_response};

use super::calls::{connect_error, path};
use super::entry::entry;
use super::events::Translate;
use super::names::Names;
use crate::e2b::connect::{ConnectError, Replies};
use crate::e2b::target::SandboxCall;

/// The header in which the SDKs ask for keepalives every N seconds.
pub const KEEPALIVE_HEADER: &str = "keepalive-ping-interval";

/// Keepalives when a call asks for none.
const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(30);

type Changes = Pin<Box<dyn Stream<Item = Result<api::WatchEvent, Status>> + Send>>;

/// What a watch asks for.
#[derive(Debug, Clone)]
pub struct Spec {
    pub path: String,
    pub recursive: bool,
    pub include_entry: bool,
}

/// An open watch: our stream and its translation.
pub struct Watch {
    call: SandboxCall,
    changes: Changes,
    translate: Translate,
    include_entry: bool,
    /// Translated events not yet answered, with the path each is about
    /// (its entry looked up, with `include_entry`, before it leaves).
    ready: VecDeque<(fs::FilesystemEvent, String)>,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("sandbox", &self.call.id)
            .finish()
    }
}

impl Watch {
    /// Opens a watch of `spec` for the user the call names; a missing or
    /// not-a-directory path fails here, before any event.
    pub async fn open(
        call: &SandboxCall,
        username: Option<&str>,
        spec: Spec,
    ) -> Result<Self, ConnectError> {
        let path = path(call, username, "path", &spec.path)
            .await
            .map_err(connect_error)?;
        let changes = call
            .services()
            .watch(call.request(api::WatchRequest {
                sandbox_id: call.id.clone(),
                path: path.clone(),
                recursive: spec.recursive,
            }))
            .await
            .map_err(connect_error)?
            .into_inner();
        Ok(Watch {
            call: call.clone(),
            changes,
            translate: Translate::new(&path),
            include_entry: spec.include_entry,
            ready: VecDeque::new(),
        })
    }

    /// The next change; `None` when the watch ended (the sandbox did).
    /// Cancel-safe (WatchDir races it against its keepalive): an event
    /// leaves `ready` only once it is whole.
    pub async fn next(&mut self) -> Option<Result<fs::FilesystemEvent, ConnectError>> {
        loop {
            if let Some((_, path)) = self.ready.front() {
                let entry = match self.include_entry {
                    true => entry_now(&self.call, path).await,
                    false => None,
                };
                if let Some((mut event, _)) = self.ready.pop_front() {
                    event.entry = entry;
                    return Some(Ok(event));
                }
            }
            let change = match self.changes.next().await? {
                Ok(change) => change,
                Err(status) => return Some(Err(connect_error(status))),
            };
            self.ready.extend(self.translate.events(&change));
        }
    }
}

/// The entry at `path` now, if it is still there.
async fn entry_now(call: &SandboxCall, path: &str) -> Option<fs::EntryInfo> {
    let request = call.request(api::StatRequest {
        sandbox_id: call.id.clone(),
        path: path.to_owned(),
    });
    let info = call.services().stat(request).await.ok()?.into_inner();
    let names = Names::for_ids(call, std::iter::once((info.uid, info.gid)))
        .await
        .ok()?;
    Some(entry(&info, &names))
}

/// The keepalive interval a call's `headers` ask for (1 s to 5 min).
pub fn keepalive(headers: &http::HeaderMap) -> Duration {
    headers
        .get(KEEPALIVE_HEADER)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok())
        .map(|seconds| Duration::from_secs(seconds.clamp(1, 300)))
        .unwrap_or(DEFAULT_KEEPALIVE)
}

/// `watch` as WatchDir's replies: the start, then its changes, a
/// keepalive after each `every` without one.
pub fn replies(watch: Watch, every: Duration) -> Replies<fs::WatchDirResponse> {
    use watch_dir_response::Event;
    let start = fs::WatchDirResponse {
        event: Some(Event::Start(watch_dir_response::StartEvent {})),
    };
    let changes = futures::stream::unfold(Some(watch), move |watch| async move {
        let mut watch = watch?;
        let reply = tokio::select! {
            next = watch.next() => match next? {
                Ok(event) => Ok(Event::Filesystem(event)),
                Err(error) => return Some((Err(error), None)),
            },
            _ = tokio::time::sleep(every) => Ok(Event::Keepalive(watch_dir_response::KeepAlive {})),
        };
        let reply = reply.map(|event| fs::WatchDirResponse { event: Some(event) });
        Some((reply, Some(watch)))
    });
    futures::stream::iter([Ok(start)]).chain(changes).boxed()
}
