//! One guest connection as a byte stream on the host: the messages of a
//! `Network.Carry` call read and written as `AsyncRead + AsyncWrite`, so
//! that sniffing, TLS and splicing work on it as on a socket. Reads end at
//! the program's half-close; `shutdown` sends the host's.
//!
//! Dropping the call's response stream would cancel the whole call, and
//! with it bytes still on their way to the guest; so a dropped `Carried`
//! hands the response stream back ([`Carried::new`]'s `give_back`), and
//! its owner reads it to the end before letting go.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use airlock_proto::v1::{carry_from_host, carry_to_host, CarryFromHost, CarryToHost};
use bytes::{Buf, Bytes};
use futures::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::PollSender;
use tonic::Streaming;

use crate::meter::ByteMeter;

/// The most bytes one message to the guest carries.
pub const CHUNK: usize = 128 * 1024;

/// A guest connection's bytes, both ways.
#[derive(Debug)]
pub struct Carried {
    incoming: Option<Streaming<CarryToHost>>,
    give_back: Option<oneshot::Sender<Streaming<CarryToHost>>>,
    pending: Bytes,
    ended: bool,
    outgoing: PollSender<CarryFromHost>,
    /// Counts the bytes each way (the gateway's egress meter).
    meter: Arc<ByteMeter>,
}

impl Carried {
    /// The stream of a call whose `opened` message was already read.
    /// `give_back` receives the response stream when this is dropped; the
    /// bytes each way are counted on `meter`.
    pub fn new(
        incoming: Streaming<CarryToHost>,
        outgoing: mpsc::Sender<CarryFromHost>,
        give_back: oneshot::Sender<Streaming<CarryToHost>>,
        meter: Arc<ByteMeter>,
    ) -> Self {
        Self {
            incoming: Some(incoming),
            give_back: Some(give_back),
            pending: Bytes::new(),
            ended: false,
            outgoing: PollSender::new(outgoing),
            meter,
        }
    }
}

fn broken(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, what.to_owned())
}

impl AsyncRead for Carried {
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
                Some(Ok(CarryToHost {
                    event: Some(carry_to_host::Event::Data(data)),
                })) => this.pending = data,
                Some(Ok(CarryToHost {
                    event: Some(carry_to_host::Event::Eof(_)),
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

impl Drop for Carried {
    fn drop(&mut self) {
        if let (Some(incoming), Some(give_back)) = (self.incoming.take(), self.give_back.take()) {
            let _ = give_back.send(incoming);
        }
    }
}

impl AsyncWrite for Carried {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        ready!(this.outgoing.poll_reserve(cx)).map_err(|_| broken("the guest connection ended"))?;
        let n = buf.len().min(CHUNK);
        let message = CarryFromHost {
            event: Some(carry_from_host::Event::Data(Bytes::copy_from_slice(
                &buf[..n],
            ))),
        };
        this.outgoing
            .send_item(message)
            .map_err(|_| broken("the guest connection ended"))?;
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
        ready!(this.outgoing.poll_reserve(cx)).map_err(|_| broken("the guest connection ended"))?;
        let message = CarryFromHost {
            event: Some(carry_from_host::Event::Eof(true)),
        };
        this.outgoing
            .send_item(message)
            .map_err(|_| broken("the guest connection ended"))?;
        this.outgoing.close();
        Poll::Ready(Ok(()))
    }
}
