//! Between connections: waiting for a host and running the guest's side of
//! the opening ([`GuestOpening`], which `airlock_proto::opening` describes)
//! until a connection opens.
//!
//! [`open`] reads whatever the port gives: output of an old connection,
//! repeated hellos, a host that comes and goes. A read of 0 bytes means no
//! host is connected: it pauses [`NO_HOST_PAUSE`] and reads again. Every
//! read is bounded by [`RECHECK`], because the device's readiness alone is
//! not trusted to wake the agent. An answer that cannot be written (the
//! host left) starts the opening over, and so does a host that leaves after
//! the answer: the next host's hello is then looked for afresh. Nothing it
//! reads can make it fail; it returns only when a connection opens.

use std::time::Duration;

use airlock_proto::opening::{GuestOpening, GuestStep};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// How long to wait before reading again while no host is connected.
pub const NO_HOST_PAUSE: Duration = Duration::from_millis(5);
/// The longest a read waits before it is tried again.
pub const RECHECK: Duration = Duration::from_millis(50);
/// How long writing the answer may take before the host is taken to be
/// gone.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(1);
/// The pause after a failed read, so a broken port does not spin.
const ERROR_PAUSE: Duration = Duration::from_secs(1);
/// Bytes read at a time.
const CHUNK: usize = 4096;

/// Waits for a host on `port` and runs the opening; returns the bytes that
/// followed it, the start of the host's HTTP/2 stream. `port` reads 0 bytes
/// while no host is connected and fails writes while none is.
pub async fn open<P>(port: &mut P) -> Vec<u8>
where
    P: AsyncRead + AsyncWrite + Unpin,
{
    let mut opening = GuestOpening::new();
    let mut answered = false;
    let mut last_error = None;
    let mut buf = vec![0u8; CHUNK];
    loop {
        let read = match tokio::time::timeout(RECHECK, port.read(&mut buf)).await {
            Err(_quiet) => continue,
            Ok(Ok(0)) => {
                if answered {
                    tracing::debug!("host left during the opening; waiting for the next");
                    opening = GuestOpening::new();
                    answered = false;
                }
                tokio::time::sleep(NO_HOST_PAUSE).await;
                continue;
            }
            Ok(Ok(read)) => read,
            Ok(Err(e)) => {
                let text = e.to_string();
                if last_error.as_ref() != Some(&text) {
                    tracing::warn!(error = %text, "cannot read the serial port; retrying");
                }
                last_error = Some(text);
                tokio::time::sleep(ERROR_PAUSE).await;
                continue;
            }
        };
        let mut step = opening.feed(&buf[..read]);
        loop {
            match step {
                GuestStep::Read => break,
                GuestStep::Answer(line) => {
                    let written = tokio::time::timeout(ANSWER_TIMEOUT, async {
                        port.write_all(&line).await?;
                        port.flush().await
                    })
                    .await;
                    if let Ok(Ok(())) = written {
                        tracing::debug!("answered a host's hello");
                        answered = true;
                        step = opening.feed(&[]);
                    } else {
                        tracing::debug!("could not answer a hello; the host left");
                        opening = GuestOpening::new();
                        answered = false;
                        break;
                    }
                }
                GuestStep::Open(rest) => return rest,
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use airlock_proto::opening::Nonce;
    use tokio::io::AsyncReadExt;

    use super::super::fake::{HostStream, Wire, PREFACE};
    use super::*;

    /// Runs [`open`] on `wire`'s port in the background.
    fn guest(wire: &Wire) -> tokio::task::JoinHandle<Vec<u8>> {
        let mut port = wire.port();
        tokio::spawn(async move { open(&mut port).await })
    }

    /// Reads exactly `len` bytes as a host.
    async fn read_n(host: &mut (impl AsyncRead + Unpin), len: usize) -> Vec<u8> {
        let mut buf = vec![0u8; len];
        host.read_exact(&mut buf).await.unwrap();
        buf
    }

    #[tokio::test]
    async fn junk_before_the_hello_is_skipped_and_the_rest_returned() {
        let wire = Wire::new();
        let opened = guest(&wire);
        let mut host = wire.connect();
        let nonce = Nonce::new(0xfeed);
        let mut input = b"\0\0\x04\x08\0\0\0\0\0 old http/2 and airlock-hello 12".to_vec();
        input.extend(nonce.hello());
        host.send(&input);
        assert_eq!(read_n(&mut host, nonce.ready().len()).await, nonce.ready());
        host.send(PREFACE);
        host.send(b"and more");
        let rest = opened.await.unwrap();
        assert!(rest.starts_with(PREFACE), "{rest:?}");
        assert!(PREFACE.len() <= rest.len() && rest.len() <= PREFACE.len() + 8);
    }

    #[tokio::test]
    async fn repeated_hellos_get_one_answer() {
        let wire = Wire::new();
        let opened = guest(&wire);
        let mut host = wire.connect();
        let nonce = Nonce::new(3);
        for _ in 0..3 {
            host.send(&nonce.hello());
        }
        assert_eq!(read_n(&mut host, nonce.ready().len()).await, nonce.ready());
        host.send(&nonce.hello());
        host.send(PREFACE);
        assert_eq!(opened.await.unwrap(), PREFACE);
        let mut more = [0u8; 1];
        let again = tokio::time::timeout(RECHECK * 2, host.read(&mut more)).await;
        assert!(again.is_err(), "a second answer: {more:?}");
    }

    #[tokio::test]
    async fn waits_for_a_host_that_is_not_there_yet() {
        let wire = Wire::new();
        let opened = guest(&wire);
        tokio::time::sleep(RECHECK * 3).await;
        assert!(!opened.is_finished());
        let host = HostStream::open_and_greet(wire.connect(), 9).await;
        assert_eq!(opened.await.unwrap(), PREFACE);
        drop(host);
    }

    #[tokio::test]
    async fn a_host_that_leaves_after_the_answer_is_forgotten() {
        let wire = Wire::new();
        let opened = guest(&wire);
        let mut first = wire.connect();
        let old = Nonce::new(1);
        first.send(&old.hello());
        assert_eq!(read_n(&mut first, old.ready().len()).await, old.ready());
        drop(first);
        tokio::time::sleep(RECHECK).await;

        let second = HostStream::open_and_greet(wire.connect(), 2).await;
        assert_eq!(opened.await.unwrap(), PREFACE);
        drop(second);
    }

    #[tokio::test]
    async fn a_host_that_only_sends_junk_gets_nothing() {
        let wire = Wire::new();
        let opened = guest(&wire);
        let mut host = wire.connect();
        for _ in 0..100 {
            host.send(&[b'x'; 1000]);
        }
        host.send(b"airlock-hello not-a-nonce!!!!!!\n");
        let mut buf = [0u8; 1];
        let answer = tokio::time::timeout(RECHECK * 4, host.read(&mut buf)).await;
        assert!(answer.is_err(), "answered junk");
        assert!(!opened.is_finished());
        opened.abort();
    }
}
