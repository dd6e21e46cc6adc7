//! Guest connections: the listener the redirect sends every outgoing TCP
//! connection to, and the pump that carries one connection's bytes both
//! ways over a [`Carrier`]. The original destination comes from conntrack
//! (`SO_ORIGINAL_DST`); the host decides everything about it, and what it
//! says of a refusal goes into the [`RefusalLog`].

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;

use airlock_proto::v1::{
    carry_from_host, carry_to_host, opened, CarryToHost, GuestConnection, Opened,
};
use nix::sys::socket::{getsockopt, setsockopt, sockopt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::carrier::{Carrier, Carriers, TAKE_WAIT};
use super::refusals::RefusalLog;

/// What the refusal log says of a connection the agent resets.
const RESET: &str = "connection reset";

/// The port on 127.0.0.1 the redirect sends TCP connections to.
pub const LISTEN_PORT: u16 = 15001;
/// The most bytes one message to the host carries.
const CHUNK: usize = 32 * 1024;

/// Accepts redirected connections for ever, carrying each on its own task.
pub async fn serve(listener: TcpListener, carriers: Arc<Carriers>, log: Arc<RefusalLog>) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "accepting a guest connection");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let (carriers, log) = (carriers.clone(), log.clone());
        tokio::spawn(async move {
            let destination = match original_destination(&stream) {
                Ok(destination) => destination,
                Err(error) => {
                    tracing::warn!(%peer, %error, "a connection without an original destination");
                    return;
                }
            };
            match carriers.take(TAKE_WAIT).await {
                Ok(carrier) => carry(stream, destination, carrier, &log).await,
                Err(error) => {
                    tracing::warn!(%destination, %error, "guest connection dropped");
                    log.record(&destination.to_string(), RESET, &error.to_string());
                    reset(&stream);
                }
            }
        });
    }
}

/// Where the program meant to connect, before the redirect.
fn original_destination(stream: &TcpStream) -> nix::Result<SocketAddrV4> {
    let raw = getsockopt(stream, sockopt::OriginalDst)?;
    Ok(SocketAddrV4::new(
        Ipv4Addr::from(u32::from_be(raw.sin_addr.s_addr)),
        u16::from_be(raw.sin_port),
    ))
}

/// Makes the program's connection end with a reset rather than a clean
/// close, so that it reads an error.
pub(super) fn reset(stream: &TcpStream) {
    let linger = nix::libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    if let Err(error) = setsockopt(stream, sockopt::Linger, &linger) {
        tracing::debug!(%error, "setting SO_LINGER for a reset");
    }
}

fn event(event: carry_to_host::Event) -> Result<CarryToHost, tonic::Status> {
    Ok(CarryToHost { event: Some(event) })
}

/// Carries one connection until both directions are done.
async fn carry(stream: TcpStream, destination: SocketAddrV4, carrier: Carrier, log: &RefusalLog) {
    let Carrier {
        to_host,
        mut from_host,
    } = carrier;
    let opened = Opened {
        kind: Some(opened::Kind::Connection(GuestConnection {
            destination_ip: destination.ip().to_string(),
            destination_port: u32::from(destination.port()),
        })),
    };
    if to_host
        .send(event(carry_to_host::Event::Opened(opened)))
        .await
        .is_err()
    {
        reset(&stream);
        return;
    }
    let (mut reader, mut writer) = stream.into_split();
    // True when the program's side broke (a reset): the call then ends,
    // which tells the host.
    let upward = async {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match reader.read(&mut buf).await {
                Ok(0) => {
                    let _ = to_host.send(event(carry_to_host::Event::Eof(true))).await;
                    return false;
                }
                Ok(n) => {
                    let data = bytes::Bytes::copy_from_slice(&buf[..n]);
                    if to_host
                        .send(event(carry_to_host::Event::Data(data)))
                        .await
                        .is_err()
                    {
                        return true;
                    }
                }
                Err(error) => {
                    tracing::debug!(%destination, %error, "reading a guest connection");
                    return true;
                }
            }
        }
    };
    // The host ends its side after an end of file when the connection is
    // done; an end without one (or an error) aborts it.
    let downward = async {
        let mut host_eof = false;
        loop {
            match from_host.message().await {
                Ok(Some(message)) => match message.event {
                    Some(carry_from_host::Event::Data(data))
                        if writer.write_all(&data).await.is_err() =>
                    {
                        return false;
                    }
                    Some(carry_from_host::Event::Data(_)) => {}
                    Some(carry_from_host::Event::Eof(_)) => {
                        host_eof = true;
                        let _ = writer.shutdown().await;
                    }
                    Some(carry_from_host::Event::Refused(reason)) => {
                        tracing::info!(%destination, %reason, "connection refused by the host");
                        log.record(&destination.to_string(), RESET, &reason);
                        return true;
                    }
                    Some(carry_from_host::Event::Note(note)) => {
                        let outcome = format!("answered {}", note.answer);
                        log.record(&destination.to_string(), &outcome, &note.reason);
                    }
                    None => {}
                },
                Ok(None) => return !host_eof,
                Err(status) => {
                    tracing::debug!(%destination, %status, "carrier ended");
                    return true;
                }
            }
        }
    };
    // The host's end of the call ends the connection; the program's end of
    // file only ends the upward direction, its reset the whole call.
    let refused = {
        tokio::pin!(upward, downward);
        let mut upward_done = false;
        loop {
            tokio::select! {
                broken = &mut upward, if !upward_done => {
                    if broken {
                        break true;
                    }
                    upward_done = true;
                }
                refused = &mut downward => break refused,
            }
        }
    };
    let mut stream = match reader.reunite(writer) {
        Ok(stream) => stream,
        Err(_) => return,
    };
    if refused {
        reset(&stream);
    } else {
        let _ = stream.shutdown().await;
    }
}
