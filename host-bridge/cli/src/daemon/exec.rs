//! `exec` on the daemon's side: start the program, stream its events to
//! the client as frames, and apply the client's input frames (stdin, its
//! end, signals) as they come. A client that hangs up before the program
//! ends takes the program's tree with it (SIGKILL).

use std::time::Duration;

use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use super::protocol::{read_frame, write_frame, ExecRequest, Input, Response, DATA_CHUNK};
use super::DaemonError;
use airlock::{error_chain, Command, Event, ExitStatus, ProcessHandle, Sandboxes, Signal, Stdin};

/// Runs `request` and streams it to `writer` until it exits or the client
/// goes.
pub(super) async fn run(
    request: ExecRequest,
    sandboxes: &Sandboxes,
    reader: OwnedReadHalf,
    mut writer: OwnedWriteHalf,
) {
    let started = async {
        let command = command(&request)?;
        let sandbox = sandboxes.get(&request.id)?;
        sandbox.exec(&command).await
    };
    let mut execution = match started.await {
        Ok(execution) => execution,
        Err(error) => {
            let message = error_chain(&error);
            let _ = write_frame(&mut writer, &Response::Error { message }).await;
            return;
        }
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

/// The guest command for `request`.
fn command(request: &ExecRequest) -> airlock::Result<Command> {
    let Some((program, args)) = request.argv.split_first() else {
        return Err(airlock::Error::Config("exec needs a program".into()));
    };
    let mut command = Command::new(program.clone())
        .args(args.iter().cloned())
        .envs(request.env.iter().cloned());
    if let Some(cwd) = &request.cwd {
        command = command.cwd(cwd.clone());
    }
    if let Some(user) = &request.user {
        command = command.user(user.clone());
    }
    if let Some(secs) = request.timeout_secs {
        let timeout = Duration::try_from_secs_f64(secs)
            .map_err(|_| airlock::Error::Config(format!("bad timeout {secs}")))?;
        command = command.timeout(timeout);
    }
    if request.stdin {
        command = command.stdin(Stdin::Piped);
    }
    Ok(command)
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
        Event::Exited(exit) => {
            let (code, signal) = match exit.status {
                ExitStatus::Code(code) => (Some(code), None),
                ExitStatus::Signal(signal) => (None, Some(signal)),
            };
            let exited = Response::Exited {
                code,
                signal,
                timed_out: exit.timed_out,
                oom_killed: exit.oom_killed,
                duration_ms: u64::try_from(exit.duration.as_millis()).unwrap_or(u64::MAX),
            };
            (vec![exited], true)
        }
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
