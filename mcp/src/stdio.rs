//! `airlock mcp`: one MCP session over stdin and stdout, what desktop and
//! IDE hosts start. The session ends when the host closes stdin (or the
//! process is told to stop with SIGTERM, SIGINT or SIGHUP); its sandboxes
//! are killed before the process exits.

use std::sync::Arc;

use rmcp::service::ServiceExt;
use tokio_util::sync::CancellationToken;

use crate::access::Connector;
use crate::error::ServeError;
use crate::registry::Registry;
use crate::session::{Access, Session, SessionSandbox};
use crate::tools::{AirlockTools, Transport};

/// Serves one session on stdin and stdout until the host hangs up or a
/// signal says stop, then kills the session's sandboxes.
pub async fn serve_stdio(connector: Connector, sandbox: SessionSandbox) -> Result<(), ServeError> {
    let registry = Arc::new(Registry::default());
    let session = Session::new(
        registry.clone(),
        Arc::new(sandbox),
        Access::fixed(connector),
    );
    let tools = AirlockTools::new(session, Transport::Stdio);
    let session = tools.session().clone();
    let stop = CancellationToken::new();
    let signals = watch_signals(stop.clone())?;
    let outcome = match tools
        .serve_with_ct(rmcp::transport::stdio(), stop.child_token())
        .await
    {
        Ok(running) => match running.waiting().await {
            Ok(reason) => {
                tracing::info!(?reason, "the MCP session ended");
                Ok(())
            }
            Err(error) => Err(ServeError::Session(error.to_string())),
        },
        // The host went away (or a signal came) before the session began.
        Err(error) => {
            tracing::info!(%error, "the MCP session ended before it began");
            Ok(())
        }
    };
    signals.abort();
    session.close().await;
    registry.shutdown().await;
    outcome
}

/// Cancels `stop` on SIGTERM, SIGINT or SIGHUP.
fn watch_signals(stop: CancellationToken) -> Result<tokio::task::JoinHandle<()>, ServeError> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).map_err(ServeError::Signals)?;
    let mut int = signal(SignalKind::interrupt()).map_err(ServeError::Signals)?;
    let mut hup = signal(SignalKind::hangup()).map_err(ServeError::Signals)?;
    Ok(tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
            _ = hup.recv() => {}
        }
        tracing::info!("told to stop: ending the MCP session");
        stop.cancel();
    }))
}
