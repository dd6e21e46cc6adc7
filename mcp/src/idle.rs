//! [`IdleWatch`]: an HTTP session ends after it has had no tool call in
//! flight for a while, and its sandboxes with it. rmcp's own keep-alive
//! counts only messages, so a long call (a build, a training run) would
//! look idle to it; this watch counts calls in flight as activity, and
//! closes the rmcp session (the handler is dropped, the session cleans up)
//! when none has run for [`IdleWatch::limit`].

use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::RoleServer;

/// The header that names a request's MCP session.
const SESSION_HEADER: &str = "mcp-session-id";

#[derive(Debug)]
struct Clock {
    in_flight: usize,
    last: Instant,
    /// The MCP session's id, once a request named it.
    id: Option<Arc<str>>,
    watching: bool,
}

/// One HTTP session's activity.
#[derive(Debug)]
pub struct IdleWatch {
    limit: Duration,
    sessions: Arc<LocalSessionManager>,
    clock: Mutex<Clock>,
}

/// A tool call in flight; its drop ends it.
#[derive(Debug)]
pub struct Busy(Option<Arc<IdleWatch>>);

impl IdleWatch {
    pub fn new(limit: Duration, sessions: Arc<LocalSessionManager>) -> Arc<IdleWatch> {
        Arc::new(IdleWatch {
            limit,
            sessions,
            clock: Mutex::new(Clock {
                in_flight: 0,
                last: Instant::now(),
                id: None,
                watching: false,
            }),
        })
    }

    fn clock(&self) -> MutexGuard<'_, Clock> {
        self.clock.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A tool call begins (in the session the request names).
    pub fn begin(self: &Arc<Self>, context: &RequestContext<RoleServer>) -> Busy {
        let id = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.headers.get(SESSION_HEADER))
            .and_then(|value| value.to_str().ok())
            .map(Arc::<str>::from);
        let mut clock = self.clock();
        clock.in_flight += 1;
        clock.last = Instant::now();
        if clock.id.is_none() {
            clock.id = id;
        }
        if clock.id.is_some() && !clock.watching {
            clock.watching = true;
            tokio::spawn(watch(Arc::downgrade(self)));
        }
        Busy(Some(self.clone()))
    }

    /// The session's id, if it has been idle past the limit.
    fn expired(&self) -> Option<Arc<str>> {
        let clock = self.clock();
        (clock.in_flight == 0 && clock.last.elapsed() >= self.limit)
            .then(|| clock.id.clone())
            .flatten()
    }
}

impl Busy {
    /// No watch: a stdio session ends with its connection.
    pub fn none() -> Busy {
        Busy(None)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        if let Some(watch) = &self.0 {
            let mut clock = watch.clock();
            clock.in_flight = clock.in_flight.saturating_sub(1);
            clock.last = Instant::now();
        }
    }
}

/// Closes the session once it is idle; ends when the session is gone.
async fn watch(watched: Weak<IdleWatch>) {
    loop {
        let pause = match watched.upgrade() {
            Some(watch) => {
                (watch.limit / 4).clamp(Duration::from_millis(250), Duration::from_secs(30))
            }
            None => return,
        };
        tokio::time::sleep(pause).await;
        let Some(watch) = watched.upgrade() else {
            return;
        };
        if let Some(id) = watch.expired() {
            let sessions = watch.sessions.clone();
            let limit = watch.limit;
            // The handler holds the watch: let go of it before the session
            // (and with it the handler) is closed.
            drop(watch);
            tracing::info!(session = %id, ?limit, "the MCP session was idle: closing it");
            if let Err(error) = sessions.close_session(&id).await {
                tracing::warn!(session = %id, %error, "cannot close the idle MCP session");
            }
            return;
        }
    }
}
