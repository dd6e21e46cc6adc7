//! A model of a virtio-serial port for tests, true to what the serve loop
//! relies on in `drivers/char/virtio_console.c` and QEMU:
//!
//! - one [`Wire`] carries bytes both ways; at most one host is connected;
//! - the guest's reads return what the host wrote, including what an
//!   earlier host left unread, and 0 while no host is connected and nothing
//!   is buffered;
//! - the guest's writes fail while no host is connected (the device says
//!   `EAGAIN` with a hangup, which [`super::Device`] reports as a broken
//!   pipe), and what the guest wrote to a host that left is gone;
//! - from [`Port::begin_connection`], the port ends the stream once that
//!   connection's host leaves, as the device does on a hangup.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use airlock_proto::opening::{HostOpening, Nonce, HELLO_INTERVAL};
use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

use super::Port;

/// The HTTP/2 client preface: what a host sends first after the opening.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

#[derive(Debug, Default)]
struct State {
    to_guest: VecDeque<u8>,
    to_host: VecDeque<u8>,
    /// The connected host's number.
    host: Option<u64>,
    hosts: u64,
    guest_waker: Option<Waker>,
    host_waker: Option<Waker>,
}

impl State {
    fn wake(&mut self) {
        for waker in [self.guest_waker.take(), self.host_waker.take()]
            .into_iter()
            .flatten()
        {
            waker.wake();
        }
    }
}

/// The port and whoever connects to it.
#[derive(Debug, Clone, Default)]
pub struct Wire(Arc<Mutex<State>>);

impl Wire {
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap()
    }

    /// The guest's side.
    pub fn port(&self) -> FakePort {
        FakePort {
            wire: self.clone(),
            connection: None,
        }
    }

    /// A host connects; the last one must have left.
    pub fn connect(&self) -> FakeHost {
        let mut state = self.state();
        assert!(state.host.is_none(), "one host at a time");
        state.hosts += 1;
        let id = state.hosts;
        state.host = Some(id);
        state.wake();
        FakeHost {
            wire: self.clone(),
            id,
        }
    }

    /// `old` leaves and another host connects without the guest seeing a
    /// change (after a restore, the port's close and the next open can both
    /// come before the guest looks): its connection goes on, reading the
    /// new host's bytes. What the guest wrote to `old` is gone.
    pub fn replace_unseen(&self, mut old: FakeHost) -> FakeHost {
        // Host numbers start at 1: `old` drops as no host, hanging up none.
        let id = std::mem::replace(&mut old.id, 0);
        drop(old);
        let mut state = self.state();
        assert_eq!(state.host, Some(id), "the old host is connected");
        state.to_host.clear();
        state.wake();
        FakeHost {
            wire: self.clone(),
            id,
        }
    }

    /// Whether the guest has read everything the hosts wrote.
    pub fn all_read(&self) -> bool {
        self.state().to_guest.is_empty()
    }

    /// The connected host, if any, leaves.
    pub fn hang_up(&self) {
        let mut state = self.state();
        state.host = None;
        state.to_host.clear();
        state.wake();
    }
}

/// The guest's side of a [`Wire`].
#[derive(Debug)]
pub struct FakePort {
    wire: Wire,
    /// The host of the current connection.
    connection: Option<u64>,
}

impl Port for FakePort {
    fn begin_connection(&mut self) {
        self.connection = self.wire.state().host;
    }

    fn end_connection(&mut self) {
        self.connection = None;
    }
}

fn host_gone() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "no host")
}

impl AsyncRead for FakePort {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let connection = self.connection;
        let mut state = self.wire.state();
        if connection.is_some() && state.host != connection {
            return Poll::Ready(Ok(()));
        }
        if !state.to_guest.is_empty() {
            let n = state.to_guest.len().min(buf.remaining());
            let bytes: Vec<u8> = state.to_guest.drain(..n).collect();
            buf.put_slice(&bytes);
            return Poll::Ready(Ok(()));
        }
        if state.host.is_none() {
            return Poll::Ready(Ok(()));
        }
        state.guest_waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl AsyncWrite for FakePort {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let connection = self.connection;
        let mut state = self.wire.state();
        if state.host.is_none() || (connection.is_some() && state.host != connection) {
            return Poll::Ready(Err(host_gone()));
        }
        state.to_host.extend(buf);
        state.wake();
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A host connected to a [`Wire`]; leaves when dropped.
#[derive(Debug)]
pub struct FakeHost {
    wire: Wire,
    id: u64,
}

impl FakeHost {
    /// Writes `bytes` to the guest.
    pub fn send(&self, bytes: &[u8]) {
        let mut state = self.wire.state();
        assert_eq!(state.host, Some(self.id), "send after hanging up");
        state.to_guest.extend(bytes);
        state.wake();
    }
}

impl Drop for FakeHost {
    fn drop(&mut self) {
        if self.wire.state().host == Some(self.id) {
            self.wire.hang_up();
        }
    }
}

impl AsyncRead for FakeHost {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut state = self.wire.state();
        if state.host != Some(self.id) {
            return Poll::Ready(Ok(()));
        }
        if state.to_host.is_empty() {
            state.host_waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let n = state.to_host.len().min(buf.remaining());
        let bytes: Vec<u8> = state.to_host.drain(..n).collect();
        buf.put_slice(&bytes);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for FakeHost {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut state = self.wire.state();
        if state.host != Some(self.id) {
            return Poll::Ready(Err(host_gone()));
        }
        state.to_guest.extend(buf);
        state.wake();
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A host's connection after the opening: what the guest sent after its
/// answer comes first.
#[derive(Debug)]
pub struct HostStream {
    host: FakeHost,
    rest: Bytes,
}

impl HostStream {
    /// Runs the host's side of the opening with `nonce`: the flush, then
    /// the hello until the guest answers.
    pub async fn open(mut host: FakeHost, nonce: u64) -> HostStream {
        let mut opening = HostOpening::new(Nonce::new(nonce));
        let mut buf = [0u8; 4096];
        host.send(&opening.flush());
        loop {
            host.send(&opening.hello());
            let read = match tokio::time::timeout(HELLO_INTERVAL, host.read(&mut buf)).await {
                Err(_unanswered) => continue,
                Ok(read) => read.unwrap(),
            };
            assert_ne!(read, 0, "hung up during the opening");
            if let Some(rest) = opening.feed(&buf[..read]).unwrap() {
                return HostStream {
                    host,
                    rest: Bytes::from(rest),
                };
            }
        }
    }

    /// The host under this connection.
    pub fn into_host(self) -> FakeHost {
        self.host
    }

    /// Opens and sends the HTTP/2 preface, which ends the guest's opening.
    pub async fn open_and_greet(host: FakeHost, nonce: u64) -> HostStream {
        let mut stream = Self::open(host, nonce).await;
        stream.write_all(PREFACE).await.unwrap();
        stream
    }
}

impl AsyncRead for HostStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if super::read_ahead(&mut this.rest, buf) {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.host).poll_read(cx, buf)
    }
}

impl AsyncWrite for HostStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().host).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().host).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().host).poll_shutdown(cx)
    }
}
