//! How the `sandbox` and `key` commands reach a server: the local one on
//! its Unix socket (started on demand), or a remote one named by `--host`
//! or `AIRLOCK_HOST` (with `AIRLOCK_API_KEY` and `AIRLOCK_CA_CERT`); and
//! the API's messages as the library's types the printing code shares with
//! `airlock run`.

use std::path::PathBuf;
use std::time::Duration;

use airlock::{CellDone, CellError, CellEvent, CellStatus, Event, Exit, ExitStatus, MimeBundle};
use airlock_client::api::{self, code_event, process_event};
use airlock_client::{Client, ClientError, Endpoint};

/// Where the server is (flattened into `sandbox` and `key`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServerOptions {
    /// The local server's socket (default: daemon.sock under
    /// AIRLOCK_STATE_DIR, else $XDG_RUNTIME_DIR/airlock or /tmp/airlock).
    #[arg(long, global = true, value_name = "PATH")]
    pub socket: Option<PathBuf>,

    /// A remote server, https://HOST:PORT (default: AIRLOCK_HOST; unset:
    /// the local server). Its key comes from AIRLOCK_API_KEY, a private
    /// CA's certificate from AIRLOCK_CA_CERT.
    #[arg(long, global = true, value_name = "URL")]
    pub host: Option<String>,
}

/// The local server's socket.
pub fn default_socket() -> PathBuf {
    airlock::state_dir::default_base().join(airlock_client::SOCKET_NAME)
}

impl ServerOptions {
    /// Where the options (and the environment) point.
    pub fn endpoint(&self) -> Result<Endpoint, String> {
        let socket = self.socket.clone().unwrap_or_else(default_socket);
        match &self.host {
            Some(host) => Endpoint::remote(
                host,
                std::env::var(airlock_client::API_KEY_ENV).ok(),
                std::env::var_os(airlock_client::CA_CERT_ENV).map(PathBuf::from),
            ),
            None => Endpoint::from_env(socket),
        }
        .map_err(message)
    }

    /// Connects; the local server is started when nobody answers.
    pub async fn connect(&self) -> Result<Client, String> {
        match self.endpoint()? {
            Endpoint::Local { socket } => {
                let program = std::env::current_exe().map_err(|e| {
                    format!("cannot find the airlock binary to start the local server: {e}")
                })?;
                Client::connect_or_start(&socket, &program).await
            }
            remote => remote.connect().await,
        }
        .map_err(message)
    }
}

/// What the user reads of a failure.
pub fn message(error: ClientError) -> String {
    airlock::error_chain(&error)
}

/// A program's end as the library's [`Exit`].
pub fn exit(exit: &api::ProcessExit) -> Exit {
    let status = match exit.signal {
        0 => ExitStatus::Code(exit.exit_code),
        signal => ExitStatus::Signal(signal),
    };
    Exit {
        timed_out: exit.timed_out,
        oom_killed: exit.oom_killed,
        duration: Duration::from_millis(exit.duration_ms),
        ..Exit::from_status(status)
    }
}

/// A program's event as the library's [`Event`] (`None` for `started`).
pub fn event(event: process_event::Event) -> Option<Event> {
    Some(match event {
        process_event::Event::Stdout(output) => Event::Stdout(output.data),
        process_event::Event::Stderr(output) => Event::Stderr(output.data),
        process_event::Event::Dropped(bytes) => Event::Dropped(bytes),
        process_event::Event::Exited(ended) => Event::Exited(exit(&ended)),
        process_event::Event::Started(_) => return None,
    })
}

/// A cell's event as the library's [`CellEvent`].
pub fn cell_event(event: code_event::Event) -> CellEvent {
    match event {
        code_event::Event::Stdout(data) => CellEvent::Stdout(data),
        code_event::Event::Stderr(data) => CellEvent::Stderr(data),
        code_event::Event::Result(result) => {
            let bundle =
                MimeBundle::from_items(result.items.into_iter().map(|i| (i.mime_type, i.data)));
            match result.is_main_result {
                true => CellEvent::Result(bundle),
                false => CellEvent::Display(bundle),
            }
        }
        code_event::Event::Error(error) => CellEvent::Error(CellError {
            name: error.name,
            value: error.value,
            traceback: error.traceback,
        }),
        code_event::Event::Done(done) => CellEvent::Done(CellDone {
            status: match done.status() {
                api::CellStatus::Ok => CellStatus::Ok,
                api::CellStatus::Interrupted => CellStatus::Interrupted,
                api::CellStatus::Error | api::CellStatus::Unspecified => CellStatus::Error,
            },
            execution_count: done.execution_count,
            timed_out: done.timed_out,
            context_restarted: done.context_restarted,
            duration: Duration::from_millis(done.duration_ms),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exits_keep_codes_and_signals() {
        let ended = api::ProcessExit {
            exit_code: 3,
            ..Default::default()
        };
        assert_eq!(exit(&ended).status, ExitStatus::Code(3));
        let killed = api::ProcessExit {
            exit_code: -1,
            signal: 9,
            timed_out: true,
            ..Default::default()
        };
        let killed = exit(&killed);
        assert_eq!(killed.status, ExitStatus::Signal(9));
        assert!(killed.timed_out);
    }
}
