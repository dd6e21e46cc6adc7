//! [`Capture`]: one output stream of a command or cell, kept whole while it
//! is short, and past [`SHOWN`] bytes cut to its head and tail while the
//! whole of it is written to a log file in the sandbox (`Files.Write`,
//! streamed as it arrives), so the tool's answer stays small and nothing
//! is lost. Binary output is never shown: it goes to the log file too.

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;

use airlock_client::api::{write_file_request, WriteFileRequest, WriteHeader};
use airlock_client::limits::MAX_CHUNK_BYTES;
use airlock_client::{Client, ClientError};

use crate::text;

/// Bytes of one stream shown at most: [`HEAD`] from its start and the rest
/// from its end.
pub const SHOWN: usize = 16 * 1024;
/// Bytes shown from the start of a stream that was cut.
pub const HEAD: usize = 4 * 1024;
/// Writes that may wait to go to the log file.
const QUEUE: usize = 8;

/// The log file being written in the sandbox.
#[derive(Debug)]
struct Spill {
    data: Option<mpsc::Sender<WriteFileRequest>>,
    done: JoinHandle<Result<(), ClientError>>,
}

/// What is kept of a stream to show: all of it while it is short, its
/// head and tail once it is past [`SHOWN`].
#[derive(Debug, Default)]
struct Kept {
    /// Everything while the stream is short; its first [`HEAD`] bytes
    /// once cut.
    kept: Vec<u8>,
    /// The last bytes, once cut.
    tail: Vec<u8>,
    total: u64,
    /// Past [`SHOWN`]: only the head and tail are kept.
    cut: bool,
}

impl Kept {
    /// Takes the next chunk; returns what the log file must get: nothing
    /// while the stream is short, everything so far when it passes the
    /// bound, then each chunk.
    fn take(&mut self, chunk: Bytes) -> Option<Bytes> {
        self.total += chunk.len() as u64;
        if self.cut {
            self.keep_tail(&chunk);
            return Some(chunk);
        }
        if self.kept.len() + chunk.len() <= SHOWN {
            self.kept.extend_from_slice(&chunk);
            return None;
        }
        self.cut = true;
        let mut so_far = std::mem::take(&mut self.kept);
        so_far.extend_from_slice(&chunk);
        let so_far = Bytes::from(so_far);
        self.kept = so_far[..HEAD].to_vec();
        self.keep_tail(&so_far[HEAD..]);
        Some(so_far)
    }

    fn keep_tail(&mut self, data: &[u8]) {
        let limit = SHOWN - HEAD;
        if data.len() >= limit {
            self.tail.clear();
            self.tail.extend_from_slice(&data[data.len() - limit..]);
        } else {
            self.tail.extend_from_slice(data);
            if self.tail.len() > limit {
                let excess = self.tail.len() - limit;
                self.tail.drain(..excess);
            }
        }
    }

    fn is_binary(&self) -> bool {
        text::looks_binary(&self.kept) || text::looks_binary(&self.tail)
    }

    /// What a model sees.
    fn shown(&self) -> Shown {
        if self.is_binary() {
            Shown::Binary {
                prefix: text::hex_prefix(&self.kept, 16),
            }
        } else if self.cut {
            Shown::Cut {
                head: text::head(&self.kept, HEAD),
                tail: text::tail(&self.tail, SHOWN - HEAD),
            }
        } else {
            Shown::Whole(String::from_utf8_lossy(&self.kept).into_owned())
        }
    }
}

/// One stream's bytes as they arrive.
#[derive(Debug)]
pub struct Capture {
    client: Client,
    sandbox_id: String,
    /// The log file, when the stream is cut or binary.
    log: String,
    kept: Kept,
    spill: Option<Spill>,
}

/// What was captured, to show.
#[derive(Debug)]
pub struct Captured {
    pub total: u64,
    pub shown: Shown,
    /// Where the whole stream is, when it was cut or binary; or why it
    /// could not be saved.
    pub log: Option<Result<String, String>>,
}

/// What a model sees of a stream.
#[derive(Debug)]
pub enum Shown {
    /// All of it.
    Whole(String),
    /// Its start and end; the bytes between are only in the log file.
    Cut { head: String, tail: String },
    /// Not text: not shown.
    Binary { prefix: String },
}

impl Capture {
    /// A capture whose whole stream goes, if it must, to `log` in the
    /// sandbox.
    pub fn new(client: Client, sandbox_id: &str, log: String) -> Capture {
        Capture {
            client,
            sandbox_id: sandbox_id.to_owned(),
            log,
            kept: Kept::default(),
            spill: None,
        }
    }

    /// Takes the next chunk.
    pub async fn push(&mut self, chunk: Bytes) {
        if let Some(data) = self.kept.take(chunk) {
            if self.spill.is_none() {
                self.spill = Some(self.open());
            }
            self.write(data).await;
        }
    }

    /// Starts writing the log file.
    fn open(&self) -> Spill {
        let (data, pending) = mpsc::channel(QUEUE);
        let header = WriteFileRequest {
            part: Some(write_file_request::Part::Header(WriteHeader {
                sandbox_id: self.sandbox_id.clone(),
                path: self.log.clone(),
                mode: 0o644,
                ..Default::default()
            })),
        };
        // The queue is empty: the header always fits.
        let _ = data.try_send(header);
        let mut files = self.client.files();
        let done = tokio::spawn(async move {
            files.write(ReceiverStream::new(pending)).await?;
            Ok(())
        });
        Spill {
            data: Some(data),
            done,
        }
    }

    /// Sends `chunk` to the log file; a file that cannot be written is
    /// given up on (the reason is kept for the answer).
    async fn write(&mut self, chunk: Bytes) {
        let Some(spill) = &mut self.spill else { return };
        let Some(data) = &spill.data else { return };
        for piece in chunk.chunks(MAX_CHUNK_BYTES) {
            let message = WriteFileRequest {
                part: Some(write_file_request::Part::Data(chunk.slice_ref(piece))),
            };
            if data.send(message).await.is_err() {
                // The call ended early: its result says why.
                spill.data = None;
                return;
            }
        }
    }

    /// Ends the stream: finishes the log file and says what to show.
    pub async fn finish(mut self) -> Captured {
        if self.kept.is_binary() && !self.kept.cut && !self.kept.kept.is_empty() {
            // Short but binary: it goes to the log file whole.
            self.spill = Some(self.open());
            let all = Bytes::from(self.kept.kept.clone());
            self.write(all).await;
        }
        let log = match self.spill.take() {
            Some(Spill { data, done }) => {
                drop(data);
                let result = match done.await {
                    Ok(result) => result.map_err(|e| e.to_string()),
                    Err(e) => Err(e.to_string()),
                };
                Some(result.map(|()| self.log.clone()))
            }
            None => None,
        };
        Captured {
            total: self.kept.total,
            shown: self.kept.shown(),
            log,
        }
    }
}

impl Captured {
    /// The stream as a section of a tool's answer, titled `name` (empty
    /// when there was no output).
    pub fn render(&self, name: &str) -> String {
        if self.total == 0 {
            return String::new();
        }
        let saved = match &self.log {
            Some(Ok(path)) => format!(
                "the whole {name} is in {path} in the sandbox: read_file it (offset and length \
                 page through it) or search it with run_command, e.g. grep -n PATTERN {path}"
            ),
            Some(Err(reason)) => format!("the whole {name} could not be saved: {reason}"),
            None => String::new(),
        };
        match &self.shown {
            Shown::Whole(text) => {
                let mut out = format!("--- {name} ---\n{text}");
                if !text.ends_with('\n') {
                    out.push('\n');
                }
                out
            }
            Shown::Cut { head, tail } => {
                let shown = (head.len() + tail.len()) as u64;
                let cut = self.total.saturating_sub(shown);
                let mut out = format!(
                    "--- {name}: {}, cut to its first {} and last {} ---\n{head}",
                    text::bytes(self.total),
                    text::count(head.len() as u64),
                    text::count(tail.len() as u64),
                );
                if !head.ends_with('\n') {
                    out.push('\n');
                }
                out.push_str(&format!(
                    "[... {} cut here; {saved}]\n{tail}",
                    text::bytes(cut)
                ));
                if !tail.ends_with('\n') {
                    out.push('\n');
                }
                out
            }
            Shown::Binary { prefix } => format!(
                "--- {name}: {} of binary data, not shown (starts {prefix}); {saved} ---\n",
                text::bytes(self.total)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream of `len` bytes of numbered lines.
    fn stream(len: usize) -> Vec<u8> {
        (0..)
            .flat_map(|n: u32| format!("line {n}\n").into_bytes())
            .take(len)
            .collect()
    }

    #[test]
    fn a_short_stream_is_kept_whole_and_logged_nowhere() {
        let mut kept = Kept::default();
        let data = stream(SHOWN);
        for chunk in data.chunks(1000) {
            assert_eq!(kept.take(Bytes::copy_from_slice(chunk)), None);
        }
        match kept.shown() {
            Shown::Whole(text) => assert_eq!(text.as_bytes(), &data[..]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_long_stream_shows_its_head_and_tail_and_logs_every_byte() {
        let mut kept = Kept::default();
        let data = stream(200_000);
        let mut logged = Vec::new();
        for chunk in data.chunks(7000) {
            if let Some(out) = kept.take(Bytes::copy_from_slice(chunk)) {
                logged.extend_from_slice(&out);
            }
        }
        assert_eq!(logged, data, "the log file gets the whole stream, in order");
        assert_eq!(kept.total, 200_000);
        let Shown::Cut { head, tail } = kept.shown() else {
            panic!("not cut")
        };
        assert_eq!(head.as_bytes(), &data[..HEAD]);
        assert_eq!(tail.as_bytes(), &data[data.len() - (SHOWN - HEAD)..]);
        let captured = Captured {
            total: kept.total,
            shown: kept.shown(),
            log: Some(Ok("/var/log/airlock-mcp/x-1.stdout".into())),
        };
        let text = captured.render("stdout");
        assert!(text.len() < SHOWN + 1000, "{} bytes shown", text.len());
        assert!(
            text.contains("183,616 bytes (179.3 KiB) cut here"),
            "{text}"
        );
        assert!(text.contains("read_file it"), "{text}");
        assert!(text.contains("/var/log/airlock-mcp/x-1.stdout"), "{text}");
    }

    #[test]
    fn binary_is_described_not_shown() {
        let mut kept = Kept::default();
        assert_eq!(
            kept.take(Bytes::from_static(b"\x7fELF\x02\x01\x00\x00")),
            None
        );
        let captured = Captured {
            total: kept.total,
            shown: kept.shown(),
            log: Some(Ok("/var/log/airlock-mcp/x-2.stdout".into())),
        };
        let text = captured.render("stdout");
        assert!(
            text.contains("8 bytes of binary data, not shown (starts 7f 45 4c 46"),
            "{text}"
        );
        assert!(!text.contains("ELF"), "{text}");
    }

    #[test]
    fn nothing_is_no_section() {
        let captured = Captured {
            total: 0,
            shown: Shown::Whole(String::new()),
            log: None,
        };
        assert_eq!(captured.render("stderr"), "");
    }
}
