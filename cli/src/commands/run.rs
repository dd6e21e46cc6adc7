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
//! copy makes airlock exit 125. `--changes` records guest directories after
//! the uploads and, once the command finished, prints what it created,
//! modified and deleted there (`--download-changes` also fetches those
//! files; a failure is exit 125 too). The program's options are
//! [`ProgramOptions`](super::ProgramOptions) and the loop that drives it is
//! the [`Session`] `sandbox exec` uses too.

use std::time::{Duration, Instant};

use airlock::{Origin, Sandbox, Stdin};

use super::changes::Tracking;
use super::session::{fail, Ending, Program, Session};
use super::{RunArgs, EXIT_AIRLOCK_ERROR};

/// How long the guest gets to power off before it is killed.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

pub async fn run(args: RunArgs, verbose: bool) -> u8 {
    let mut session = match Session::new() {
        Ok(session) => session,
        Err(message) => return fail(&message),
    };
    let began = Instant::now();
    let builder = match args.boot.builder() {
        Ok(builder) => builder,
        Err(message) => return fail(&message),
    };
    let (command, timeout) = match (args.program.command(&args.command), args.program.timeout()) {
        (Ok(command), Ok(timeout)) => (command, timeout),
        (Err(error), _) | (_, Err(error)) => return fail(&error.to_string()),
    };
    let command = match session.stdin_piped() {
        true => command.stdin(Stdin::Piped),
        false => command,
    };

    // Starting is cancellable too: the builder's future owns the VM until it
    // returns, and dropping it kills the VM.
    let sandbox = tokio::select! {
        started = builder.start() => match started {
            Ok(sandbox) => sandbox,
            Err(error) => return fail(&error.to_string()),
        },
        signal = session.signalled() => return Ending::Signalled(signal).report(None),
    };
    if let Err(error) = super::transfer::upload(&sandbox, &args.upload).await {
        eprintln!("airlock: {error}");
        drop(sandbox);
        return EXIT_AIRLOCK_ERROR;
    }
    let tracking = Tracking::from_args(args.changes, args.download_changes);
    let tracked = match &tracking {
        Some(tracking) => match tracking.start(&sandbox).await {
            Ok(started) => Some(started),
            Err(error) => {
                eprintln!("airlock: {error}");
                drop(sandbox);
                return EXIT_AIRLOCK_ERROR;
            }
        },
        None => None,
    };
    let ready = began.elapsed();

    let exec_started = Instant::now();
    let execution = match sandbox.exec(&command).await {
        Ok(execution) => execution,
        Err(error) => {
            eprintln!("airlock: {error}");
            drop(sandbox);
            return EXIT_AIRLOCK_ERROR;
        }
    };
    let ran = session
        .drive(Program::Local(Box::new(execution)), timeout)
        .await;
    match ran.ending {
        Ending::Finished(exit) if !exit.timed_out => {
            if verbose {
                let first = ran
                    .first_output
                    .map_or_else(|| exec_started.elapsed(), |at| at - exec_started);
                print_timings(&sandbox, ready, first, began.elapsed());
            }
            if let Err(error) = super::transfer::download(&sandbox, &args.download).await {
                eprintln!("airlock: {error}");
                drop(sandbox);
                return EXIT_AIRLOCK_ERROR;
            }
            if let Some(started) = tracked {
                let download = tracking.and_then(|t| t.download);
                if let Err(error) = started.finish(&sandbox, download.as_deref()).await {
                    eprintln!("airlock: {error}");
                    drop(sandbox);
                    return EXIT_AIRLOCK_ERROR;
                }
            }
            let code = Ending::Finished(exit).report(timeout);
            if let Err(error) = sandbox.shutdown(SHUTDOWN_GRACE).await {
                tracing::warn!(%error, "shutdown was not clean");
            }
            code
        }
        // Timed out, signalled or failed: no download, the sandbox killed.
        ending => {
            drop(sandbox);
            ending.report(timeout)
        }
    }
}

fn print_timings(sandbox: &Sandbox, ready: Duration, first_output: Duration, total: Duration) {
    let t = sandbox.boot_timings();
    // A clone's guest did not boot: the kernel and init figures it reports
    // are its template's.
    let boot = match sandbox.origin() {
        Origin::Clone { key, built: false } => format!("clone of template {key}"),
        Origin::Clone { key, built: true } => {
            format!("clone of template {key}, made by this start")
        }
        _ => {
            let mut line = format!(
                "cold boot: guest kernel to agent {:.2?} | agent init {:.1?}",
                t.kernel_to_init, t.init_to_serving
            );
            if let (Some(before), Some(answer)) = (t.before_guest_clock, t.serving_to_answer) {
                line.push_str(&format!(
                    " | before the guest's clock {before:.2?} | serving to first answer {answer:.1?}"
                ));
            }
            line
        }
    };
    eprintln!(
        "airlock: accel {} | vmm started {:.1?} | {boot} | agent ready {:.2?} | \
         exec to first output {:.1?} | total {:.2?}",
        sandbox.accel().qemu_name(),
        t.vmm_started,
        ready,
        first_output,
        total
    );
}
