//! Ending the host's connection between two HTTP/2 frames, before a
//! snapshot.
//!
//! A snapshot holds whatever prefix of the host's bytes the guest had read
//! when the VM stopped. If that prefix ends inside a frame and the agent
//! later misses the hangup (see [`airlock_proto::opening`]), the next
//! connection's first bytes complete the frame, and a DATA frame so
//! completed reaches its stream: a program's stdin or a carried connection
//! would get bytes that are not its own. So before a save the host ends
//! its connection where no frame is half written: [`GatedStream`] follows
//! the frames in what hyper writes ([`FrameCursor`]), and once
//! [`Quiesce::end_between_frames`] asks, lets the frame in progress finish,
//! then shuts the socket down in both directions and refuses further
//! writes. Every byte the host wrote then ends a frame, and the guest reads
//! all of them before the hangup or the next connection's flush.

use std::io;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;

use super::frames::FrameCursor;
use super::stream::AgentStream;

/// The current connection of one gRPC channel, which a save can end
/// between two frames. Clones share the connection.
#[derive(Debug, Clone, Default)]
pub struct Quiesce {
    current: Arc<Mutex<Option<Arc<Gate>>>>,
}

/// How [`Quiesce::end_between_frames`] left the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// There was no connection (or it had ended between frames already).
    NoConnection,
    /// Shut down between two frames.
    BetweenFrames,
    /// The connection ended inside a frame: it broke there by itself, or
    /// its frame did not finish in time (a guest that stopped reading).
    InsideFrame,
}

/// One connection's frame position and the means to end it.
#[derive(Debug)]
struct Gate {
    state: Mutex<GateState>,
    /// Becomes true once the connection is shut down or dropped.
    over: watch::Sender<bool>,
}

#[derive(Debug)]
struct GateState {
    frames: FrameCursor,
    /// Set by `end_between_frames`: no write may begin another frame.
    closing: bool,
    /// The socket, to shut down; `None` once it is, or once the stream
    /// was dropped (so that this copy never keeps the socket open).
    socket: Option<StdUnixStream>,
}

impl GateState {
    /// Shuts the socket down (both ways) and tells whoever waits.
    fn shut(&mut self, over: &watch::Sender<bool>) {
        if let Some(socket) = self.socket.take() {
            if let Err(error) = socket.shutdown(std::net::Shutdown::Both) {
                tracing::debug!(%error, "shutting the agent connection down");
            }
        }
        over.send_replace(true);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Quiesce {
    /// Wraps a new connection of the channel, which becomes the current one.
    pub(crate) fn watch(&self, inner: AgentStream) -> io::Result<GatedStream> {
        let socket = StdUnixStream::from(inner.as_fd().try_clone_to_owned()?);
        let gate = Arc::new(Gate {
            state: Mutex::new(GateState {
                frames: FrameCursor::client(),
                closing: false,
                socket: Some(socket),
            }),
            over: watch::Sender::new(false),
        });
        *lock(&self.current) = Some(Arc::clone(&gate));
        Ok(GatedStream { inner, gate })
    }

    /// Ends the current connection once no frame is half written, waiting
    /// at most `within` for the frame in progress; past that, it ends it
    /// where it is. A call on the connection then fails, and the channel's
    /// next call opens a new one.
    pub async fn end_between_frames(&self, within: Duration) -> Ended {
        let Some(gate) = lock(&self.current).take() else {
            return Ended::NoConnection;
        };
        let mut over = gate.over.subscribe();
        {
            let mut state = lock(&gate.state);
            if state.socket.is_none() {
                // It broke by itself; where it was is what the guest has.
                return if state.frames.at_boundary() {
                    Ended::NoConnection
                } else {
                    Ended::InsideFrame
                };
            }
            state.closing = true;
            if state.frames.at_boundary() {
                state.shut(&gate.over);
                return Ended::BetweenFrames;
            }
        }
        // The writer shuts it at the frame's end (or drops it).
        // (The value's guard is let go at once: `shut` writes it.)
        let finished = tokio::time::timeout(within, over.wait_for(|over| *over))
            .await
            .is_ok();
        let mut state = lock(&gate.state);
        let between = finished && state.frames.at_boundary();
        state.shut(&gate.over);
        if between {
            Ended::BetweenFrames
        } else {
            Ended::InsideFrame
        }
    }
}

/// A connection whose writes [`Quiesce`] follows frame by frame.
#[derive(Debug)]
pub struct GatedStream {
    inner: AgentStream,
    gate: Arc<Gate>,
}

fn ended_for_save() -> io::Error {
    io::Error::new(
        io::ErrorKind::BrokenPipe,
        "the host ended the connection between frames for a snapshot",
    )
}

impl AsyncWrite for GatedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let gate = Arc::clone(&self.gate);
        let mut state = lock(&gate.state);
        if state.socket.is_none() {
            return Poll::Ready(Err(ended_for_save()));
        }
        let allowed = if state.closing {
            match state.frames.to_boundary(buf) {
                0 => {
                    state.shut(&gate.over);
                    return Poll::Ready(Err(ended_for_save()));
                }
                n => n,
            }
        } else {
            buf.len()
        };
        let written = Pin::new(&mut self.inner).poll_write(cx, &buf[..allowed]);
        if let Poll::Ready(Ok(n)) = written {
            state.frames.advance(&buf[..n]);
            if state.closing && state.frames.at_boundary() {
                state.shut(&gate.over);
            }
        }
        written
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let gate = Arc::clone(&self.gate);
        let state = lock(&gate.state);
        if state.socket.is_none() || state.closing {
            // One slice at a time, each cut at the frame's end.
            drop(state);
            let first = bufs.iter().find(|buf| !buf.is_empty());
            return self.poll_write(cx, first.map_or(&[][..], |buf| &buf[..]));
        }
        let mut state = state;
        let written = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(mut n)) = written {
            for buf in bufs {
                let taken = n.min(buf.len());
                state.frames.advance(&buf[..taken]);
                n -= taken;
                if n == 0 {
                    break;
                }
            }
        }
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl AsyncRead for GatedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl Drop for GatedStream {
    fn drop(&mut self) {
        lock(&self.gate.state).socket = None;
        self.gate.over.send_replace(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::UnixStream;

    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

    fn frame(payload_len: usize) -> Vec<u8> {
        let len = payload_len;
        let mut bytes = vec![
            (len >> 16) as u8,
            (len >> 8) as u8,
            len as u8,
            0,
            0,
            0,
            0,
            0,
            1,
        ];
        bytes.resize(HEADER + payload_len, 0x61);
        bytes
    }
    const HEADER: usize = 9;

    fn pair() -> (Quiesce, GatedStream, UnixStream) {
        let (host, guest) = UnixStream::pair().unwrap();
        let quiesce = Quiesce::default();
        let gated = quiesce.watch(AgentStream::from(host)).unwrap();
        (quiesce, gated, guest)
    }

    async fn read_all(mut guest: UnixStream) -> Vec<u8> {
        let mut all = Vec::new();
        guest.read_to_end(&mut all).await.unwrap();
        all
    }

    #[tokio::test]
    async fn between_frames_it_ends_at_once() {
        let (quiesce, mut gated, guest) = pair();
        gated.write_all(PREFACE).await.unwrap();
        gated.write_all(&frame(100)).await.unwrap();
        let ended = quiesce.end_between_frames(Duration::from_secs(5)).await;
        assert_eq!(ended, Ended::BetweenFrames);
        let error = gated.write_all(&frame(1)).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::BrokenPipe);
        assert_eq!(read_all(guest).await.len(), PREFACE.len() + HEADER + 100);
        // Ending again finds nothing to end.
        let again = quiesce.end_between_frames(Duration::from_secs(5)).await;
        assert_eq!(again, Ended::NoConnection);
    }

    #[tokio::test]
    async fn a_frame_in_progress_is_finished_and_nothing_after_it_goes_out() {
        let (quiesce, mut gated, guest) = pair();
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(1000));
        bytes.extend(frame(1000));
        // Half of the first frame is out when the end is asked for.
        let half = PREFACE.len() + 500;
        gated.write_all(&bytes[..half]).await.unwrap();
        let writer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            // A write that would go past the first frame's end.
            let rest = &bytes[half..];
            gated.write_all(rest).await
        });
        let ended = quiesce.end_between_frames(Duration::from_secs(5)).await;
        assert_eq!(ended, Ended::BetweenFrames);
        let error = writer.await.unwrap().unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::BrokenPipe);
        assert_eq!(read_all(guest).await.len(), PREFACE.len() + HEADER + 1000);
    }

    #[tokio::test]
    async fn vectored_writes_are_followed_and_cut_at_the_frame_end() {
        let (quiesce, mut gated, guest) = pair();
        let first = frame(300);
        let second = frame(300);
        let slices = [io::IoSlice::new(PREFACE), io::IoSlice::new(&first[..200])];
        let n = gated.write_vectored(&slices).await.unwrap();
        assert_eq!(n, PREFACE.len() + 200);
        let end =
            tokio::spawn(async move { quiesce.end_between_frames(Duration::from_secs(5)).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let rest = [io::IoSlice::new(&first[200..]), io::IoSlice::new(&second)];
        let mut written = 0;
        loop {
            match gated.write_vectored(&rest).await {
                Ok(n) => written += n,
                Err(error) => {
                    assert_eq!(error.kind(), io::ErrorKind::BrokenPipe);
                    break;
                }
            }
        }
        assert_eq!(written, first.len() - 200);
        assert_eq!(end.await.unwrap(), Ended::BetweenFrames);
        assert_eq!(read_all(guest).await.len(), PREFACE.len() + first.len());
    }

    #[tokio::test(start_paused = true)]
    async fn a_frame_that_never_finishes_is_cut_where_it_is() {
        let (quiesce, mut gated, guest) = pair();
        gated.write_all(PREFACE).await.unwrap();
        gated.write_all(&frame(1000)[..100]).await.unwrap();
        let ended = quiesce.end_between_frames(Duration::from_secs(1)).await;
        assert_eq!(ended, Ended::InsideFrame);
        assert!(gated.write_all(b"x").await.is_err());
        assert_eq!(read_all(guest).await.len(), PREFACE.len() + 100);
    }

    #[tokio::test]
    async fn a_connection_that_broke_inside_a_frame_says_so() {
        let (quiesce, mut gated, mut guest) = pair();
        gated.write_all(PREFACE).await.unwrap();
        gated.write_all(&frame(1000)[..100]).await.unwrap();
        drop(gated);
        // The copy kept for the shutdown does not hold the socket open.
        let mut all = Vec::new();
        guest.read_to_end(&mut all).await.unwrap();
        let ended = quiesce.end_between_frames(Duration::from_secs(5)).await;
        assert_eq!(ended, Ended::InsideFrame);
    }

    #[tokio::test]
    async fn a_connection_dropped_inside_a_frame_says_so() {
        let (quiesce, mut gated, _guest) = pair();
        gated.write_all(PREFACE).await.unwrap();
        gated.write_all(&frame(1000)[..100]).await.unwrap();
        let end =
            tokio::spawn(async move { quiesce.end_between_frames(Duration::from_secs(5)).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(gated);
        assert_eq!(end.await.unwrap(), Ended::InsideFrame);
    }
}
