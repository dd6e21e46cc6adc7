//! What `airlock run` and `airlock sandbox exec` share about a program:
//! its output on the host's streams, the host's stdin read for it (as
//! `airlock shell` reads it too), and the exit code its end maps to.

use std::io::Read;

use airlock::{Event, Exit};
use bytes::Bytes;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

use super::EXIT_AIRLOCK_ERROR;

/// Exit code for a `--timeout` expiry, as timeout(1) uses.
pub const EXIT_TIMEOUT: u8 = 124;
/// The largest piece of host stdin read at once.
pub const STDIN_CHUNK: usize = 64 * 1024;
/// How many chunks of host stdin may wait to be sent.
const STDIN_QUEUE: usize = 4;

/// airlock's exit code for a program that ended so: its own code, 128+N
/// when signal N killed it, [`EXIT_TIMEOUT`] when its timeout did.
pub fn exit_code(exit: &Exit) -> u8 {
    if exit.timed_out {
        return EXIT_TIMEOUT;
    }
    u8::try_from(exit.status.shell_code() & 0xff).unwrap_or(EXIT_AIRLOCK_ERROR)
}

/// Writes an output chunk to the matching host stream. A closed host
/// stream (say `| head`) must not stop us from collecting the exit status,
/// so write errors are ignored.
pub async fn print_event(event: Event) {
    match event {
        Event::Stdout(data) => {
            let mut stdout = tokio::io::stdout();
            let _ = stdout.write_all(&data).await;
            let _ = stdout.flush().await;
        }
        Event::Stderr(data) => {
            let mut stderr = tokio::io::stderr();
            let _ = stderr.write_all(&data).await;
            let _ = stderr.flush().await;
        }
        Event::Dropped(bytes) => eprintln!("airlock: {bytes} bytes of output were lost"),
        Event::Exited(_) => {}
    }
}

/// The host's stdin for a program's, in chunks of up to [`STDIN_CHUNK`]
/// bytes (see [`read_stdin`]).
pub fn host_stdin() -> Option<mpsc::Receiver<Bytes>> {
    read_stdin(STDIN_CHUNK, STDIN_QUEUE)
}

/// The host's stdin in chunks of up to `chunk` bytes, `queue` of them at
/// most waiting, read by a blocking thread (so a read that never returns
/// cannot hold up exit); the channel closes at end of input. `None` when
/// the thread cannot start.
pub fn read_stdin(chunk: usize, queue: usize) -> Option<mpsc::Receiver<Bytes>> {
    let (tx, rx) = mpsc::channel::<Bytes>(queue);
    let reader = std::thread::Builder::new()
        .name("stdin".into())
        .spawn(move || {
            let mut stdin = std::io::stdin().lock();
            let mut buf = vec![0; chunk];
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        if tx.blocking_send(Bytes::copy_from_slice(&buf[..n])).is_err() {
                            break;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(error) => {
                        tracing::warn!(%error, "cannot read stdin");
                        break;
                    }
                }
            }
        });
    match reader {
        Ok(_) => Some(rx),
        Err(error) => {
            tracing::warn!(%error, "cannot start the stdin reader");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock::ExitStatus;

    #[test]
    fn exit_codes_follow_the_shell() {
        let mut exit = Exit::from_status(ExitStatus::Code(3));
        assert_eq!(exit_code(&exit), 3);
        exit.status = ExitStatus::Signal(9);
        assert_eq!(exit_code(&exit), 137);
        exit.timed_out = true;
        assert_eq!(exit_code(&exit), EXIT_TIMEOUT);
        assert_eq!(exit_code(&Exit::from_status(ExitStatus::Code(256))), 0);
    }
}
