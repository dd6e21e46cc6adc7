//! envd's polled watchers (CreateWatcher, GetWatcherEvents,
//! RemoveWatcher), what E2B's Python SDK's `watch_dir` uses: each a watch
//! (`watch`) read by a task into a bounded buffer until it is removed or
//! its sandbox ends.
//!
//! The watchers live in one table for the process: the front's shared
//! state (`Front`) is the skeleton's, and a watcher belongs to nothing
//! else (no service of `airlock.api.v1` keeps a polled watch). The table
//! is bounded per sandbox and in all, and a watcher whose watch ended is
//! dropped once read (or after a while unread).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant};

use airlock_e2b_wire::filesystem as fs;

use super::watch::{Spec, Watch};
use crate::e2b::connect::{Code, ConnectError};
use crate::e2b::target::SandboxCall;

/// Watchers one sandbox may have.
const MAX_PER_SANDBOX: usize = 64;
/// Watchers in all.
const MAX_WATCHERS: usize = 4096;
/// Events a watcher keeps between two reads; older ones are dropped.
const MAX_BUFFERED: usize = 10_000;
/// How long an ended watcher's last events wait to be read.
const ENDED_KEPT: Duration = Duration::from_secs(120);

static WATCHERS: LazyLock<Watchers> = LazyLock::new(Watchers::default);

#[derive(Debug, Default)]
struct Watchers {
    table: Mutex<HashMap<String, Watcher>>,
}

#[derive(Debug)]
struct Watcher {
    sandbox: String,
    buffer: Arc<Mutex<Buffer>>,
    task: tokio::task::AbortHandle,
}

#[derive(Debug, Default)]
struct Buffer {
    events: VecDeque<fs::FilesystemEvent>,
    dropped: u64,
    /// Set when the watch ended: why, and when.
    ended: Option<(Option<ConnectError>, Instant)>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn not_found(id: &str) -> ConnectError {
    ConnectError::not_found(format!("watcher {id} not found"))
}

/// CreateWatcher: opens the watch (its errors are the call's) and starts
/// reading it.
pub async fn create(
    call: &SandboxCall,
    username: Option<&str>,
    request: fs::CreateWatcherRequest,
) -> Result<fs::CreateWatcherResponse, ConnectError> {
    {
        let mut table = lock(&WATCHERS.table);
        sweep(&mut table);
        let mine = table.values().filter(|w| w.sandbox == call.id).count();
        if mine >= MAX_PER_SANDBOX || table.len() >= MAX_WATCHERS {
            return Err(ConnectError::new(
                Code::ResourceExhausted,
                format!(
                    "too many watchers (at most {MAX_PER_SANDBOX} per sandbox): remove some with RemoveWatcher"
                ),
            ));
        }
    }
    let spec = Spec {
        path: request.path,
        recursive: request.recursive,
        include_entry: request.include_entry,
    };
    let watch = Watch::open(call, username, spec).await?;
    let id = airlock::random::hex::<16>()
        .map_err(|error| ConnectError::internal(format!("no watcher id: {error}")))?;
    let buffer = Arc::new(Mutex::new(Buffer::default()));
    let task = tokio::spawn(read(watch, Arc::clone(&buffer))).abort_handle();
    lock(&WATCHERS.table).insert(
        id.clone(),
        Watcher {
            sandbox: call.id.clone(),
            buffer,
            task,
        },
    );
    Ok(fs::CreateWatcherResponse { watcher_id: id })
}

/// Reads `watch` into `buffer` until it ends.
async fn read(mut watch: Watch, buffer: Arc<Mutex<Buffer>>) {
    loop {
        let next = watch.next().await;
        let mut buffer = lock(&buffer);
        match next {
            Some(Ok(event)) => {
                if buffer.events.len() == MAX_BUFFERED {
                    buffer.events.pop_front();
                    buffer.dropped += 1;
                }
                buffer.events.push_back(event);
            }
            Some(Err(error)) => {
                buffer.ended = Some((Some(error), Instant::now()));
                return;
            }
            None => {
                buffer.ended = Some((None, Instant::now()));
                return;
            }
        }
    }
}

/// Drops the watchers that ended long ago, unread.
fn sweep(table: &mut HashMap<String, Watcher>) {
    table.retain(|_, watcher| {
        !matches!(&lock(&watcher.buffer).ended, Some((_, at)) if at.elapsed() > ENDED_KEPT)
    });
}

/// GetWatcherEvents: what happened since the last read. A watcher whose
/// watch ended answers its last events, then the error that ended it
/// (or `not_found`), and is gone.
pub fn events(
    call: &SandboxCall,
    request: fs::GetWatcherEventsRequest,
) -> Result<fs::GetWatcherEventsResponse, ConnectError> {
    let mut table = lock(&WATCHERS.table);
    let id = request.watcher_id;
    let watcher = table
        .get(&id)
        .filter(|w| w.sandbox == call.id)
        .ok_or_else(|| not_found(&id))?;
    let mut buffer = lock(&watcher.buffer);
    if buffer.dropped > 0 {
        tracing::debug!(watcher = %id, dropped = buffer.dropped, "e2b: watcher events dropped unread");
        buffer.dropped = 0;
    }
    let events: Vec<_> = buffer.events.drain(..).collect();
    let ended = buffer.ended.as_ref().map(|(error, _)| error.clone());
    drop(buffer);
    match ended {
        Some(error) if events.is_empty() => {
            table.remove(&id);
            Err(error.unwrap_or_else(|| {
                ConnectError::new(Code::NotFound, format!("watcher {id}: the watch ended"))
            }))
        }
        _ => Ok(fs::GetWatcherEventsResponse { events }),
    }
}

/// RemoveWatcher: stops the watch.
pub fn remove(
    call: &SandboxCall,
    request: fs::RemoveWatcherRequest,
) -> Result<fs::RemoveWatcherResponse, ConnectError> {
    let mut table = lock(&WATCHERS.table);
    let id = request.watcher_id;
    match table.get(&id) {
        Some(watcher) if watcher.sandbox == call.id => {
            watcher.task.abort();
            table.remove(&id);
            Ok(fs::RemoveWatcherResponse {})
        }
        _ => Err(not_found(&id)),
    }
}
