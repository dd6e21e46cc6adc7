//! [`AgentStream`]: one connection to the agent, with the bytes its opening
//! read past the end of the handshake put back in front.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;

/// A connection to the agent: a Unix stream whose first bytes may already
/// have been read (the start of the agent's HTTP/2 stream, read together
/// with the end of the opening).
#[derive(Debug)]
pub struct AgentStream {
    read_ahead: Bytes,
    inner: UnixStream,
}

impl AgentStream {
    /// `inner`, whose next bytes are `read_ahead` and then its own.
    pub fn new(inner: UnixStream, read_ahead: impl Into<Bytes>) -> Self {
        AgentStream {
            read_ahead: read_ahead.into(),
            inner,
        }
    }

    /// The stream itself, when nothing was read ahead.
    pub fn into_unix(self) -> Result<UnixStream, Self> {
        if self.read_ahead.is_empty() {
            Ok(self.inner)
        } else {
            Err(self)
        }
    }
}

impl AsFd for AgentStream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.as_fd()
    }
}

impl From<UnixStream> for AgentStream {
    fn from(inner: UnixStream) -> Self {
        AgentStream::new(inner, Bytes::new())
    }
}

impl AsyncRead for AgentStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.read_ahead.has_remaining() {
            let n = self.read_ahead.len().min(buf.remaining());
            buf.put_slice(&self.read_ahead[..n]);
            self.read_ahead.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for AgentStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn read_ahead_bytes_come_first_then_the_stream() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let mut stream = AgentStream::new(a, &b"early "[..]);
        b.write_all(b"late").await.unwrap();
        drop(b);
        let mut all = String::new();
        stream.read_to_string(&mut all).await.unwrap();
        assert_eq!(all, "early late");
    }
}
