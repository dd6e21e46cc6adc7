//! `airlock run`: one command in a fresh sandbox.
//!
//! Output chunks go to the matching host stream as they arrive. The sandbox
//! is torn down on every path: normal exit, timeout, Ctrl-C, SIGTERM, error.

use std::time::{Duration, Instant};

use airlock::{Command, Event, ExitStatus, Sandbox};
use tokio::io::AsyncWriteExt;
use tokio::signal::unix::{signal, SignalKind};

use super::{RunArgs, EXIT_AIRLOCK_ERROR};

/// Exit code for `--timeout` expiry, as timeout(1) uses.
const EXIT_TIMEOUT: u8 = 124;
/// How long the guest gets to power off before it is killed.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

enum Ending {
    Finished(ExitStatus),
    TimedOut(Duration),
    Signalled(i32),
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
    let mut builder = Sandbox::builder().memory_mib(args.memory).vcpus(args.vcpus);
    if let Some(accel) = args.accel {
        builder = builder.accel(accel);
    }
    if let Some(kernel) = args.kernel {
        builder = builder.kernel(kernel);
    }
    if let Some(initramfs) = args.initramfs {
        builder = builder.initramfs(initramfs);
    }
    if !args.no_image {
        match airlock::images::ImageStore::open_default().locate(&args.image) {
            Ok(image) => builder = builder.image(image),
            Err(error) => {
                let cause = std::error::Error::source(&error)
                    .map(|cause| format!(": {cause}"))
                    .unwrap_or_default();
                return fail(&format!(
                    "{error}{cause} (or pass --no-image for the busybox initramfs)"
                ));
            }
        }
    }
    if let Some(workspace) = args.workspace {
        builder = builder
            .workspace(workspace)
            .workspace_size(args.workspace_size);
    }
    let timeout = match args.timeout.map(Duration::try_from_secs_f64).transpose() {
        Ok(timeout) => timeout,
        Err(_) => return fail("--timeout must be a positive number of seconds"),
    };
    let deadline = tokio::time::sleep(timeout.unwrap_or(Duration::MAX / 4));
    tokio::pin!(deadline);

    // Starting is cancellable too: the builder's future owns the VM until it
    // returns, and dropping it kills the VM.
    let sandbox = tokio::select! {
        started = builder.start() => match started {
            Ok(sandbox) => sandbox,
            Err(error) => return fail(&error.to_string()),
        },
        _ = sigint.recv() => return 130,
        _ = sigterm.recv() => return 143,
        _ = &mut deadline => {
            eprintln!("airlock: timed out after {:?} while starting", timeout.unwrap_or_default());
            return EXIT_TIMEOUT;
        }
    };
    let ready = began.elapsed();
    let command = Command::new(args.command[0].clone()).args(args.command[1..].iter().cloned());

    let ending = tokio::select! {
        result = stream_command(&sandbox, &command) => match result {
            Ok((status, first_output)) => {
                if verbose {
                    print_timings(&sandbox, ready, first_output, began.elapsed());
                }
                Ending::Finished(status)
            }
            Err(error) => {
                eprintln!("airlock: {error}");
                drop(sandbox);
                return EXIT_AIRLOCK_ERROR;
            }
        },
        _ = sigint.recv() => Ending::Signalled(2),
        _ = sigterm.recv() => Ending::Signalled(15),
        _ = &mut deadline => Ending::TimedOut(timeout.unwrap_or_default()),
    };
    match ending {
        Ending::Finished(status) => {
            if let Err(error) = sandbox.shutdown(SHUTDOWN_GRACE).await {
                tracing::warn!(%error, "shutdown was not clean");
            }
            u8::try_from(status.shell_code() & 0xff).unwrap_or(EXIT_AIRLOCK_ERROR)
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
    }
}

/// Streams the command's output to the host's stdout and stderr; returns
/// its status and when the first output (or the exit) arrived.
async fn stream_command(
    sandbox: &Sandbox,
    command: &Command,
) -> Result<(ExitStatus, Duration), airlock::Error> {
    let started = Instant::now();
    let mut first_output = None;
    let mut execution = sandbox.exec(command).await?;
    let mut stdout = tokio::io::stdout();
    let mut stderr = tokio::io::stderr();
    while let Some(event) = execution.next_event().await? {
        first_output.get_or_insert_with(|| started.elapsed());
        // A closed host stream (say `| head`) must not stop us from
        // collecting the exit status; ignore write errors.
        match event {
            Event::Stdout(data) => {
                let _ = stdout.write_all(&data).await;
                let _ = stdout.flush().await;
            }
            Event::Stderr(data) => {
                let _ = stderr.write_all(&data).await;
                let _ = stderr.flush().await;
            }
            Event::Dropped(bytes) => eprintln!("airlock: {bytes} bytes of output were lost"),
            Event::Exited(exit) => {
                return Ok((exit.status, first_output.unwrap_or_else(|| started.elapsed())));
            }
        }
    }
    Err(airlock::Error::Protocol(
        "output ended without an exit status".into(),
    ))
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
