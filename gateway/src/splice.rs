//! Bytes both ways between a guest's connection and its upstream.
//!
//! [`splice`] copies each direction through its own 64 KiB buffer,
//! concurrently, in one task. When one side stops sending (EOF), the other
//! side's write half is shut down, so it sees the EOF too, and the other
//! direction carries on (a half-close, as a client that sends a request and
//! then `shutdown(SHUT_WR)` expects). It ends when both directions have, or
//! when no byte has moved either way for the idle timeout.

use std::future::{poll_fn, Future};
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// Each direction's buffer.
const BUFFER_BYTES: usize = 128 * 1024;

/// The bytes a splice delivered each way.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SpliceTotals {
    /// Bytes written to the upstream (sent by the guest).
    pub to_upstream: u64,
    /// Bytes written to the guest (sent by the upstream).
    pub to_guest: u64,
}

/// Why a splice ended early. Each carries what had been delivered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpliceError {
    /// No byte moved in either direction for the idle timeout.
    #[error("no bytes moved either way within the idle timeout")]
    Idle {
        /// What had been delivered.
        totals: SpliceTotals,
    },
    /// Reading from or writing to the guest's stream failed.
    #[error("guest stream failed")]
    Guest {
        /// What had been delivered.
        totals: SpliceTotals,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// Reading from or writing to the upstream failed.
    #[error("upstream stream failed")]
    Upstream {
        /// What had been delivered.
        totals: SpliceTotals,
        /// The error.
        #[source]
        source: io::Error,
    },
}

impl SpliceError {
    /// What had been delivered when the splice ended.
    pub fn totals(&self) -> SpliceTotals {
        match self {
            SpliceError::Idle { totals }
            | SpliceError::Guest { totals, .. }
            | SpliceError::Upstream { totals, .. } => *totals,
        }
    }
}

/// Which stream an I/O error came from.
#[derive(Debug, Clone, Copy)]
enum Side {
    Guest,
    Upstream,
}

/// One direction: read into the buffer, write it all out, repeat; at EOF,
/// flush and shut the writer down.
#[derive(Debug)]
struct Direction {
    buf: Box<[u8]>,
    /// Bytes `buf[pos..cap]` are read but not yet written.
    pos: usize,
    cap: usize,
    read_done: bool,
    needs_flush: bool,
    done: bool,
    written: u64,
    /// Which side reads and which writes, for errors.
    reader: Side,
    writer: Side,
}

impl Direction {
    fn new(reader: Side, writer: Side) -> Self {
        Self {
            buf: vec![0; BUFFER_BYTES].into_boxed_slice(),
            pos: 0,
            cap: 0,
            read_done: false,
            needs_flush: false,
            done: false,
            written: 0,
            reader,
            writer,
        }
    }

    /// Moves bytes until it would block; sets `moved` if any byte was read
    /// or written. Ready when this direction is finished.
    fn poll_copy<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        mut reader: Pin<&mut R>,
        mut writer: Pin<&mut W>,
        moved: &mut bool,
    ) -> Poll<Result<(), (Side, io::Error)>>
    where
        R: AsyncRead + ?Sized,
        W: AsyncWrite + ?Sized,
    {
        if self.done {
            return Poll::Ready(Ok(()));
        }
        loop {
            if self.pos == self.cap && !self.read_done {
                let mut read_buf = ReadBuf::new(&mut self.buf);
                match reader.as_mut().poll_read(cx, &mut read_buf) {
                    Poll::Ready(Ok(())) => {
                        let n = read_buf.filled().len();
                        if n == 0 {
                            self.read_done = true;
                        } else {
                            self.pos = 0;
                            self.cap = n;
                            *moved = true;
                        }
                    }
                    Poll::Ready(Err(err)) => return Poll::Ready(Err((self.reader, err))),
                    Poll::Pending => {
                        // Nothing more to send for now: push out what was.
                        if self.needs_flush {
                            ready!(writer.as_mut().poll_flush(cx))
                                .map_err(|err| (self.writer, err))?;
                            self.needs_flush = false;
                        }
                        return Poll::Pending;
                    }
                }
            }
            while self.pos < self.cap {
                let n = ready!(writer
                    .as_mut()
                    .poll_write(cx, &self.buf[self.pos..self.cap]))
                .map_err(|err| (self.writer, err))?;
                if n == 0 {
                    let err = io::Error::new(io::ErrorKind::WriteZero, "wrote no bytes");
                    return Poll::Ready(Err((self.writer, err)));
                }
                self.pos += n;
                self.written += n as u64;
                self.needs_flush = true;
                *moved = true;
            }
            if self.pos == self.cap && self.read_done {
                if self.needs_flush {
                    ready!(writer.as_mut().poll_flush(cx)).map_err(|err| (self.writer, err))?;
                    self.needs_flush = false;
                }
                match ready!(writer.as_mut().poll_shutdown(cx)) {
                    // The peer is gone already: nothing left to tell it.
                    Err(err) if err.kind() != io::ErrorKind::NotConnected => {
                        return Poll::Ready(Err((self.writer, err)));
                    }
                    _ => {}
                }
                self.done = true;
                return Poll::Ready(Ok(()));
            }
        }
    }
}

/// Copies bytes both ways between `guest` and `upstream` until both
/// directions reach EOF (each EOF shuts the other side's writer down), or
/// until no byte moves either way for `idle`.
pub async fn splice<A, B>(
    mut guest: A,
    mut upstream: B,
    idle: Duration,
) -> Result<SpliceTotals, SpliceError>
where
    A: AsyncRead + AsyncWrite + Unpin + Send,
    B: AsyncRead + AsyncWrite + Unpin + Send,
{
    let mut outbound = Direction::new(Side::Guest, Side::Upstream);
    let mut inbound = Direction::new(Side::Upstream, Side::Guest);
    let timer = tokio::time::sleep(idle);
    tokio::pin!(timer);

    let ended = poll_fn(|cx| {
        let mut moved = false;
        let out = outbound.poll_copy(
            cx,
            Pin::new(&mut guest),
            Pin::new(&mut upstream),
            &mut moved,
        );
        if let Poll::Ready(Err(err)) = out {
            return Poll::Ready(Ended::Failed(err));
        }
        let back = inbound.poll_copy(
            cx,
            Pin::new(&mut upstream),
            Pin::new(&mut guest),
            &mut moved,
        );
        if let Poll::Ready(Err(err)) = back {
            return Poll::Ready(Ended::Failed(err));
        }
        if out.is_ready() && back.is_ready() {
            return Poll::Ready(Ended::Done);
        }
        if moved {
            timer.as_mut().reset(Instant::now() + idle);
        }
        // Polled after any reset, so the timer wakes this task at the new time.
        timer.as_mut().poll(cx).map(|()| Ended::Idle)
    })
    .await;

    let totals = SpliceTotals {
        to_upstream: outbound.written,
        to_guest: inbound.written,
    };
    match ended {
        Ended::Done => {
            tracing::trace!(?totals, "splice finished");
            Ok(totals)
        }
        Ended::Idle => {
            tracing::debug!(?totals, ?idle, "splice idle");
            Err(SpliceError::Idle { totals })
        }
        Ended::Failed((Side::Guest, source)) => Err(SpliceError::Guest { totals, source }),
        Ended::Failed((Side::Upstream, source)) => Err(SpliceError::Upstream { totals, source }),
    }
}

/// How the copying loop ended.
#[derive(Debug)]
enum Ended {
    Done,
    Idle,
    Failed((Side, io::Error)),
}

#[cfg(test)]
mod tests {
    use tokio::io::{duplex, AsyncReadExt, AsyncWriteExt, DuplexStream};

    use super::*;

    const LONG: Duration = Duration::from_secs(60);

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    /// A guest end, an upstream end, and the running splice between them.
    fn spliced(
        idle: Duration,
    ) -> (
        DuplexStream,
        DuplexStream,
        tokio::task::JoinHandle<Result<SpliceTotals, SpliceError>>,
    ) {
        let (guest, guest_host) = duplex(16 * 1024);
        let (upstream_host, upstream) = duplex(16 * 1024);
        let task = tokio::spawn(splice(guest_host, upstream_host, idle));
        (guest, upstream, task)
    }

    #[tokio::test]
    async fn megabytes_arrive_intact_both_ways() -> Result<(), Box<dyn std::error::Error>> {
        let (guest, upstream, task) = spliced(LONG);
        let up = pattern(3 * 1024 * 1024 + 7, 1);
        let down = pattern(2 * 1024 * 1024 + 3, 2);

        // Each end sends its bytes and reads the other's at the same time.
        let side = |stream: DuplexStream, send: Vec<u8>| async move {
            let (mut read, mut write) = tokio::io::split(stream);
            let writer = async {
                write.write_all(&send).await?;
                write.shutdown().await
            };
            let mut got = Vec::new();
            tokio::try_join!(writer, read.read_to_end(&mut got))?;
            Ok::<_, io::Error>(got)
        };
        let (at_upstream, at_guest) =
            tokio::try_join!(side(upstream, down.clone()), side(guest, up.clone()))?;
        assert!(at_upstream == up, "guest to upstream bytes differ");
        assert!(at_guest == down, "upstream to guest bytes differ");
        let totals = task.await??;
        assert_eq!(
            totals,
            SpliceTotals {
                to_upstream: up.len() as u64,
                to_guest: down.len() as u64
            }
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_guest_that_finishes_sending_still_gets_the_reply(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let (mut guest, mut upstream, task) = spliced(LONG);
        guest.write_all(b"request").await?;
        guest.shutdown().await?;

        // The upstream sees the request end, then answers.
        let mut request = Vec::new();
        upstream.read_to_end(&mut request).await?;
        assert_eq!(request, b"request");
        upstream.write_all(b"reply").await?;
        upstream.shutdown().await?;

        let mut reply = Vec::new();
        guest.read_to_end(&mut reply).await?;
        assert_eq!(reply, b"reply");
        assert_eq!(
            task.await??,
            SpliceTotals {
                to_upstream: 7,
                to_guest: 5
            }
        );
        Ok(())
    }

    #[tokio::test]
    async fn an_upstream_that_finishes_first_still_gets_the_guest_bytes(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let (mut guest, mut upstream, task) = spliced(LONG);
        upstream.write_all(b"banner").await?;
        upstream.shutdown().await?;
        let mut banner = Vec::new();
        guest.read_to_end(&mut banner).await?;
        assert_eq!(banner, b"banner");

        guest.write_all(b"late words").await?;
        guest.shutdown().await?;
        let mut words = Vec::new();
        upstream.read_to_end(&mut words).await?;
        assert_eq!(words, b"late words");
        assert!(task.await?.is_ok());
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_connection_ends_after_the_idle_timeout(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let (_guest, _upstream, task) = spliced(Duration::from_secs(10));
        let started = Instant::now();
        let result = task.await?;
        assert!(
            matches!(result, Err(SpliceError::Idle { totals }) if totals == SpliceTotals::default()),
            "{result:?}"
        );
        assert_eq!(started.elapsed(), Duration::from_secs(10));
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn traffic_either_way_keeps_the_connection_open() -> Result<(), Box<dyn std::error::Error>>
    {
        let (mut guest, mut upstream, task) = spliced(Duration::from_secs(10));
        let started = Instant::now();
        for round in 0..6 {
            tokio::time::sleep(Duration::from_secs(6)).await;
            let mut byte = [0];
            if round % 2 == 0 {
                guest.write_all(b"g").await?;
                upstream.read_exact(&mut byte).await?;
            } else {
                upstream.write_all(b"u").await?;
                guest.read_exact(&mut byte).await?;
            }
        }
        let result = task.await?;
        assert!(
            matches!(
                result,
                Err(SpliceError::Idle {
                    totals: SpliceTotals {
                        to_upstream: 3,
                        to_guest: 3
                    }
                })
            ),
            "{result:?}"
        );
        // Six rounds of 6 s, then 10 s of quiet.
        assert_eq!(started.elapsed(), Duration::from_secs(46));
        Ok(())
    }

    #[tokio::test]
    async fn a_broken_upstream_is_reported_as_the_upstream(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let (mut guest, upstream, task) = spliced(LONG);
        drop(upstream);
        // The upstream's end is gone: writing to it fails.
        guest.write_all(b"hello").await?;
        let result = task.await?;
        assert!(
            matches!(result, Err(SpliceError::Upstream { .. })),
            "{result:?}"
        );
        Ok(())
    }
}
