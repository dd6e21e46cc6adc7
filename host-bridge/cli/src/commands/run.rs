//! `airlock run`: one command in a fresh sandbox.
//!
//! Output chunks go to the matching host stream as they arrive. When the
//! host's stdin is not a terminal it is forwarded to the command (so
//! `producer | airlock run -- consumer` works); a terminal is not read. The
//! first Ctrl-C is forwarded to the command's process tree as SIGINT; a
//! second one, or SIGTERM, tears the sandbox down. `--timeout` is enforced by
//! the agent in the guest: the tree is killed, the output so far printed,
//! and airlock exits 124. The sandbox is torn down on every path.
//! `--upload` copies run after boot and before the command; `--download`
//! copies after it finishes (not after a timeout or a signal), and a failed
//! copy makes airlock exit 125.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use airlock::{Command, Event, Execution, Exit, Limits, ProcessHandle, Sandbox, Signal, Stdin};
use tokio::signal::unix::{signal, SignalKind};

use super::program::{exit_code, print_event, EXIT_TIMEOUT};
use super::{RunArgs, EXIT_AIRLOCK_ERROR};

/// How long the guest gets to power off before it is killed.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);
/// How long after `--timeout` airlock waits for the agent to report the
/// kill before it stops waiting and kills the VM itself.
const TIMEOUT_GRACE: Duration = Duration::from_secs(30);

enum Ending {
    Finished(Exit),
    /// The agent did not report the timeout kill in time.
    TimedOut(Duration),
    Signalled(i32),
    Failed(airlock::Error),
}

pub async fn run(args: RunArgs, verbose: bool) -> u8 {
    let mut sigint = match signal(SignalKind::interrupt()) {
        Ok(s) => s,
        Err(error) => return fail(&format!("cannot handle SIGINT: {error}")),
    };
    let mut sigterm = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(error) => return fail(&format!("cannot handle SIGTERM: {error}")),
    };
    let began = Instant::now();
    let builder = match args.boot.builder() {
        Ok(builder) => builder,
        Err(message) => return fail(&message),
    };
    let timeout = match args.timeout.map(Duration::try_from_secs_f64).transpose() {
        Ok(timeout) => timeout,
        Err(_) => return fail("--timeout must be a positive number of seconds"),
    };

    // Starting is cancellable too: the builder's future owns the VM until it
    // returns, and dropping it kills the VM.
    let sandbox = tokio::select! {
        started = builder.start() => match started {
            Ok(sandbox) => sandbox,
            Err(error) => return fail(&error.to_string()),
        },
        _ = sigint.recv() => return 130,
        _ = sigterm.recv() => return 143,
    };
    if let Err(error) = super::transfer::upload(&sandbox, &args.upload).await {
        eprintln!("airlock: {error}");
        drop(sandbox);
        return EXIT_AIRLOCK_ERROR;
    }
    let ready = began.elapsed();
    let mut command = Command::new(args.command[0].clone())
        .args(args.command[1..].iter().cloned())
        .envs(args.env);
    if let Some(cwd) = args.cwd {
        command = command.cwd(cwd);
    }
    if let Some(user) = args.user {
        command = command.user(user);
    }
    if let Some(timeout) = timeout {
        command = command.timeout(timeout);
    }
    let mut limits = Limits::new();
    if let Some(bytes) = args.limit_memory {
        limits = limits.memory_bytes(bytes);
    }
    if let Some(pids) = args.limit_pids {
        limits = limits.pids(pids);
    }
    if let Some(millis) = args.limit_cpus {
        limits = limits.cpu_millis(millis);
    }
    if !limits.is_empty() {
        command = command.limits(limits);
    }
    if args.privileged {
        command = command.privileged(true);
    }
    let forward_stdin = !std::io::stdin().is_terminal();
    if forward_stdin {
        command = command.stdin(Stdin::Piped);
    }

    let exec_started = Instant::now();
    let mut execution = match sandbox.exec(&command).await {
        Ok(execution) => execution,
        Err(error) => {
            eprintln!("airlock: {error}");
            drop(sandbox);
            return EXIT_AIRLOCK_ERROR;
        }
    };
    if forward_stdin {
        tokio::spawn(forward_host_stdin(execution.handle()));
    }
    // The agent enforces the timeout; this only guards against an agent
    // that never reports it.
    let backstop = tokio::time::sleep(timeout.map_or(Duration::MAX / 4, |t| t + TIMEOUT_GRACE));
    tokio::pin!(backstop);

    let mut first_output = None;
    let mut interrupted = false;
    let ending = loop {
        tokio::select! {
            event = execution.next_event() => match event {
                Ok(Some(Event::Exited(exit))) => break Ending::Finished(exit),
                Ok(Some(event)) => {
                    first_output.get_or_insert_with(|| exec_started.elapsed());
                    print_event(event).await;
                }
                Ok(None) => break Ending::Failed(airlock::Error::Protocol(
                    "output ended without an exit status".into(),
                )),
                Err(error) => break Ending::Failed(error),
            },
            _ = sigint.recv() => {
                if interrupted {
                    break Ending::Signalled(2);
                }
                interrupted = true;
                forward_interrupt(&execution).await;
            }
            _ = sigterm.recv() => break Ending::Signalled(15),
            _ = &mut backstop => break Ending::TimedOut(timeout.unwrap_or_default()),
        }
    };
    match ending {
        Ending::Finished(exit) if exit.timed_out => {
            drop(sandbox);
            eprintln!(
                "airlock: command timed out after {:?}; its processes were killed",
                timeout.unwrap_or(exit.duration)
            );
            EXIT_TIMEOUT
        }
        Ending::Finished(exit) => {
            if verbose {
                let first = first_output.unwrap_or_else(|| exec_started.elapsed());
                print_timings(&sandbox, ready, first, began.elapsed());
            }
            if let Err(error) = super::transfer::download(&sandbox, &args.download).await {
                eprintln!("airlock: {error}");
                drop(sandbox);
                return EXIT_AIRLOCK_ERROR;
            }
            if exit.oom_killed {
                eprintln!("airlock: the guest ran out of memory and killed part of the command");
            }
            if let Err(error) = sandbox.shutdown(SHUTDOWN_GRACE).await {
                tracing::warn!(%error, "shutdown was not clean");
            }
            exit_code(&exit)
        }
        Ending::TimedOut(after) => {
            drop(sandbox);
            eprintln!("airlock: command timed out after {after:?}; sandbox killed");
            EXIT_TIMEOUT
        }
        Ending::Signalled(signal) => {
            drop(sandbox);
            u8::try_from(128 + signal).unwrap_or(EXIT_AIRLOCK_ERROR)
        }
        Ending::Failed(error) => {
            eprintln!("airlock: {error}");
            drop(sandbox);
            EXIT_AIRLOCK_ERROR
        }
    }
}

/// Sends the first Ctrl-C on to the command, as a terminal would.
async fn forward_interrupt(execution: &Execution) {
    eprintln!("airlock: interrupting the command (Ctrl-C again to kill the sandbox)");
    if let Err(error) = execution.signal(Signal::INT).await {
        tracing::warn!(%error, "cannot forward SIGINT");
    }
}

/// Copies the host's stdin to the command's, then closes it.
async fn forward_host_stdin(handle: ProcessHandle) {
    let Some(rx) = super::program::host_stdin() else {
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

fn print_timings(sandbox: &Sandbox, ready: Duration, first_output: Duration, total: Duration) {
    let t = sandbox.boot_timings();
    eprintln!(
        "airlock: accel {} | vmm started {:.1?} | guest kernel to agent {:.2?} | agent init {:.1?} | \
         agent ready {:.2?} | exec to first output {:.1?} | total {:.2?}",
        sandbox.accel().qemu_name(),
        t.vmm_started,
        t.kernel_to_init,
        t.init_to_serving,
        ready,
        first_output,
        total
    );
}

fn fail(message: &str) -> u8 {
    eprintln!("airlock: {message}");
    EXIT_AIRLOCK_ERROR
}
