//! `Exec` on the daemon's side: stream a started program's events to the
//! client, and apply the client's messages (stdin, its end, signals) as
//! they come. A client that ends its side of the call, or goes away,
//! before the program ends takes the program's tree with it (SIGKILL).

use airlock_proto::daemon::v1 as pb;
use airlock_proto::v1::{process_event, ProcessEvent, Started};
use tokio::sync::mpsc;
use tonic::{Status, Streaming};

use super::wire;
use crate::commands::{ProgramOptions, ProgramOptionsError};
use airlock::{error_chain, Command, Execution, ProcessHandle, Signal, Stdin};

/// How many events may wait for the client.
pub(super) const QUEUE: usize = 4;

/// The guest command `start` asks for: its program options turned into a
/// command as `airlock run` turns them, and its stdin piped when the
/// client sends it.
pub(super) fn command(start: &pb::ExecStart) -> Result<Command, ProgramOptionsError> {
    let options = ProgramOptions::from(start.options.clone().unwrap_or_default());
    let command = options.command(&start.argv)?;
    Ok(match start.stdin {
        true => command.stdin(Stdin::Piped),
        false => command,
    })
}

/// Streams `execution` to `events` until it exits or the client goes.
pub(super) async fn run(
    mut execution: Execution,
    inputs: Streaming<pb::ExecRequest>,
    events: mpsc::Sender<Result<ProcessEvent, Status>>,
) {
    let handle = execution.handle();
    let pid = execution.pid();
    let started = ProcessEvent {
        // The agent's timestamps stay in the daemon.
        event: Some(process_event::Event::Started(Started {
            pid,
            ..Started::default()
        })),
        offset: 0,
    };
    if events.send(Ok(started)).await.is_err() {
        kill(&handle).await;
        return;
    }
    let mut inputs = tokio::spawn(apply_inputs(inputs, handle.clone()));
    loop {
        tokio::select! {
            event = execution.next_event() => {
                let (messages, last) = match event {
                    Ok(Some(event)) => {
                        let last = matches!(event, airlock::Event::Exited(_));
                        (wire::event_messages(event).into_iter().map(Ok).collect(), last)
                    }
                    Ok(None) => (vec![Err(ended_without_status())], true),
                    Err(error) => (vec![Err(wire::error_status(&error))], true),
                };
                if !send_all(&events, messages).await {
                    tracing::debug!(pid, "client gone; killing the program");
                    kill(&handle).await;
                    break;
                }
                if last {
                    break;
                }
            }
            _ = &mut inputs => {
                tracing::debug!(pid, "client hung up; killing the program");
                kill(&handle).await;
                break;
            }
            () = events.closed() => {
                tracing::debug!(pid, "client gone; killing the program");
                kill(&handle).await;
                break;
            }
        }
    }
    inputs.abort();
}

fn ended_without_status() -> Status {
    wire::error_status(&airlock::Error::Protocol(
        "the program's output ended without an exit status".into(),
    ))
}

/// Sends every message; `false` once the client is gone.
async fn send_all(
    events: &mpsc::Sender<Result<ProcessEvent, Status>>,
    messages: Vec<Result<ProcessEvent, Status>>,
) -> bool {
    for message in messages {
        if events.send(message).await.is_err() {
            return false;
        }
    }
    true
}

/// Applies the client's messages until it ends its side of the call.
async fn apply_inputs(mut inputs: Streaming<pb::ExecRequest>, handle: ProcessHandle) {
    use pb::exec_request::Input;
    loop {
        let input = match inputs.message().await {
            Ok(Some(pb::ExecRequest { input: Some(input) })) => input,
            Ok(Some(pb::ExecRequest { input: None })) => continue,
            Ok(None) => return,
            Err(status) => {
                tracing::debug!(?status, "exec input ended");
                return;
            }
        };
        // The program may have closed its stdin or exited: not fatal.
        let applied = match input {
            Input::Stdin(data) => handle.write_stdin(data).await,
            Input::CloseStdin(pb::CloseStdin {}) => handle.close_stdin().await,
            Input::Signal(signal) => handle.signal(Signal::from_raw(signal)).await,
            Input::Start(_) => {
                tracing::warn!("a second start message; ignored");
                Ok(())
            }
        };
        if let Err(error) = applied {
            tracing::debug!(error = %error_chain(&error), "input not applied");
        }
    }
}

async fn kill(handle: &ProcessHandle) {
    if let Err(error) = handle.kill().await {
        tracing::debug!(error = %error_chain(&error), "kill");
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_request_becomes_the_command_run_would_build() {
        let options = ProgramOptions {
            env: vec![("A".into(), "1".into())],
            user: Some("1000".into()),
            timeout: Some(2.0),
            limit_memory: Some(64 << 20),
            limit_pids: Some(8),
            privileged: true,
            ..ProgramOptions::default()
        };
        let argv = vec!["sh".to_owned(), "-c".to_owned(), "true".to_owned()];
        let start = pb::ExecStart {
            id: "sb".into(),
            argv: argv.clone(),
            options: Some(pb::ProgramOptions::from(&options)),
            stdin: true,
        };
        let expected = options.command(&argv).unwrap().stdin(Stdin::Piped);
        assert_eq!(command(&start).unwrap(), expected);

        let refused = pb::ExecStart {
            argv: vec![],
            ..start.clone()
        };
        assert_eq!(command(&refused), Err(ProgramOptionsError::NoProgram));
        let bad = ProgramOptions {
            timeout: Some(-1.0),
            ..options
        };
        let refused = pb::ExecStart {
            options: Some(pb::ProgramOptions::from(&bad)),
            ..start
        };
        assert_eq!(command(&refused), Err(ProgramOptionsError::BadTimeout));
    }
}
