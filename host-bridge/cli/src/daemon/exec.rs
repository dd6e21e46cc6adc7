//! `exec` on the daemon's side: start the program, stream its events to
//! the client as frames, and apply the client's input frames (stdin, its
//! end, signals) as they come. A client that hangs up before the program
//! ends takes the program's tree with it (SIGKILL).

use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use super::protocol::{
    read_frame, write_frame, ExecRequest, ExitReport, Input, Response, DATA_CHUNK,
};
use super::DaemonError;
use crate::commands::ProgramOptionsError;
use airlock::{error_chain, Command, Event, ProcessHandle, Sandboxes, Signal, Stdin};

/// Runs `request` and streams it to `writer` until it exits or the client
/// goes.
pub(super) async fn run(
    request: ExecRequest,
    sandboxes: &Sandboxes,
    reader: OwnedReadHalf,
    mut writer: OwnedWriteHalf,
) {
    let command = match command(&request) {
        Ok(command) => command,
        Err(error) => return refuse(&mut writer, error.to_string()).await,
    };
    let started = async {
        let sandbox = sandboxes.get(&request.id)?;
        sandbox.exec(&command).await
    };
    let mut execution = match started.await {
        Ok(execution) => execution,
        Err(error) => return refuse(&mut writer, error_chain(&error)).await,
    };
    let handle = execution.handle();
    let pid = execution.pid();
    tracing::debug!(id = %request.id, pid, "exec started");
    if write_frame(&mut writer, &Response::Started { pid })
        .await
        .is_err()
    {
        kill(&handle).await;
        return;
    }
    let mut inputs = tokio::spawn(apply_inputs(reader, handle.clone()));
    loop {
        tokio::select! {
            event = execution.next_event() => {
                let (frames, last) = match event {
                    Ok(Some(event)) => frames(event),
                    Ok(None) => (vec![ended_without_status()], true),
                    Err(error) => (vec![Response::Error { message: error_chain(&error) }], true),
                };
                if let Err(error) = send_all(&mut writer, &frames).await {
                    tracing::debug!(error = %error_chain(&error), "client gone; killing the program");
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
        }
    }
    inputs.abort();
}

/// The guest command for `request`: its program options turned into a
/// command as `airlock run` turns them, and its stdin piped when the
/// client sends it.
fn command(request: &ExecRequest) -> Result<Command, ProgramOptionsError> {
    let command = request.options.command(&request.argv)?;
    Ok(match request.stdin {
        true => command.stdin(Stdin::Piped),
        false => command,
    })
}

/// Answers a request that cannot start with why.
async fn refuse(writer: &mut OwnedWriteHalf, message: String) {
    if let Err(error) = write_frame(writer, &Response::Error { message }).await {
        tracing::debug!(error = %error_chain(&error), "client gone before the refusal");
    }
}

/// An event as frames (output split into [`DATA_CHUNK`]s), and whether it
/// was the last.
fn frames(event: Event) -> (Vec<Response>, bool) {
    let chunks = |data: &[u8], stdout: bool| -> Vec<Response> {
        data.chunks(DATA_CHUNK)
            .map(|chunk| match stdout {
                true => Response::Stdout {
                    data: chunk.to_vec(),
                },
                false => Response::Stderr {
                    data: chunk.to_vec(),
                },
            })
            .collect()
    };
    match event {
        Event::Stdout(data) => (chunks(&data, true), false),
        Event::Stderr(data) => (chunks(&data, false), false),
        Event::Dropped(bytes) => (vec![Response::Dropped { bytes }], false),
        Event::Exited(exit) => (vec![Response::Exited(ExitReport::new(&exit))], true),
    }
}

fn ended_without_status() -> Response {
    Response::Error {
        message: "the program's output ended without an exit status".into(),
    }
}

async fn send_all(writer: &mut OwnedWriteHalf, frames: &[Response]) -> Result<(), DaemonError> {
    for frame in frames {
        write_frame(writer, frame).await?;
    }
    Ok(())
}

/// Applies the client's input frames until it hangs up (or sends garbage).
async fn apply_inputs(mut reader: OwnedReadHalf, handle: ProcessHandle) {
    loop {
        let input = match read_frame::<_, Input>(&mut reader).await {
            Ok(Some(input)) => input,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(error = %error_chain(&error), "bad input frame; hanging up");
                return;
            }
        };
        // The program may have closed its stdin or exited: not fatal.
        let applied = match input {
            Input::Stdin { data } => handle.write_stdin(data).await,
            Input::StdinEnd => handle.close_stdin().await,
            Input::Signal { signal } => handle.signal(Signal::from_raw(signal)).await,
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
    use crate::commands::ProgramOptions;

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
        let request = ExecRequest {
            id: "sb".into(),
            argv: argv.clone(),
            options: options.clone(),
            stdin: true,
        };
        let expected = options.command(&argv).unwrap().stdin(Stdin::Piped);
        assert_eq!(command(&request).unwrap(), expected);

        let refused = ExecRequest {
            argv: vec![],
            ..request.clone()
        };
        assert_eq!(command(&refused), Err(ProgramOptionsError::NoProgram));
        let refused = ExecRequest {
            options: ProgramOptions {
                timeout: Some(-1.0),
                ..options
            },
            ..request
        };
        assert_eq!(command(&refused), Err(ProgramOptionsError::BadTimeout));
    }
}
