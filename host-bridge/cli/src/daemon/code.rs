//! `RunCode` on the daemon's side: make sure a named context exists, run
//! the cell, and stream its events to the client. A client that goes away
//! drops the cell's stream, which interrupts the cell in the guest.

use airlock_proto::v1::CodeEvent;
use tokio::sync::mpsc;
use tonic::{Code, Status};

use super::wire;
use airlock::{error_chain, CellExecution, ContextOptions, Sandbox};

/// How many events may wait for the client.
pub(super) const QUEUE: usize = 4;

/// Creates the context `id` of `language` unless it exists already.
pub(super) async fn ensure_context(
    sandbox: &Sandbox,
    id: &str,
    language: airlock::Language,
) -> Result<(), Status> {
    let options = ContextOptions::new(language).id(id);
    match sandbox.contexts().create(&options).await {
        Ok(info) => {
            tracing::info!(id = info.id, %language, "context created");
            Ok(())
        }
        Err(error) if error.agent_code() == Some(Code::AlreadyExists) => Ok(()),
        Err(error) => Err(wire::error_status(&error)),
    }
}

/// Streams `execution` to `events` until the cell is done or the client
/// goes.
pub(super) async fn run(
    mut execution: CellExecution,
    events: mpsc::Sender<Result<CodeEvent, Status>>,
) {
    loop {
        let next = tokio::select! {
            next = execution.next_event() => next,
            () = events.closed() => {
                tracing::debug!("client gone; interrupting its cell");
                return;
            }
        };
        let messages: Vec<Result<CodeEvent, Status>> = match next {
            Ok(Some(event)) => wire::cell_messages(event).into_iter().map(Ok).collect(),
            Ok(None) => return,
            Err(error) => {
                tracing::debug!(error = %error_chain(&error), "cell stream failed");
                vec![Err(wire::error_status(&error))]
            }
        };
        let failed = messages.iter().any(Result::is_err);
        for message in messages {
            if events.send(message).await.is_err() {
                return;
            }
        }
        if failed {
            return;
        }
    }
}
