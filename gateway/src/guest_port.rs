//! [`GuestPort`]: one connection from the host to a program listening in
//! the guest (ingress), over a `Network.Dial` call, read and written as
//! `AsyncRead + AsyncWrite`. Reads end at the program's half-close;
//! `shutdown` sends the host's.
//!
//! Dropping the call's response stream would cancel the call, and with it
//! bytes still on their way to the guest; so a dropped `GuestPort` whose
//! program has not finished hands the stream to a task that reads it to
//! the end (for at most [`DRAIN_WAIT`]). The end of the host's stream
//! without a `shutdown` first resets the program's connection.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use airlock_proto::v1::{dial_from_host, dial_to_host, DialFromHost, DialToHost};
use bytes::{Buf, Bytes};
use futures::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;
use tokio_util::sync::PollSender;
use tonic::Streaming;

use crate::meter::ByteMeter;

/// The most bytes one message to the guest carries.
pub const CHUNK: usize = 64 * 1024;
/// How long a dropped connection waits for the program's side to end.
pub const DRAIN_WAIT: Duration = Duration::from_secs(30);

/// A connection to a port in the guest, both ways.
#[derive(Debug)]
pub struct GuestPort {
    port: u16,
    incoming: Option<Streaming<DialToHost>>,
    pending: Bytes,
    ended: bool,
    outgoing: PollSender<DialFromHost>,
    /// Counts the bytes each way (the sandbox's ingress meter).
    meter: Arc<ByteMeter>,
}

impl GuestPort {
    /// The stream of a call whose `connected` answer was already read
    /// (the library opens the call, `Sandbox::connect_port`); the bytes
    /// each way are counted on `meter`.
    pub fn new(
        port: u16,
        incoming: Streaming<DialToHost>,
        outgoing: mpsc::Sender<DialFromHost>,
        meter: Arc<ByteMeter>,
    ) -> Self {
        Self {
            port,
            incoming: Some(incoming),
            pending: Bytes::new(),
            ended: false,
            outgoing: PollSender::new(outgoing),
            meter,
        }
    }

    /// The guest port this connects to.
    pub fn port(&self) -> u16 {
        self.port
    }
}

fn broken() -> io::Error {
    io::Error::new(
        io::ErrorKind::BrokenPipe,
        "the connection to the guest port ended",
    )
}

impl AsyncRead for GuestPort {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        while this.pending.is_empty() && !this.ended {
            let Some(incoming) = this.incoming.as_mut() else {
                break;
            };
            match ready!(Pin::new(incoming).poll_next(cx)) {
                Some(Ok(DialToHost {
                    event: Some(dial_to_host::Event::Data(data)),
                })) => this.pending = data,
                Some(Ok(DialToHost {
                    event: Some(dial_to_host::Event::Eof(_)),
                }))
                | None => this.ended = true,
                Some(Ok(_)) => {}
                Some(Err(status)) => {
                    this.ended = true;
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::ConnectionReset,
                        status.message().to_owned(),
                    )));
                }
            }
        }
        let n = this.pending.len().min(buf.remaining());
        buf.put_slice(&this.pending[..n]);
        this.pending.advance(n);
        this.meter.add_from_guest(n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for GuestPort {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        ready!(this.outgoing.poll_reserve(cx)).map_err(|_| broken())?;
        let n = buf.len().min(CHUNK);
        let message = DialFromHost {
            event: Some(dial_from_host::Event::Data(Bytes::copy_from_slice(
                &buf[..n],
            ))),
        };
        this.outgoing.send_item(message).map_err(|_| broken())?;
        this.meter.add_to_guest(n);
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.outgoing.is_closed() {
            return Poll::Ready(Ok(()));
        }
        ready!(this.outgoing.poll_reserve(cx)).map_err(|_| broken())?;
        let message = DialFromHost {
            event: Some(dial_from_host::Event::Eof(true)),
        };
        this.outgoing.send_item(message).map_err(|_| broken())?;
        this.outgoing.close();
        Poll::Ready(Ok(()))
    }
}

impl Drop for GuestPort {
    fn drop(&mut self) {
        // Ends the host's stream: after a shutdown the program's side may
        // finish, without one its connection is reset.
        self.outgoing.abort_send();
        self.outgoing.close();
        let Some(mut incoming) = self.incoming.take() else {
            return;
        };
        if self.ended {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let drained = tokio::time::timeout(DRAIN_WAIT, async {
                    while let Ok(Some(_)) = incoming.message().await {}
                });
                if drained.await.is_err() {
                    tracing::debug!("a guest port connection did not end after the host's");
                }
            });
        }
    }
}
