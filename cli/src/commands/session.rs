//! The one loop that drives a running program for `airlock run` and
//! `airlock sandbox exec`: its output on the matching host streams as it
//! arrives, the host's stdin forwarded when it is not a terminal, the first
//! Ctrl-C forwarded as SIGINT (a second one, or SIGTERM, ends the session),
//! a backstop past `--timeout` in case its kill is never reported, and at
//! the end the message and exit code airlock reports.
//!
//! The program is a [`Program`]: a local [`Execution`] (`run`, which booted
//! the sandbox) or a server's [`ProcessStream`] (`sandbox exec`). Ending the
//! session early kills the sandbox of a local program (the caller drops
//! it) and the server's program (the client hangs up; its start asked for
//! that).
//!
//! Exit codes: the program's own (128+N when signal N killed it), 124 for
//! `--timeout`, 128+N when signal N ended the session, 125 when Airlock
//! failed.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use airlock::{Event, Execution, Exit, ProcessHandle, Signal};
use tokio::signal::unix::{signal, Signal as SignalStream, SignalKind};

use airlock_client::{ProcessInputs, ProcessStream};

use super::program::{exit_code, host_stdin, print_event, EXIT_TIMEOUT};
use super::remote::{event, message};
use super::EXIT_AIRLOCK_ERROR;

/// How long after `--timeout` the session waits for the kill to be
/// reported before it gives up on the program.
const TIMEOUT_GRACE: Duration = Duration::from_secs(30);

/// A program the session drives.
pub enum Program {
    /// In a sandbox this process booted (`run`).
    Local(Box<Execution>),
    /// In a sandbox a server holds (`sandbox exec`).
    Remote(Box<ProcessStream>),
}

impl Program {
    /// Its next event; the exit is the last. `Err` is the message for the
    /// user.
    async fn next_event(&mut self) -> Result<Event, String> {
        match self {
            Program::Local(execution) => match execution.next_event().await {
                Ok(Some(event)) => Ok(event),
                Ok(None) => Err(airlock::Error::Protocol(
                    "output ended without an exit status".into(),
                )
                .to_string()),
                Err(error) => Err(error.to_string()),
            },
            Program::Remote(stream) => loop {
                match stream.next_event().await {
                    Ok(Some(next)) => match event(next) {
                        Some(event) => return Ok(event),
                        None => continue,
                    },
                    Ok(None) => return Err("the server ended the program's stream early".into()),
                    Err(error) => return Err(message(error)),
                }
            },
        }
    }

    /// Sends SIGINT to its process tree.
    async fn interrupt(&self) {
        match self {
            Program::Local(execution) => {
                if let Err(error) = execution.signal(Signal::INT).await {
                    tracing::warn!(%error, "cannot forward SIGINT");
                }
            }
            Program::Remote(stream) => {
                let signal = Signal::INT.number();
                if stream.inputs().signal(signal).await.is_err() {
                    tracing::warn!("cannot forward SIGINT: the server connection is gone");
                }
            }
        }
    }

    /// Copies the host's stdin to the program's, then closes it, in a task.
    fn forward_stdin(&self) {
        match self {
            Program::Local(execution) => {
                tokio::spawn(stdin_to_process(execution.handle()));
            }
            Program::Remote(stream) => {
                tokio::spawn(stdin_to_server(stream.inputs()));
            }
        }
    }

    /// What ending the session early kills.
    fn victim(&self) -> &'static str {
        match self {
            Program::Local(_) => "sandbox",
            Program::Remote(_) => "command",
        }
    }
}

/// How a session ended.
#[derive(Debug)]
pub enum Ending {
    /// The program exited (or its timeout killed it).
    Finished(Exit),
    /// Its `--timeout` kill was not reported in time; `killed` is what the
    /// session ending kills.
    TimedOut {
        after: Duration,
        killed: &'static str,
    },
    /// Signal N (SIGINT twice, or SIGTERM) ended the session.
    Signalled(i32),
    /// Airlock failed; the message is for the user.
    Failed(String),
}

impl Ending {
    /// Tells the user what they should know about the ending and returns
    /// airlock's exit code. `timeout` is the `--timeout` given.
    pub fn report(&self, timeout: Option<Duration>) -> u8 {
        match self {
            Ending::Finished(exit) if exit.timed_out => {
                eprintln!(
                    "airlock: command timed out after {:?}; its processes were killed",
                    timeout.unwrap_or(exit.duration)
                );
                EXIT_TIMEOUT
            }
            Ending::Finished(exit) => {
                if exit.oom_killed {
                    eprintln!(
                        "airlock: the guest ran out of memory and killed part of the command"
                    );
                }
                exit_code(exit)
            }
            Ending::TimedOut { after, killed } => {
                eprintln!("airlock: command timed out after {after:?}; {killed} killed");
                EXIT_TIMEOUT
            }
            Ending::Signalled(signal) => u8::try_from(128 + signal).unwrap_or(EXIT_AIRLOCK_ERROR),
            Ending::Failed(message) => fail(message),
        }
    }
}

/// How a session went: its ending, and when the first output came.
#[derive(Debug)]
pub struct Ran {
    pub ending: Ending,
    pub first_output: Option<Instant>,
}

/// The host side of a session: the signals that reach it, and whether the
/// host's stdin goes to the program.
pub struct Session {
    interrupt: SignalStream,
    terminate: SignalStream,
    stdin_piped: bool,
}

impl Session {
    /// Takes over SIGINT and SIGTERM; from here on they reach the session
    /// (see [`Session::signalled`] for the time before a program runs).
    pub fn new() -> Result<Session, String> {
        let interrupt = signal(SignalKind::interrupt())
            .map_err(|error| format!("cannot handle SIGINT: {error}"))?;
        let terminate = signal(SignalKind::terminate())
            .map_err(|error| format!("cannot handle SIGTERM: {error}"))?;
        Ok(Session {
            interrupt,
            terminate,
            stdin_piped: !std::io::stdin().is_terminal(),
        })
    }

    /// Whether the host's stdin is forwarded to the program (it is, unless
    /// it is a terminal): the program's stdin must be piped then.
    pub fn stdin_piped(&self) -> bool {
        self.stdin_piped
    }

    /// The number of the next SIGINT or SIGTERM: ends what comes before
    /// the program (booting, connecting).
    pub async fn signalled(&mut self) -> i32 {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::INT.number(),
            _ = self.terminate.recv() => Signal::TERM.number(),
        }
    }

    /// Drives `program` to its end. `timeout` is the `--timeout` the agent
    /// enforces; the session gives up [`TIMEOUT_GRACE`] after it.
    pub async fn drive(&mut self, mut program: Program, timeout: Option<Duration>) -> Ran {
        if self.stdin_piped {
            program.forward_stdin();
        }
        let backstop = tokio::time::sleep(timeout.map_or(Duration::MAX / 4, |t| t + TIMEOUT_GRACE));
        tokio::pin!(backstop);
        let mut first_output = None;
        let mut interrupted = false;
        let ending = loop {
            tokio::select! {
                event = program.next_event() => match event {
                    Ok(Event::Exited(exit)) => break Ending::Finished(exit),
                    Ok(event) => {
                        first_output.get_or_insert_with(Instant::now);
                        print_event(event).await;
                    }
                    Err(message) => break Ending::Failed(message),
                },
                _ = self.interrupt.recv() => {
                    if interrupted {
                        break Ending::Signalled(Signal::INT.number());
                    }
                    interrupted = true;
                    eprintln!(
                        "airlock: interrupting the command (Ctrl-C again to kill the {})",
                        program.victim()
                    );
                    program.interrupt().await;
                }
                _ = self.terminate.recv() => break Ending::Signalled(Signal::TERM.number()),
                _ = &mut backstop => break Ending::TimedOut {
                    after: timeout.unwrap_or_default(),
                    killed: program.victim(),
                },
            }
        };
        Ran {
            ending,
            first_output,
        }
    }
}

/// Prints `message` as airlock's and returns [`EXIT_AIRLOCK_ERROR`].
pub fn fail(message: &str) -> u8 {
    eprintln!("airlock: {message}");
    EXIT_AIRLOCK_ERROR
}

/// The host's stdin to a local program's, then its end.
async fn stdin_to_process(handle: ProcessHandle) {
    let Some(rx) = host_stdin() else {
        return;
    };
    let chunks = futures::stream::unfold(rx, |mut rx| async move {
        let chunk = rx.recv().await?;
        Some((chunk, rx))
    });
    let forwarded = handle.stream_stdin(chunks).await;
    let closed = match forwarded {
        Ok(()) => handle.close_stdin().await,
        Err(error) => Err(error),
    };
    // The command may exit (or close its stdin) before reading it all.
    if let Err(error) = closed {
        tracing::debug!(%error, "stdin not forwarded to the end");
    }
}

/// The host's stdin to the server's program, then its end.
async fn stdin_to_server(inputs: ProcessInputs) {
    if let Some(mut chunks) = host_stdin() {
        while let Some(chunk) = chunks.recv().await {
            if inputs.stdin(chunk).await.is_err() {
                return;
            }
        }
    }
    let _ = inputs.close_stdin().await;
}

#[cfg(test)]
mod tests {
    use airlock::ExitStatus;

    use super::*;

    #[test]
    fn endings_map_to_exit_codes() {
        let mut exit = Exit::from_status(ExitStatus::Code(3));
        assert_eq!(Ending::Finished(exit).report(None), 3);
        exit.oom_killed = true;
        exit.status = ExitStatus::Signal(9);
        assert_eq!(Ending::Finished(exit).report(None), 137);
        exit.timed_out = true;
        let timeout = Some(Duration::from_secs(1));
        assert_eq!(Ending::Finished(exit).report(timeout), EXIT_TIMEOUT);
        let late = Ending::TimedOut {
            after: Duration::from_secs(1),
            killed: "sandbox",
        };
        assert_eq!(late.report(timeout), EXIT_TIMEOUT);
        assert_eq!(Ending::Signalled(2).report(None), 130);
        assert_eq!(Ending::Signalled(15).report(None), 143);
        assert_eq!(Ending::Failed("x".into()).report(None), EXIT_AIRLOCK_ERROR);
    }
}
