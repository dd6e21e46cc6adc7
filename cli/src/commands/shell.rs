//! `airlock shell`: an interactive shell (or any program) on a terminal in
//! a fresh sandbox.
//!
//! The program runs on a pseudo-terminal in the guest (`Command::pty`)
//! sized like the host's terminal, with the host's `TERM`. The host's
//! terminal is put in raw mode ([`RawMode`]) so every key, ^C and ^Z
//! included, goes to the guest's terminal as typed; window-size changes
//! (SIGWINCH) are forwarded as `resize`. The terminal is restored on every
//! way out, before anything is printed.
//!
//! stdin must be a terminal: `airlock shell` refuses to start otherwise and
//! points at `airlock run`. (Typing piped input at a terminal cannot end
//! reliably: a ^D typed ahead while a shell runs a command reaches a line
//! editor such as busybox ash's as a NUL byte, not as end-of-file.)
//!
//! The program takes `run`'s options ([`ProgramOptions`]: env, cwd, user,
//! timeout, limits, privilege). airlock exits with the program's exit
//! status (128+N when a signal N killed it), 124 when `--timeout` killed
//! it, 125 when Airlock itself failed, 128+N when SIGTERM or SIGHUP ended
//! the session (the sandbox is torn down); the endings are reported as
//! `run` reports them ([`Ending::report`]). The sandbox is torn down on
//! every path.

use std::time::Duration;

use airlock::{Command, Event, Execution, ProcessHandle, Signal};
use tokio::io::AsyncWriteExt;
use tokio::signal::unix::{signal, Signal as SignalStream, SignalKind};

use super::session::{fail, Ending};
use super::terminal::{self, RawMode};
use super::vm_options::BootOptions;
use super::{ProgramOptions, ProgramOptionsError};

/// How long the guest gets to power off before it is killed.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);
/// The largest piece of host input sent at once.
const INPUT_CHUNK: usize = 4096;
/// How many pieces of host input may wait to be sent.
const INPUT_QUEUE: usize = 16;

/// `airlock shell` options.
#[derive(Debug, clap::Args)]
// The shared `--no-image` and `--workspace`, their help worded for `shell`.
#[command(
    mut_arg("no_image", |arg| arg.help(
        "No root image: a shell in the initramfs's busybox environment"
    )),
    mut_arg("workspace", |arg| arg.help(
        "Keep what the session writes (outside /tmp) in this disk file for \
         the next one; created on first use. One sandbox at a time"
    )),
)]
pub struct ShellArgs {
    #[command(flatten)]
    pub boot: BootOptions,

    /// All of `run`'s: they make as much sense for a program on a
    /// terminal. (What does not, a piped stdin, is no option: the host's
    /// terminal is the input.)
    #[command(flatten)]
    pub program: ProgramOptions,

    /// The program to run instead of `sh`, with its arguments.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Host signals that end or reach the session.
struct Signals {
    interrupt: SignalStream,
    terminate: SignalStream,
    hangup: SignalStream,
    window_change: SignalStream,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
            window_change: signal(SignalKind::window_change())?,
        })
    }
}

pub async fn run(args: ShellArgs, verbose: bool) -> u8 {
    if !terminal::is_interactive() {
        return fail(
            "airlock shell needs a terminal on stdin; \
             to run piped input use `airlock run -- sh` instead",
        );
    }
    let mut signals = match Signals::install() {
        Ok(signals) => signals,
        Err(error) => return fail(&format!("cannot handle signals: {error}")),
    };
    let builder = match args.boot.builder() {
        Ok(builder) => builder,
        Err(message) => return fail(&message),
    };
    let timeout = match args.program.timeout() {
        Ok(timeout) => timeout,
        Err(error) => return fail(&error.to_string()),
    };
    // Starting is cancellable: dropping the builder's future kills the VM.
    let sandbox = tokio::select! {
        started = builder.start() => match started {
            Ok(sandbox) => sandbox,
            Err(error) => return fail(&error.to_string()),
        },
        _ = signals.interrupt.recv() => return 130,
        _ = signals.terminate.recv() => return 143,
        _ = signals.hangup.recv() => return 129,
    };
    if verbose {
        eprintln!(
            "airlock: sandbox ready (accel {})",
            sandbox.accel().qemu_name()
        );
    }

    let command = match command(&args, terminal::window_size()) {
        Ok(command) => command,
        Err(error) => return fail(&error.to_string()),
    };
    let ending = match sandbox.exec(&command).await {
        Ok(execution) => {
            // Raw mode only while the guest's terminal is in charge: the
            // guard goes before anything below prints.
            let raw = match RawMode::enter() {
                Ok(raw) => raw,
                Err(error) => {
                    drop(sandbox);
                    let cause = std::error::Error::source(&error)
                        .map(|cause| format!(": {cause}"))
                        .unwrap_or_default();
                    return fail(&format!("{error}{cause}"));
                }
            };
            let ending = session(execution, &mut signals).await;
            drop(raw);
            ending
        }
        Err(error) => Ending::Failed(error.to_string()),
    };
    match ending {
        Ending::Finished(exit) if !exit.timed_out => {
            let code = Ending::Finished(exit).report(timeout);
            if let Err(error) = sandbox.shutdown(SHUTDOWN_GRACE).await {
                tracing::warn!(%error, "shutdown was not clean");
            }
            code
        }
        ending => {
            drop(sandbox);
            ending.report(timeout)
        }
    }
}

/// The program on a terminal of `size`, with the host's `TERM` (so it
/// draws for the terminal it is really shown on) unless `--env` sets one.
fn command(args: &ShellArgs, size: airlock::TerminalSize) -> Result<Command, ProgramOptionsError> {
    let (program, rest) = match args.command.split_first() {
        Some((program, rest)) => (program.clone(), rest.to_vec()),
        None => ("sh".to_owned(), Vec::new()),
    };
    let mut command = Command::new(program).args(rest).pty(size);
    if let Ok(term) = std::env::var("TERM") {
        command = command.env("TERM", term);
    }
    args.program.apply(command)
}

/// Runs the session to its end: input to the guest's terminal, its screen
/// to stdout, window sizes and signals forwarded.
async fn session(mut execution: Execution, signals: &mut Signals) -> Ending {
    let input = tokio::spawn(forward_input(execution.handle()));
    let handle = execution.handle();
    let ending = loop {
        tokio::select! {
            event = execution.next_event() => match event {
                Ok(Some(Event::Exited(exit))) => break Ending::Finished(exit),
                Ok(Some(event)) => show(event).await,
                Ok(None) => break Ending::Failed("output ended without an exit status".into()),
                Err(error) => break Ending::Failed(error.to_string()),
            },
            _ = signals.window_change.recv() => {
                if let Err(error) = handle.resize(terminal::window_size()).await {
                    tracing::debug!(%error, "resize not forwarded");
                }
            }
            // Only from `kill`: in raw mode ^C is a key for the guest.
            _ = signals.interrupt.recv() => {
                if let Err(error) = handle.signal(Signal::INT).await {
                    tracing::debug!(%error, "SIGINT not forwarded");
                }
            }
            _ = signals.terminate.recv() => break Ending::Signalled(15),
            _ = signals.hangup.recv() => break Ending::Signalled(1),
        }
    };
    input.abort();
    ending
}

/// Writes the guest terminal's output to stdout as it comes. A closed
/// stdout must not stop the session from ending properly, so write errors
/// are ignored.
async fn show(event: Event) {
    match event {
        Event::Stdout(data) => {
            let mut stdout = tokio::io::stdout();
            let _ = stdout.write_all(&data).await;
            let _ = stdout.flush().await;
        }
        // A terminal has one output stream; nothing comes here.
        Event::Stderr(data) => {
            let mut stderr = tokio::io::stderr();
            let _ = stderr.write_all(&data).await;
        }
        Event::Dropped(_) | Event::Exited(_) => {}
    }
}

/// Types the host's keys at the guest's terminal.
async fn forward_input(handle: ProcessHandle) {
    let Some(rx) = super::program::read_stdin(INPUT_CHUNK, INPUT_QUEUE) else {
        return;
    };
    let keys = futures::stream::unfold(rx, |mut rx| async move {
        let chunk = rx.recv().await?;
        Some((chunk, rx))
    });
    // The program may exit before it read everything.
    if let Err(error) = handle.stream_stdin(keys).await {
        tracing::debug!(%error, "input not forwarded to the end");
    }
}
