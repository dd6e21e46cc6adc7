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
pub mod error;
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

pub use device::{Device, APPEAR_WAIT};
pub use error::SerialError;

/// The most bytes one `write()` to a virtio-serial port takes (the guest
/// driver's own cap, `port_fops_write` in `drivers/char/virtio_console.c`).
pub const GATHER_LIMIT: usize = 32 * 1024;

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
    /// The buffer [`AsyncWrite::poll_write_vectored`] gathers into.
    gathered: Vec<u8>,
    give_back: Option<oneshot::Sender<P>>,
    number: u64,
}

impl<P: Port> Connection<P> {
    fn new(port: P, rest: Vec<u8>, give_back: oneshot::Sender<P>, number: u64) -> Self {
        Self {
            port: Some(port),
            rest: Bytes::from(rest),
            gathered: Vec::with_capacity(GATHER_LIMIT),
            give_back: Some(give_back),
            number,
        }
    }

    fn port(&mut self) -> io::Result<&mut P> {
        self.port.as_mut().ok_or_else(handed_back)
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

fn handed_back() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "serial port handed back")
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

    /// Gathers `bufs` into one write of at most [`GATHER_LIMIT`] bytes.
    ///
    /// HTTP/2 hands over each frame as a 9-byte header and its payload.
    /// Written one by one, each would be a `write()` of its own, and on a
    /// virtio-serial port every `write()` is a buffer and a notification
    /// of the host: the guest driver (`port_fops_write`) has no
    /// scatter-gather and takes at most [`GATHER_LIMIT`] bytes a call. One
    /// copy into a gathered buffer is far cheaper than those exits under
    /// emulation, and no worse under KVM.
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let port = match this.port.as_mut() {
            Some(port) => port,
            None => return Poll::Ready(Err(handed_back())),
        };
        let nonempty = bufs.iter().filter(|b| !b.is_empty());
        let first = match nonempty.clone().next() {
            Some(first) => first,
            None => return Poll::Ready(Ok(0)),
        };
        if first.len() >= GATHER_LIMIT || nonempty.clone().nth(1).is_none() {
            return Pin::new(port).poll_write(cx, first);
        }
        this.gathered.clear();
        for buf in nonempty {
            let room = GATHER_LIMIT - this.gathered.len();
            if room == 0 {
                break;
            }
            this.gathered.extend_from_slice(&buf[..buf.len().min(room)]);
        }
        // A short write is reported as such: the caller resends the rest,
        // so nothing gathered but unwritten is lost.
        Pin::new(port).poll_write(cx, &this.gathered)
    }

    fn is_write_vectored(&self) -> bool {
        true
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

    /// A port that records each `write()` it is given and takes at most
    /// `cap` bytes of it, as the guest driver does.
    #[derive(Debug)]
    struct RecordingPort {
        writes: Vec<Vec<u8>>,
        cap: usize,
    }

    impl AsyncRead for RecordingPort {
        fn poll_read(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            _buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Poll::Pending
        }
    }

    impl AsyncWrite for RecordingPort {
        fn poll_write(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let this = self.get_mut();
            let n = buf.len().min(this.cap);
            this.writes.push(buf[..n].to_vec());
            Poll::Ready(Ok(n))
        }

        fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    impl Port for RecordingPort {
        fn begin_connection(&mut self) {}
        fn end_connection(&mut self) {}
    }

    fn recording(cap: usize) -> Connection<RecordingPort> {
        let port = RecordingPort {
            writes: Vec::new(),
            cap,
        };
        let (give_back, _back) = oneshot::channel();
        Connection::new(port, Vec::new(), give_back, 1)
    }

    fn writes(connection: &Connection<RecordingPort>) -> Vec<usize> {
        let port = connection.port.as_ref().unwrap();
        port.writes.iter().map(Vec::len).collect()
    }

    #[tokio::test]
    async fn frames_handed_over_in_pieces_go_out_in_one_write() {
        use tokio::io::AsyncWriteExt;
        let mut connection = recording(GATHER_LIMIT);
        assert!(connection.is_write_vectored());
        let header = [1u8; 9];
        let payload = [2u8; 100];
        let trailer = [3u8; 30];
        let slices = [
            io::IoSlice::new(&header),
            io::IoSlice::new(&[]),
            io::IoSlice::new(&payload),
            io::IoSlice::new(&trailer),
        ];
        let n = connection.write_vectored(&slices).await.unwrap();
        assert_eq!(n, 139);
        assert_eq!(writes(&connection), [139]);
        let written = &connection.port.as_ref().unwrap().writes[0];
        assert_eq!(&written[..9], &header);
        assert_eq!(&written[9..109], &payload);
        assert_eq!(&written[109..], &trailer);
    }

    #[tokio::test]
    async fn a_gathered_write_stops_at_the_drivers_limit_and_says_how_much_went() {
        use tokio::io::AsyncWriteExt;
        let mut connection = recording(GATHER_LIMIT);
        let header = [1u8; 9];
        let payload = vec![2u8; 40 * 1024];
        let slices = [io::IoSlice::new(&header), io::IoSlice::new(&payload)];
        let n = connection.write_vectored(&slices).await.unwrap();
        assert_eq!(n, GATHER_LIMIT, "the caller resends the rest");
        assert_eq!(writes(&connection), [GATHER_LIMIT]);

        // A short write by the port is reported as it is.
        let mut short = recording(10);
        let n = short.write_vectored(&slices).await.unwrap();
        assert_eq!(n, 10);
    }

    #[tokio::test]
    async fn a_large_or_lone_piece_is_written_without_a_copy() {
        use tokio::io::AsyncWriteExt;
        let mut connection = recording(usize::MAX);
        let big = vec![5u8; GATHER_LIMIT + 1];
        let tail = [6u8; 4];
        let n = connection
            .write_vectored(&[io::IoSlice::new(&big), io::IoSlice::new(&tail)])
            .await
            .unwrap();
        assert_eq!(n, GATHER_LIMIT + 1, "the large piece alone");
        let n = connection
            .write_vectored(&[io::IoSlice::new(&[]), io::IoSlice::new(&tail)])
            .await
            .unwrap();
        assert_eq!(n, 4);
        assert_eq!(writes(&connection), [GATHER_LIMIT + 1, 4]);
        assert!(connection.gathered.is_empty(), "nothing was gathered");
        let n = connection.write_vectored(&[]).await.unwrap();
        assert_eq!(n, 0);
    }

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
    async fn a_connection_a_restore_caught_mid_frame_ends_on_the_next_hosts_flush() {
        use airlock_proto::opening::AGENT_MAX_FRAME_BYTES;
        use tokio::io::AsyncWriteExt;
        let wire = Wire::new();
        let (stop_tx, mut stop_rx) = watch::channel(false);
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .max_frame_size(Some(AGENT_MAX_FRAME_BYTES))
                .add_service(HealthServer::new(HealthService::new(1, 2)))
                .serve_with_incoming_shutdown(incoming(wire.port()), async move {
                    let _ = stop_rx.wait_for(|stop| *stop).await;
                }),
        );
        let mut first = HostStream::open_and_greet(wire.connect(), 1).await;
        // Empty SETTINGS, then the start of the largest frame the agent
        // allows (of a type it ignores): the snapshot comes 100 bytes in.
        let mut bytes = vec![0, 0, 0, 4, 0, 0, 0, 0, 0];
        bytes.extend(&AGENT_MAX_FRAME_BYTES.to_be_bytes()[1..]);
        bytes.extend([0xfa, 0, 0, 0, 0, 0]);
        bytes.extend([0u8; 100]);
        first.write_all(&bytes).await.unwrap();
        while !wire.all_read() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }

        // The restored VM's host: the guest's connection goes on, and
        // without the flush would take the hellos as its frame's payload.
        let host = wire.replace_unseen(first.into_host());
        let opened = tokio::time::timeout(Duration::from_secs(2), HostStream::open(host, 2))
            .await
            .expect("the next host's opening is answered");
        let mut health = health_over(opened).await;
        let answer = health.check(CheckRequest {}).await.unwrap().into_inner();
        assert_eq!(answer.serving_since_us, 2);

        stop_tx.send_replace(true);
        drop(health);
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("the server stops")
            .unwrap()
            .unwrap();
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
