//! A minimal client of the QEMU guest agent (qemu-ga) for the benchmark:
//! JSON requests and one-line JSON replies over the Unix socket behind the
//! VM's `org.qemu.guest_agent.0` virtio-serial port.
//!
//! [`Qga::connect`] resynchronises with `guest-sync-delimited` (a 0xFF
//! byte, the request, then everything up to qemu-ga's 0xFF sentinel is
//! discarded), retrying until qemu-ga answers. [`Qga::exec`] is
//! `guest-exec` plus `guest-exec-status` polled until the program exited;
//! [`Qga::upload`] is `guest-file-open`, `guest-file-write` with base64
//! chunks and `guest-file-close`.

use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;

/// qemu-ga's sentinel byte for `guest-sync-delimited`.
const SENTINEL: u8 = 0xff;
/// How long one sync attempt waits for its reply before trying again.
const SYNC_ATTEMPT: Duration = Duration::from_secs(2);

/// A connection to qemu-ga.
#[derive(Debug)]
pub struct Qga {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    sync_id: u64,
}

/// A finished `guest-exec`: the exit code and how many status polls it took.
#[derive(Debug, Clone, Copy)]
pub struct QgaExit {
    pub exitcode: i64,
    pub polls: u32,
}

impl Qga {
    /// Connects to QEMU's socket for the port and syncs with qemu-ga,
    /// retrying until it answers or `timeout` passes (qemu-ga may still be
    /// starting: QEMU holds the bytes until the guest opens the port).
    pub async fn connect(socket: &Path, timeout: Duration) -> io::Result<Self> {
        let (read, writer) = UnixStream::connect(socket).await?.into_split();
        let mut qga = Self {
            reader: BufReader::new(read),
            writer,
            sync_id: u64::from(std::process::id()) << 20,
        };
        let deadline = Instant::now() + timeout;
        loop {
            match tokio::time::timeout(SYNC_ATTEMPT, qga.sync()).await {
                Ok(result) => return result.map(|()| qga),
                Err(_) if Instant::now() > deadline => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "qemu-ga did not answer guest-sync-delimited",
                    ))
                }
                Err(_) => {}
            }
        }
    }

    /// `guest-sync-delimited`: flushes qemu-ga's parser and skips whatever
    /// stale replies precede the sentinel and our id.
    async fn sync(&mut self) -> io::Result<()> {
        self.sync_id += 1;
        let id = self.sync_id;
        let mut request = vec![SENTINEL];
        request.extend_from_slice(
            format!(r#"{{"execute":"guest-sync-delimited","arguments":{{"id":{id}}}}}"#).as_bytes(),
        );
        request.push(b'\n');
        self.writer.write_all(&request).await?;
        let mut skipped = Vec::new();
        loop {
            skipped.clear();
            self.reader.read_until(SENTINEL, &mut skipped).await?;
            if skipped.last() != Some(&SENTINEL) {
                return Err(closed());
            }
            let reply = self.read_reply().await?;
            if reply.get("return").and_then(Value::as_u64) == Some(id) {
                return Ok(());
            }
        }
    }

    /// Sends `command` and returns its `return` value (an `error` reply
    /// becomes an [`io::Error`] with qemu-ga's description).
    pub async fn call(&mut self, command: &str, arguments: Value) -> io::Result<Value> {
        let mut request = serde_json::to_vec(&json!({"execute": command, "arguments": arguments}))?;
        request.push(b'\n');
        self.writer.write_all(&request).await?;
        let mut reply = self.read_reply().await?;
        if let Some(error) = reply.get("error") {
            return Err(io::Error::other(format!("qemu-ga {command}: {error}")));
        }
        reply
            .get_mut("return")
            .map(Value::take)
            .ok_or_else(|| io::Error::other(format!("qemu-ga {command}: no return in reply")))
    }

    async fn read_reply(&mut self) -> io::Result<Value> {
        let mut line = Vec::new();
        self.reader.read_until(b'\n', &mut line).await?;
        if line.last() != Some(&b'\n') {
            return Err(closed());
        }
        Ok(serde_json::from_slice(&line)?)
    }

    /// `guest-exec` of `path` without output capture, then
    /// `guest-exec-status` until it reports the exit: back to back, or
    /// `pause` apart (each poll takes the guest's one vCPU from the
    /// program it waits for).
    pub async fn exec(&mut self, path: &str, pause: Duration) -> io::Result<QgaExit> {
        let started = self.call("guest-exec", json!({"path": path})).await?;
        let pid = started
            .get("pid")
            .and_then(Value::as_i64)
            .ok_or_else(|| io::Error::other("guest-exec: no pid"))?;
        let mut polls = 0;
        loop {
            if polls > 0 && !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
            polls += 1;
            let status = self.call("guest-exec-status", json!({"pid": pid})).await?;
            if status.get("exited").and_then(Value::as_bool) == Some(true) {
                let exitcode = status.get("exitcode").and_then(Value::as_i64).unwrap_or(-1);
                return Ok(QgaExit { exitcode, polls });
            }
        }
    }

    /// Writes `data` to `path` in the guest: `guest-file-open` (mode `w`),
    /// one `guest-file-write` per `chunk` bytes (base64 in the request),
    /// `guest-file-close`.
    pub async fn upload(&mut self, path: &str, data: &[u8], chunk: usize) -> io::Result<()> {
        let handle = self
            .call("guest-file-open", json!({"path": path, "mode": "w"}))
            .await?;
        for piece in data.chunks(chunk) {
            let written = self
                .call(
                    "guest-file-write",
                    json!({"handle": handle, "buf-b64": base64(piece)}),
                )
                .await?;
            let count = written.get("count").and_then(Value::as_u64);
            if count != u64::try_from(piece.len()).ok() {
                return Err(io::Error::other(format!(
                    "guest-file-write wrote {count:?} of {} bytes",
                    piece.len()
                )));
            }
        }
        self.call("guest-file-close", json!({"handle": handle}))
            .await
            .map(drop)
    }
}

fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "qemu-ga connection closed")
}

/// Standard base64 with padding (RFC 4648), as qemu-ga's `buf-b64` takes it.
pub fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for group in data.chunks(3) {
        let byte = |i: usize| u32::from(group.get(i).copied().unwrap_or(0));
        let bits = byte(0) << 16 | byte(1) << 8 | byte(2);
        for i in 0..4 {
            if i <= group.len() {
                let index = (bits >> (18 - 6 * i)) & 0x3f;
                out.push(char::from(ALPHABET[index as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}
