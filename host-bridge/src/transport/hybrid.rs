//! The hybrid-vsock handshake.
//!
//! Firecracker, Cloud Hypervisor and vhost-device-vsock all expose a guest's
//! vsock ports through one host Unix socket: connect, write `CONNECT <port>\n`,
//! read `OK <host-port>\n`, and the stream is then the guest connection.
//! [`connect_hybrid`] does that handshake strictly.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// Longest acceptable handshake answer: "OK " plus a u32 and a newline.
const MAX_ANSWER: usize = 32;
/// How long the guest side may take to answer a CONNECT.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);

/// Errors of the hybrid-vsock handshake.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("cannot connect to {path}")]
    Connect {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("hybrid vsock i/o")]
    Io(#[from] std::io::Error),
    #[error("connection closed before the guest port {port} answered (not listening yet?)")]
    Refused { port: u32 },
    #[error("no answer from guest port {port} within {HANDSHAKE_TIMEOUT:?}")]
    Timeout { port: u32 },
    #[error("unexpected handshake answer {0:?}")]
    BadAnswer(String),
}

impl From<HandshakeError> for std::io::Error {
    fn from(error: HandshakeError) -> Self {
        match error {
            HandshakeError::Io(io) => io,
            other => std::io::Error::new(std::io::ErrorKind::ConnectionRefused, other),
        }
    }
}

/// Connects to guest `port` through the hybrid-vsock socket at `uds`.
pub async fn connect_hybrid(uds: &Path, port: u32) -> Result<UnixStream, HandshakeError> {
    let mut stream = UnixStream::connect(uds)
        .await
        .map_err(|source| HandshakeError::Connect {
            path: uds.to_owned(),
            source,
        })?;
    stream
        .write_all(format!("CONNECT {port}\n").as_bytes())
        .await?;
    // Read byte by byte: anything after the newline already belongs to the
    // guest's stream and must stay in the socket.
    let mut answer = Vec::with_capacity(MAX_ANSWER);
    let read_line = async {
        loop {
            let byte = match stream.read_u8().await {
                Ok(byte) => byte,
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    return Err(HandshakeError::Refused { port })
                }
                Err(e) => return Err(e.into()),
            };
            if byte == b'\n' {
                return Ok(());
            }
            answer.push(byte);
            if answer.len() > MAX_ANSWER {
                return Err(HandshakeError::BadAnswer(
                    String::from_utf8_lossy(&answer).into_owned(),
                ));
            }
        }
    };
    tokio::time::timeout(HANDSHAKE_TIMEOUT, read_line)
        .await
        .map_err(|_| HandshakeError::Timeout { port })??;
    parse_answer(&answer)?;
    Ok(stream)
}

/// Accepts exactly `OK <u32>`.
fn parse_answer(answer: &[u8]) -> Result<u32, HandshakeError> {
    let bad = || HandshakeError::BadAnswer(String::from_utf8_lossy(answer).into_owned());
    let text = std::str::from_utf8(answer).map_err(|_| bad())?;
    let port = text.strip_prefix("OK ").ok_or_else(bad)?;
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    port.parse().map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncBufReadExt;
    use tokio::net::UnixListener;

    #[test]
    fn answer_parsing_is_strict() {
        assert_eq!(parse_answer(b"OK 1073741824").unwrap(), 1_073_741_824);
        for bad in [
            &b"OK"[..],
            b"OK ",
            b"ok 5",
            b"OK 5 ",
            b"OK -1",
            b"ERR",
            b"OK 99999999999",
        ] {
            assert!(
                parse_answer(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    /// A stand-in for the hybrid-vsock side, so the handshake is tested
    /// without a VM: answers `answer` and then echoes.
    async fn fake_device(answer: &'static [u8]) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.sock");
        let listener = UnixListener::bind(&path).unwrap();
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let mut stream = tokio::io::BufReader::new(stream);
            let mut line = String::new();
            stream.read_line(&mut line).await.unwrap();
            assert_eq!(line, "CONNECT 1024\n");
            stream.get_mut().write_all(answer).await.unwrap();
            let mut buf = [0u8; 64];
            let n = stream.read(&mut buf).await.unwrap();
            stream.get_mut().write_all(&buf[..n]).await.unwrap();
        });
        (dir, path)
    }

    #[tokio::test]
    async fn handshake_then_the_stream_is_the_guest_connection() {
        // The answer and the first guest bytes arrive in one write.
        let (_dir, path) = fake_device(b"OK 5\nhello").await;
        let mut stream = connect_hybrid(&path, 1024).await.unwrap();
        let mut first = [0u8; 5];
        stream.read_exact(&mut first).await.unwrap();
        assert_eq!(&first, b"hello");
        stream.write_all(b"ping").await.unwrap();
        let mut echo = [0u8; 4];
        stream.read_exact(&mut echo).await.unwrap();
        assert_eq!(&echo, b"ping");
    }

    #[tokio::test]
    async fn closed_or_garbled_answers_are_errors() {
        let (_dir, path) = fake_device(b"").await;
        // The fake closes after echoing nothing: we see a refusal.
        let err = tokio::time::timeout(Duration::from_secs(5), connect_hybrid(&path, 1024)).await;
        assert!(matches!(err, Ok(Err(_))), "{err:?}");
        let (_dir, path) = fake_device(b"NOPE\n").await;
        let err = connect_hybrid(&path, 1024).await.unwrap_err();
        assert!(
            matches!(err, HandshakeError::BadAnswer(ref a) if a == "NOPE"),
            "{err:?}"
        );
    }
}
