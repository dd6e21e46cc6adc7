//! What the fuzz targets share: how an input is cut into reads, the
//! secrets the HTTP targets use (placeholders are random per process, so
//! inputs name them by token), the layouts of the structured inputs (which
//! `examples/seeds.rs` also writes), and a runtime for async code.
//!
//! Targets (`fuzz_targets/`), one per surface a guest or a file on disk
//! reaches; `docs/threat-model.md` lists them beside what they cover.

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};

use airlock_gateway::secrets::{Secret, Secrets};
use tokio::io::{AsyncRead, ReadBuf};

/// A reader of an input's bytes, front to back.
#[derive(Debug)]
pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Input { data }
    }

    pub fn u8(&mut self) -> u8 {
        let (first, rest) = self
            .data
            .split_first()
            .map_or((0, &[][..]), |(b, r)| (*b, r));
        self.data = rest;
        first
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    /// At most `len` bytes (fewer at the end).
    pub fn bytes(&mut self, len: usize) -> &'a [u8] {
        let (taken, rest) = self.data.split_at(len.min(self.data.len()));
        self.data = rest;
        taken
    }

    /// A u16-length-prefixed field.
    pub fn field(&mut self) -> &'a [u8] {
        let len = self.u16() as usize;
        self.bytes(len)
    }

    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

/// Appends a u16-length-prefixed field (the inverse of [`Input::field`]).
pub fn put_field(out: &mut Vec<u8>, field: &[u8]) {
    let len = u16::try_from(field.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&field[..len as usize]);
}

/// `data` cut into reads whose sizes follow from `seed` (1 to 64 bytes,
/// or whole when `seed` is 0), so that every way a peer's bytes can arrive
/// split is tried.
pub fn chunks(seed: u8, data: &[u8]) -> Vec<&[u8]> {
    if seed == 0 {
        return vec![data];
    }
    let mut state = u32::from(seed) | 0x100;
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let size = (state % 64 + 1) as usize;
        let (chunk, tail) = rest.split_at(size.min(rest.len()));
        out.push(chunk);
        rest = tail;
    }
    out
}

/// An `AsyncRead` that hands out its chunks one read at a time, then the
/// end of the stream.
#[derive(Debug)]
pub struct ChunkedReader {
    chunks: std::collections::VecDeque<Vec<u8>>,
}

impl ChunkedReader {
    pub fn new(chunks: &[&[u8]]) -> Self {
        ChunkedReader {
            chunks: chunks.iter().map(|c| c.to_vec()).collect(),
        }
    }
}

impl AsyncRead for ChunkedReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(mut chunk) = self.chunks.pop_front() {
            let n = chunk.len().min(buf.remaining());
            buf.put_slice(&chunk[..n]);
            if n < chunk.len() {
                chunk.drain(..n);
                self.chunks.push_front(chunk);
            }
        }
        Poll::Ready(Ok(()))
    }
}

thread_local! {
    static RUNTIME: RefCell<Option<tokio::runtime::Runtime>> = const { RefCell::new(None) };
}

/// Runs `future` on this thread's runtime (one per process, kept across
/// inputs, so a server a target spawns on it keeps running).
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    RUNTIME.with(|cell| {
        let mut slot = cell.borrow_mut();
        let runtime = slot.get_or_insert_with(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap_or_else(|e| panic!("cannot build a tokio runtime: {e}"))
        });
        runtime.block_on(future)
    })
}

/// One secret of the HTTP targets: its name (also its token, `{NAME}`),
/// the host pattern it is bound to and its value.
#[derive(Debug, Clone, Copy)]
pub struct FixtureSecret {
    pub name: &'static str,
    pub host: &'static str,
    pub value: &'static str,
}

/// The secrets of the HTTP targets, as the unit tests bind theirs: two to
/// `api.test` (one value with a space, which a target may not hold), one
/// to `else.test`, one to every name under `wild.test`.
pub const SECRETS: [FixtureSecret; 4] = [
    FixtureSecret {
        name: "API",
        host: "api.test",
        value: "real value",
    },
    FixtureSecret {
        name: "KEY",
        host: "api.test",
        value: "k3y-VALUE-7c1e",
    },
    FixtureSecret {
        name: "ELSE",
        host: "else.test",
        value: "else-VALUE-19ad",
    },
    FixtureSecret {
        name: "WILD",
        host: "*.wild.test",
        value: "wild-VALUE-5b02",
    },
];

/// The hosts the HTTP targets serve connections for.
pub const HOSTS: [&str; 4] = ["api.test", "else.test", "a.wild.test", "none.test"];

/// The fixture's [`Secrets`], made once per process.
pub fn secrets() -> &'static Secrets {
    static SET: OnceLock<Secrets> = OnceLock::new();
    SET.get_or_init(|| {
        let list = SECRETS
            .iter()
            .map(|s| {
                Secret::new(s.name, s.value)
                    .map(|secret| secret.host(s.host))
                    .unwrap_or_else(|e| panic!("fixture secret {}: {e}", s.name))
            })
            .collect();
        Secrets::new(list).unwrap_or_else(|e| panic!("fixture secrets: {e}"))
    })
}

/// The placeholder of the fixture secret `name`.
pub fn placeholder(name: &str) -> String {
    secrets()
        .placeholders()
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, p)| p)
        .unwrap_or_else(|| panic!("no fixture secret {name}"))
}

/// Whether the fixture secret `name` is bound to `host`.
pub fn bound(secret: &FixtureSecret, host: &str) -> bool {
    match secret.host.strip_prefix("*.") {
        Some(suffix) => host
            .strip_suffix(suffix)
            .is_some_and(|front| front.len() > 1 && front.ends_with('.')),
        None => host == secret.host,
    }
}

/// `data` with every `{NAME}` token replaced by that secret's placeholder.
pub fn with_placeholders(data: &[u8]) -> Vec<u8> {
    let mut out = data.to_vec();
    for secret in SECRETS {
        let token = format!("{{{}}}", secret.name);
        out = replace(&out, token.as_bytes(), placeholder(secret.name).as_bytes());
    }
    out
}

/// `haystack` with every `from` replaced by `to`.
pub fn replace(haystack: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(haystack.len());
    let mut rest = haystack;
    while let Some(at) = find(rest, from) {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(to);
        rest = &rest[at + from.len()..];
    }
    out.extend_from_slice(rest);
    out
}

/// Where `needle` first occurs in `haystack`.
pub fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// How often `needle` occurs in `haystack` (overlaps counted).
pub fn count(haystack: &[u8], needle: &[u8]) -> usize {
    if needle.is_empty() || haystack.len() < needle.len() {
        return 0;
    }
    haystack
        .windows(needle.len())
        .filter(|w| *w == needle)
        .count()
}

/// The host a `Host` header names, as a server reads it: the text before a
/// port of digits (the whole text otherwise), without IPv6 brackets or a
/// trailing dot, lowercase.
pub fn host_of_header(value: &str) -> String {
    let host = match value.rsplit_once(':') {
        Some((host, port)) if !value.ends_with(']') && port.bytes().all(|b| b.is_ascii_digit()) => {
            host
        }
        _ => value,
    };
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase()
}

/// Whether `haystack` holds a placeholder of any fixture secret.
pub fn holds_placeholder(haystack: &[u8]) -> Option<&'static str> {
    SECRETS
        .iter()
        .find(|s| find(haystack, placeholder(s.name).as_bytes()).is_some())
        .map(|s| s.name)
}

/// Makes every tar header in `data` carry a correct checksum (a mutated
/// header would otherwise be refused before anything else is looked at):
/// walks the stream as tar readers do, header, then the data's blocks.
pub fn fix_tar_checksums(data: &mut [u8]) {
    let mut at = 0usize;
    while at + 512 <= data.len() {
        let header = &mut data[at..at + 512];
        if header.iter().all(|b| *b == 0) {
            at += 512;
            continue;
        }
        header[148..156].fill(b' ');
        let sum: u32 = header.iter().map(|b| u32::from(*b)).sum();
        let field = format!("{sum:06o}\0 ");
        header[148..156].copy_from_slice(field.as_bytes());
        let size = octal(&header[124..136]).unwrap_or(0);
        let blocks = size.div_ceil(512).min(data.len() as u64 / 512 + 1);
        at += 512 + blocks as usize * 512;
    }
}

/// An octal tar number field (NUL or space terminated), if it is one.
fn octal(field: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(field).ok()?;
    let text = text.trim_matches(|c| c == ' ' || c == '\0');
    u64::from_str_radix(text, 8).ok()
}

/// The layout of the `template_store` target's input:
/// `[memory file size in 4 KiB pages: u16][state: field][meta.json: rest]`,
/// where `@KEY@` in the JSON becomes the template's key and `@SHA@` the
/// state's sha256 (which no mutation could guess).
pub mod create_context;

pub mod template_input {
    pub const KEY: &str = "tmpl-fuzz";

    pub fn encode(pages: u16, state: &[u8], meta_json: &[u8]) -> Vec<u8> {
        let mut out = pages.to_le_bytes().to_vec();
        super::put_field(&mut out, state);
        out.extend_from_slice(meta_json);
        out
    }
}

/// The layout of the `saved_file` target's input: `[record.json: field]`,
/// then up to four snapshots, each `[generation: u8][how: u8][header JSON:
/// field][stream length: u16]`. `@ID@` in the JSON becomes the sandbox's
/// id. `how` says how the file is made: 0 as a save writes it, 1 the same
/// with one byte (at the next u16, mod length) flipped, 2 the JSON as the
/// whole file, 3 as 0 but cut short by the next u16 bytes.
pub mod saved_input {
    pub const ID: &str = "sandbox-fuzz";
    pub const QEMU: &str = "7.2.22";

    #[derive(Debug, Clone)]
    pub struct Snapshot {
        pub generation: u8,
        pub how: u8,
        pub header_json: Vec<u8>,
        pub stream_len: u16,
        pub extra: u16,
    }

    pub fn encode(record_json: &[u8], snapshots: &[Snapshot]) -> Vec<u8> {
        let mut out = Vec::new();
        super::put_field(&mut out, record_json);
        for s in snapshots {
            out.push(s.generation);
            out.push(s.how);
            super::put_field(&mut out, &s.header_json);
            out.extend_from_slice(&s.stream_len.to_le_bytes());
            if matches!(s.how, 1 | 3) {
                out.extend_from_slice(&s.extra.to_le_bytes());
            }
        }
        out
    }
}
