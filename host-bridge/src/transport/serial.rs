//! The host's side of the agent's virtio-serial channel: connect to the
//! Unix socket QEMU listens on for the port, then run the opening (see
//! [`airlock_proto::opening`]): write the flush, repeat the hello until the
//! agent answers, and skip whatever an earlier connection left in the pipe.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use airlock_proto::opening::{HostOpening, NoAnswer, Nonce, HELLO_INTERVAL};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use super::stream::AgentStream;

/// After this long unanswered, the hello is repeated less often: the guest
/// is still booting, and the repeats only queue up in the socket.
const EAGER_FOR: Duration = Duration::from_secs(1);
/// How often the hello is repeated after [`EAGER_FOR`].
const PATIENT_INTERVAL: Duration = Duration::from_millis(100);

/// Errors opening a connection on the serial channel.
#[derive(Debug, thiserror::Error)]
pub enum OpeningError {
    #[error("cannot connect to {path}")]
    Connect {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("serial channel i/o")]
    Io(#[from] std::io::Error),
    #[error("QEMU closed the serial channel during the opening")]
    Closed,
    #[error("the agent did not answer the opening within {0:?}")]
    Timeout(Duration),
    #[error(transparent)]
    NoAnswer(#[from] NoAnswer),
}

/// Connects to the serial port's socket and opens a connection to the
/// agent, waiting at most `within` for its answer.
pub async fn open(socket: &Path, within: Duration) -> Result<AgentStream, OpeningError> {
    let mut stream = UnixStream::connect(socket)
        .await
        .map_err(|source| OpeningError::Connect {
            path: socket.to_owned(),
            source,
        })?;
    let mut opening = HostOpening::new(Nonce::new(fresh_nonce()));
    // Ends a connection the guest may still serve (after a restore) before
    // the first hello, instead of letting it swallow hellos for minutes.
    stream.write_all(&opening.flush()).await?;
    let hello = opening.hello();
    let begin = Instant::now();
    let deadline = tokio::time::sleep(within);
    tokio::pin!(deadline);
    let mut next_hello = tokio::time::Instant::now();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        tokio::select! {
            () = &mut deadline => return Err(OpeningError::Timeout(within)),
            () = tokio::time::sleep_until(next_hello) => {
                stream.write_all(&hello).await?;
                let pause = if begin.elapsed() < EAGER_FOR { HELLO_INTERVAL } else { PATIENT_INTERVAL };
                next_hello = tokio::time::Instant::now() + pause;
            }
            read = stream.read(&mut buf) => {
                let n = read?;
                if n == 0 {
                    return Err(OpeningError::Closed);
                }
                if let Some(rest) = opening.feed(&buf[..n])? {
                    tracing::trace!(after = ?begin.elapsed(), "serial channel opened");
                    return Ok(AgentStream::new(stream, rest));
                }
            }
        }
    }
}

/// A nonce that differs between connections and processes.
fn fresh_nonce() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    RandomState::new().hash_one((count, std::process::id(), Instant::now()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_proto::opening::{GuestOpening, GuestStep};
    use tokio::net::UnixListener;

    /// A guest side that first swallows `swallow` bytes (as a stale
    /// connection would), then answers with `GuestOpening` and echoes.
    async fn guest(swallow: usize) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("port.sock");
        let listener = UnixListener::bind(&path).unwrap();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut skipped = vec![0u8; swallow];
            stream.read_exact(&mut skipped).await.unwrap();
            stream.write_all(b"\0\0\x04stale goaway").await.unwrap();
            let mut opening = GuestOpening::new();
            let mut buf = [0u8; 256];
            let mut input = Vec::new();
            loop {
                let step = opening.feed(&input);
                input.clear();
                match step {
                    GuestStep::Read => {
                        let n = stream.read(&mut buf).await.unwrap();
                        input.extend_from_slice(&buf[..n]);
                    }
                    GuestStep::Answer(answer) => {
                        stream.write_all(&answer).await.unwrap();
                        stream.write_all(b"h2").await.unwrap();
                    }
                    GuestStep::Open(rest) => {
                        stream.write_all(&rest).await.unwrap();
                        break;
                    }
                }
            }
            let n = stream.read(&mut buf).await.unwrap();
            stream.write_all(&buf[..n]).await.unwrap();
        });
        (dir, path)
    }

    #[tokio::test]
    async fn a_swallowed_hello_is_repeated_and_the_stream_starts_after_the_answer() {
        // The first hello goes to a stale connection.
        let (_dir, path) = guest(31).await;
        let mut stream = open(&path, Duration::from_secs(5)).await.unwrap();
        stream.write_all(b"PRI").await.unwrap();
        let mut first = [0u8; 5];
        stream.read_exact(&mut first).await.unwrap();
        assert_eq!(&first, b"h2PRI");
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_guest_times_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("port.sock");
        let _listener = UnixListener::bind(&path).unwrap();
        let error = open(&path, Duration::from_secs(1)).await.unwrap_err();
        assert!(matches!(error, OpeningError::Timeout(_)), "{error}");
    }

    #[test]
    fn nonces_differ() {
        assert_ne!(fresh_nonce(), fresh_nonce());
    }
}
