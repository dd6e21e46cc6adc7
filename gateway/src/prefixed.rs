//! A stream that first replays bytes already read from it.
//!
//! Deciding what a guest connection is (a TLS ClientHello's server name, an
//! HTTP request's Host) means reading its first bytes before anyone else
//! does. [`Prefixed`] hands those bytes back: reads yield the prefix first,
//! then whatever the inner stream has; writes go straight to the inner
//! stream. The TLS acceptor or HTTP server that takes over then sees the
//! connection from its first byte.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A stream whose reads start with `prefix`, then continue from `inner`.
///
/// The inner stream must be [`Unpin`] (box and pin one that is not);
/// `Prefixed<S>` is then `Unpin` too.
#[derive(Debug)]
pub struct Prefixed<S> {
    prefix: Bytes,
    inner: S,
}

impl<S> Prefixed<S> {
    /// A stream that yields `prefix`, then reads from `inner`.
    pub fn new(prefix: Bytes, inner: S) -> Self {
        Self { prefix, inner }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.prefix.is_empty() {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        let n = this.prefix.len().min(buf.remaining());
        buf.put_slice(&this.prefix[..n]);
        this.prefix.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn reads_yield_the_prefix_then_the_rest_of_the_stream() -> io::Result<()> {
        let (near, mut far) = tokio::io::duplex(64);
        far.write_all(b" world").await?;
        drop(far);
        let mut stream = Prefixed::new(Bytes::from_static(b"hello"), near);
        let mut all = String::new();
        stream.read_to_string(&mut all).await?;
        assert_eq!(all, "hello world");
        Ok(())
    }

    #[tokio::test]
    async fn a_prefix_longer_than_the_reader_buffer_comes_out_whole() -> io::Result<()> {
        let (near, far) = tokio::io::duplex(64);
        drop(far);
        let mut stream = Prefixed::new(Bytes::from_static(b"abcdefgh"), near);
        let mut small = [0u8; 3];
        let mut got = Vec::new();
        loop {
            let n = stream.read(&mut small).await?;
            if n == 0 {
                break;
            }
            assert!(n <= 3);
            got.extend_from_slice(&small[..n]);
        }
        assert_eq!(got, b"abcdefgh");
        Ok(())
    }

    #[tokio::test]
    async fn an_empty_prefix_reads_straight_from_the_stream() -> io::Result<()> {
        let (near, mut far) = tokio::io::duplex(64);
        far.write_all(b"direct").await?;
        drop(far);
        let mut stream = Prefixed::new(Bytes::new(), near);
        let mut all = Vec::new();
        stream.read_to_end(&mut all).await?;
        assert_eq!(all, b"direct");
        Ok(())
    }

    #[tokio::test]
    async fn writes_reach_the_inner_stream_untouched_by_the_prefix() -> io::Result<()> {
        let (near, mut far) = tokio::io::duplex(64);
        let mut stream = Prefixed::new(Bytes::from_static(b"peeked"), near);
        stream.write_all(b"reply").await?;
        stream.shutdown().await?;
        let mut all = Vec::new();
        far.read_to_end(&mut all).await?;
        assert_eq!(all, b"reply");
        Ok(())
    }
}
