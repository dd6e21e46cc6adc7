//! Ingress: `Network.Dial`, a connection from the host to a program that
//! listens in the guest. The host's first message names the port; the
//! agent connects on the guest's loopback, answers `connected` (or
//! `refused`, naming the port), then pumps bytes both ways with
//! half-closes until both directions are done. One call per connection.

use std::net::{Ipv4Addr, SocketAddr};

use airlock_proto::v1::{dial_from_host, dial_to_host, DialConnected, DialFromHost, DialToHost};
use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tonic::{Status, Streaming};

/// The most bytes one message to the host carries.
const CHUNK: usize = 64 * 1024;
/// Messages toward the host buffered per connection before the guest's
/// program is made to wait.
pub const TO_HOST_DEPTH: usize = 8;

/// The first message of a Dial call was not a usable `open`.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    /// The call began with something else (or nothing).
    #[error("the first message of a Dial call must be `open`")]
    NoOpen,
    /// The port is 0 or above 65535.
    #[error("port {0} is not a TCP port (1-65535)")]
    BadPort(u32),
    /// The host's stream broke before `open`.
    #[error("reading the first message: {0}")]
    Stream(String),
}

impl From<DialError> for Status {
    fn from(error: DialError) -> Self {
        match error {
            DialError::Stream(_) => Status::cancelled(error.to_string()),
            _ => Status::invalid_argument(error.to_string()),
        }
    }
}

/// Reads the call's first message: the port to connect to.
pub async fn port(from_host: &mut Streaming<DialFromHost>) -> Result<u16, DialError> {
    match from_host.message().await {
        Ok(Some(DialFromHost {
            event: Some(dial_from_host::Event::Open(open)),
        })) => match u16::try_from(open.port) {
            Ok(port) if port != 0 => Ok(port),
            _ => Err(DialError::BadPort(open.port)),
        },
        Ok(_) => Err(DialError::NoOpen),
        Err(status) => Err(DialError::Stream(status.message().to_owned())),
    }
}

fn event(event: dial_to_host::Event) -> Result<DialToHost, Status> {
    Ok(DialToHost { event: Some(event) })
}

/// Connects to `port` on the guest's loopback and carries the connection
/// over the call until both directions are done.
pub async fn serve(
    port: u16,
    from_host: Streaming<DialFromHost>,
    to_host: mpsc::Sender<Result<DialToHost, Status>>,
) {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let stream = match TcpStream::connect(addr).await {
        Ok(stream) => stream,
        Err(error) => {
            let reason = refusal(port, &error);
            tracing::debug!(port, %error, "dialled guest port refused");
            let _ = to_host
                .send(event(dial_to_host::Event::Refused(reason)))
                .await;
            return;
        }
    };
    let _ = stream.set_nodelay(true);
    if to_host
        .send(event(dial_to_host::Event::Connected(DialConnected {})))
        .await
        .is_err()
    {
        return;
    }
    pump(stream, from_host, to_host).await;
}

/// The reason a refusal gives, naming the port.
fn refusal(port: u16, error: &std::io::Error) -> String {
    if error.kind() == std::io::ErrorKind::ConnectionRefused {
        format!("nothing listens on guest port {port}")
    } else {
        format!("connecting to guest port {port}: {error}")
    }
}

/// Carries bytes both ways. The host's end of its stream after its `eof`
/// waits for the program's side to finish; an end without one (or an
/// error) resets the program's connection.
async fn pump(
    stream: TcpStream,
    mut from_host: Streaming<DialFromHost>,
    to_host: mpsc::Sender<Result<DialToHost, Status>>,
) {
    let (mut reader, mut writer) = stream.into_split();
    // True when the program's side broke, or the host went away.
    let upward = async {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match reader.read(&mut buf).await {
                Ok(0) => {
                    let _ = to_host.send(event(dial_to_host::Event::Eof(true))).await;
                    return false;
                }
                Ok(n) => {
                    let data = Bytes::copy_from_slice(&buf[..n]);
                    if to_host
                        .send(event(dial_to_host::Event::Data(data)))
                        .await
                        .is_err()
                    {
                        return true;
                    }
                }
                Err(error) => {
                    tracing::debug!(%error, "reading a dialled connection");
                    return true;
                }
            }
        }
    };
    // True when the host aborted; false after its clean end.
    let downward = async {
        let mut host_eof = false;
        loop {
            match from_host.message().await {
                Ok(Some(message)) => match message.event {
                    Some(dial_from_host::Event::Data(data)) => {
                        if writer.write_all(&data).await.is_err() {
                            return true;
                        }
                    }
                    Some(dial_from_host::Event::Eof(_)) => {
                        host_eof = true;
                        let _ = writer.shutdown().await;
                    }
                    Some(dial_from_host::Event::Open(_)) | None => {}
                },
                Ok(None) => return !host_eof,
                Err(status) => {
                    tracing::debug!(%status, "dial call ended");
                    return true;
                }
            }
        }
    };
    let reset = {
        tokio::pin!(upward, downward);
        let (mut up_done, mut down_done) = (false, false);
        loop {
            tokio::select! {
                broken = &mut upward, if !up_done => {
                    if broken {
                        break true;
                    }
                    up_done = true;
                    if down_done {
                        break false;
                    }
                }
                aborted = &mut downward, if !down_done => {
                    if aborted {
                        break true;
                    }
                    down_done = true;
                    if up_done {
                        break false;
                    }
                }
            }
        }
    };
    if reset {
        if let Ok(stream) = reader.reunite(writer) {
            super::tcp::reset(&stream);
        }
    }
}
