//! Serving on a virtio-serial port, one host connection at a time.
//!
//! A virtio-serial port is one byte pipe that outlives its connections: the
//! host connects to QEMU's socket, disconnects and connects again (after a
//! snapshot is restored, say), and only one host connection exists at a
//! time. The agent holds the port open throughout:
//!
//! 1. [`device`]: [`Device::open`] finds the port by its name in
//!    `/sys/class/virtio-ports` and opens it non-blocking; [`Device`] reads
//!    and writes it through tokio's reactor without trusting its readiness
//!    alone.
//! 2. [`opening`]: between connections, [`opening::open`] waits for a host
//!    and runs the guest's side of the opening that `airlock_proto::opening`
//!    describes, which finds the host's hello in whatever an old connection
//!    left behind.
//! 3. [`Connection`]: one HTTP/2 connection. Its reads first return the
//!    bytes that followed the opening, then the port's; the host's departure
//!    ends it (end of stream, or a failed write). Dropping it, which tonic
//!    does when the HTTP/2 connection ends, hands the port back.
//! 4. [`incoming`]: the stream of connections that tonic serves. It yields
//!    one connection, waits for that connection to hand the port back, runs
//!    the next opening, and so on for as long as the agent runs; it never
//!    ends and never fails.
//!
//! [`Port`] is what this loop needs from the device, so that tests drive it
//! with a model of the device instead of a VM.

pub mod device;
pub mod opening;

#[cfg(test)]
mod fake;

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use futures::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;
use tonic::transport::server::Connected;

pub use device::{Device, SerialError, APPEAR_WAIT};

/// A serial port as the serve loop drives it: [`Device`], or a model of it
/// in tests.
///
/// Between connections, a read of 0 bytes means that no host is connected
/// now (read again later), and a write fails or waits while no host is
/// there. From [`Port::begin_connection`] to [`Port::end_connection`], the
/// port ends the stream once the host that was connected at the beginning
/// leaves: reads return 0 (end of stream) and writes fail with
/// [`io::ErrorKind::BrokenPipe`], even if another host has connected since.
pub trait Port: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    /// A connection opened with the host that is connected now.
    fn begin_connection(&mut self);
    /// The connection is over; the port waits for the next host.
    fn end_connection(&mut self);
}

/// The connections on `port`, one at a time, for tonic's
/// `serve_with_incoming_shutdown`.
pub fn incoming<P: Port>(port: P) -> impl Stream<Item = Result<Connection<P>, Infallible>> {
    futures::stream::unfold((Slot::Here(port), 0u64), |(slot, served)| async move {
        let mut port = match slot {
            Slot::Here(port) => port,
            Slot::Lent(back) => match back.await {
                Ok(port) => port,
                Err(_) => {
                    // `Connection::drop` always hands the port back; only a
                    // connection leaked without being dropped loses it.
                    tracing::error!("the serial port was not handed back; serving stops");
                    return None;
                }
            },
        };
        port.end_connection();
        let rest = opening::open(&mut port).await;
        port.begin_connection();
        let number = served + 1;
        tracing::info!(connection = number, "host connected on the serial port");
        let (give_back, back) = oneshot::channel();
        let connection = Connection::new(port, rest, give_back, number);
        Some((Ok(connection), (Slot::Lent(back), number)))
    })
}

/// Where the port is between two turns of [`incoming`].
enum Slot<P> {
    /// In hand.
    Here(P),
    /// With the current connection, which sends it back when dropped.
    Lent(oneshot::Receiver<P>),
}

/// One HTTP/2 connection on a serial port; hands the port back to
/// [`incoming`] when dropped.
#[derive(Debug)]
pub struct Connection<P: Port> {
    port: Option<P>,
    rest: Bytes,
    give_back: Option<oneshot::Sender<P>>,
    number: u64,
}

impl<P: Port> Connection<P> {
    fn new(port: P, rest: Vec<u8>, give_back: oneshot::Sender<P>, number: u64) -> Self {
        Self {
            port: Some(port),
            rest: Bytes::from(rest),
            give_back: Some(give_back),
            number,
        }
    }

    fn port(&mut self) -> io::Result<&mut P> {
        self.port
            .as_mut()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "serial port handed back"))
    }
}

impl<P: Port> Drop for Connection<P> {
    fn drop(&mut self) {
        tracing::debug!(connection = self.number, "serial connection ended");
        if let (Some(port), Some(give_back)) = (self.port.take(), self.give_back.take()) {
            // The receiver is gone only when the server stopped.
            let _ = give_back.send(port);
        }
    }
}

/// Moves what is left of `rest` (bytes read past the opening) into `buf`
/// first; false once it is empty, when reads go to the port.
fn read_ahead(rest: &mut Bytes, buf: &mut ReadBuf<'_>) -> bool {
    if !rest.has_remaining() {
        return false;
    }
    let n = rest.remaining().min(buf.remaining());
    buf.put_slice(&rest[..n]);
    rest.advance(n);
    true
}

impl<P: Port> AsyncRead for Connection<P> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if read_ahead(&mut this.rest, buf) {
            return Poll::Ready(Ok(()));
        }
        match this.port() {
            Ok(port) => Pin::new(port).poll_read(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

impl<P: Port> AsyncWrite for Connection<P> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut().port() {
            Ok(port) => Pin::new(port).poll_write(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut().port() {
            Ok(port) => Pin::new(port).poll_flush(cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    /// Does nothing: the port outlives its connections, and a virtio-serial
    /// port has no half-close to tell the host about.
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl<P: Port> Connected for Connection<P> {
    type ConnectInfo = ();

    fn connect_info(&self) -> Self::ConnectInfo {}
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::time::Duration;

    use airlock_proto::v1::health_client::HealthClient;
    use airlock_proto::v1::health_server::HealthServer;
    use airlock_proto::v1::CheckRequest;
    use futures::StreamExt;
    use tokio::io::AsyncReadExt;
    use tokio::sync::watch;

    use super::fake::{HostStream, Wire};
    use super::*;
    use crate::services::HealthService;

    #[tokio::test]
    async fn a_connection_reads_the_rest_of_the_opening_first() {
        let wire = Wire::new();
        let host = wire.connect();
        host.send(b" and then the port");
        let mut port = wire.port();
        port.begin_connection();
        let (give_back, _back) = oneshot::channel();
        let mut connection = Connection::new(port, b"the rest".to_vec(), give_back, 1);
        let mut read = vec![0u8; 26];
        connection.read_exact(&mut read).await.unwrap();
        assert_eq!(read, b"the rest and then the port");
    }

    #[tokio::test]
    async fn a_connection_ends_when_its_host_leaves_even_if_another_came() {
        let wire = Wire::new();
        let first = wire.connect();
        let mut port = wire.port();
        port.begin_connection();
        let (give_back, back) = oneshot::channel();
        let mut connection = Connection::new(port, Vec::new(), give_back, 1);
        drop(first);
        let second = wire.connect();
        second.send(b"airlock-hello");
        let mut buf = [0u8; 16];
        assert_eq!(connection.read(&mut buf).await.unwrap(), 0, "end of stream");
        let write = tokio::io::AsyncWriteExt::write(&mut connection, b"x").await;
        assert_eq!(write.unwrap_err().kind(), io::ErrorKind::BrokenPipe);
        drop(connection);
        let mut port = back.await.expect("the port comes back on drop");
        port.end_connection();
        let n = port.read(&mut buf).await.unwrap();
        assert_eq!(
            &buf[..n],
            b"airlock-hello",
            "the next host's bytes are kept"
        );
    }

    #[tokio::test]
    async fn yields_the_next_connection_only_after_the_last_is_dropped() {
        let wire = Wire::new();
        let mut incoming = Box::pin(incoming(wire.port()));
        let first_host = tokio::spawn(HostStream::open_and_greet(wire.connect(), 1));
        let first = incoming.next().await.unwrap().unwrap();
        first_host.await.unwrap();
        wire.hang_up();
        let second_host = tokio::spawn(HostStream::open_and_greet(wire.connect(), 2));
        let next = tokio::time::timeout(Duration::from_millis(200), incoming.next()).await;
        assert!(next.is_err(), "a second connection while the first lives");
        drop(first);
        let _second = incoming.next().await.unwrap().unwrap();
        second_host.await.unwrap();
    }

    /// A Health client over the host's side of the opening.
    async fn health_over(host: HostStream) -> HealthClient<tonic::transport::Channel> {
        let slot = std::sync::Mutex::new(Some(host));
        let channel = tonic::transport::Endpoint::from_static("http://agent")
            .connect_with_connector(tower::service_fn(move |_| {
                let host = slot.lock().unwrap().take();
                async move {
                    host.map(hyper_util::rt::TokioIo::new)
                        .ok_or_else(|| io::Error::other("one connection per host"))
                }
            }))
            .await
            .unwrap();
        HealthClient::new(channel)
    }

    #[tokio::test]
    async fn grpc_is_served_to_each_host_in_turn() {
        let wire = Wire::new();
        let (stop_tx, mut stop_rx) = watch::channel(false);
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(HealthServer::new(HealthService::new(1, 2)))
                .serve_with_incoming_shutdown(incoming(wire.port()), async move {
                    let _ = stop_rx.wait_for(|stop| *stop).await;
                }),
        );

        for nonce in 1..=3 {
            // What the last host left unread stays in the port; the next
            // opening skips it.
            let host = wire.connect();
            host.send(b"\0\0\x04\x08 stale");
            let mut health = health_over(HostStream::open(host, nonce).await).await;
            let answer = health.check(CheckRequest {}).await.unwrap().into_inner();
            assert_eq!(answer.serving_since_us, 2, "host {nonce}");
            wire.hang_up();
            let error = health.check(CheckRequest {}).await.unwrap_err();
            assert_ne!(error.code(), tonic::Code::Ok, "host {nonce}");
        }

        stop_tx.send_replace(true);
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("the server stops")
            .unwrap()
            .unwrap();
    }
}
