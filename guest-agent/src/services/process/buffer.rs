//! A program's output log: the newest chunks read from its pipes, each at
//! its offset in the program's output (stdout and stderr bytes together,
//! numbered from 0 in the order read).
//!
//! The log holds what a client may still want: output an attached client
//! has not received yet, and a replay tail for whoever attaches next
//! (including a client whose connection broke while data was in flight).
//! Two limits bound it:
//!
//! - [`ATTACHED_LIMIT`]: how far the reader may run ahead of an attached
//!   client before it waits (the caller enforces this; see `entry`). This
//!   is what turns a slow client into pipe backpressure on the program.
//! - [`REPLAY_LIMIT`]: the most the log holds. [`OutputLog::push`] drops
//!   the oldest bytes beyond it, but never bytes at or after `keep_from`
//!   (an attached client's position), so nothing is lost for a client that
//!   is attached.

use std::collections::VecDeque;

use bytes::Bytes;

/// How far output may run ahead of an attached client.
pub const ATTACHED_LIMIT: usize = 256 * 1024;

/// The most output held per program for replay.
pub const REPLAY_LIMIT: usize = 1024 * 1024;

/// Which pipe a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// A piece of output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Where it came from.
    pub stream: Stream,
    /// The bytes.
    pub data: Bytes,
}

/// The newest output of one program, by offset.
#[derive(Debug, Default)]
pub struct OutputLog {
    /// Chunks with the offset of their first byte, oldest first, contiguous.
    chunks: VecDeque<(u64, Chunk)>,
    /// Offset of the oldest byte held.
    start: u64,
    /// Offset after the newest byte: all output read so far.
    end: u64,
}

impl OutputLog {
    /// Offset of the oldest byte held.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Offset after the newest byte (bytes read so far).
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Bytes held.
    pub fn held(&self) -> usize {
        usize::try_from(self.end - self.start).unwrap_or(usize::MAX)
    }

    /// Appends a chunk, then drops the oldest bytes beyond [`REPLAY_LIMIT`]
    /// that lie before `keep_from`.
    pub fn push(&mut self, chunk: Chunk, keep_from: Option<u64>) {
        if chunk.data.is_empty() {
            return;
        }
        let len = chunk.data.len() as u64;
        self.chunks.push_back((self.end, chunk));
        self.end += len;
        self.trim(REPLAY_LIMIT, keep_from);
    }

    /// Drops the oldest bytes until at most `limit` are held, stopping at
    /// `keep_from`.
    pub fn trim(&mut self, limit: usize, keep_from: Option<u64>) {
        let floor = keep_from.unwrap_or(self.end).min(self.end);
        let target = self.end.saturating_sub(limit as u64).min(floor);
        while self.start < target {
            let Some((offset, front)) = self.chunks.front_mut() else {
                break;
            };
            let cut = usize::try_from(target - *offset)
                .unwrap_or(usize::MAX)
                .min(front.data.len());
            if cut == front.data.len() {
                self.chunks.pop_front();
            } else {
                front.data = front.data.slice(cut..);
                *offset += cut as u64;
            }
            self.start += cut as u64;
        }
    }

    /// The output from `offset` to the end of the chunk holding it, or
    /// `None` when `offset` is not held (before the start, or at the end).
    pub fn read_at(&self, offset: u64) -> Option<(u64, Chunk)> {
        if offset < self.start || offset >= self.end {
            return None;
        }
        let i = self
            .chunks
            .partition_point(|(o, c)| o + c.data.len() as u64 <= offset);
        let (o, chunk) = self.chunks.get(i)?;
        let skip = usize::try_from(offset - o).ok()?;
        Some((
            offset,
            Chunk {
                stream: chunk.stream,
                data: chunk.data.slice(skip..),
            },
        ))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn out(data: &[u8]) -> Chunk {
        Chunk {
            stream: Stream::Stdout,
            data: Bytes::copy_from_slice(data),
        }
    }

    /// Everything from `offset` on, as one byte string.
    fn read_from(log: &OutputLog, mut offset: u64) -> Vec<u8> {
        let mut all = Vec::new();
        while let Some((at, chunk)) = log.read_at(offset) {
            assert_eq!(at, offset);
            all.extend_from_slice(&chunk.data);
            offset += chunk.data.len() as u64;
        }
        all
    }

    #[test]
    fn chunks_are_numbered_in_order_with_their_stream() {
        let mut log = OutputLog::default();
        log.push(out(b"ab"), None);
        log.push(
            Chunk {
                stream: Stream::Stderr,
                data: Bytes::from_static(b"c"),
            },
            None,
        );
        log.push(out(b""), None);
        assert_eq!((log.start(), log.end(), log.held()), (0, 3, 3));
        assert_eq!(log.read_at(0).unwrap(), (0, out(b"ab")));
        assert_eq!(log.read_at(1).unwrap(), (1, out(b"b")), "mid-chunk");
        assert_eq!(log.read_at(2).unwrap().1.stream, Stream::Stderr);
        assert!(log.read_at(3).is_none());
        assert_eq!(read_from(&log, 0), b"abc");
    }

    #[test]
    fn the_newest_bytes_are_kept_and_offsets_stay_true() {
        let mut log = OutputLog::default();
        let mut written = Vec::new();
        for i in 0..200_000u32 {
            let line = format!("line {i:06}\n");
            written.extend_from_slice(line.as_bytes());
            log.push(out(line.as_bytes()), None);
        }
        assert_eq!(log.end(), written.len() as u64);
        assert_eq!(log.held(), REPLAY_LIMIT);
        assert_eq!(log.start(), (written.len() - REPLAY_LIMIT) as u64);
        assert!(log.read_at(log.start() - 1).is_none());
        assert_eq!(
            read_from(&log, log.start()),
            &written[written.len() - REPLAY_LIMIT..]
        );
        let mid = log.start() + 12_345;
        assert_eq!(read_from(&log, mid), &written[mid as usize..]);
    }

    #[test]
    fn bytes_after_keep_from_are_never_dropped() {
        let mut log = OutputLog::default();
        let big = vec![1u8; REPLAY_LIMIT];
        log.push(out(&big), Some(0));
        log.push(out(b"more"), Some(0));
        assert_eq!(log.start(), 0, "an attached client at 0 keeps all");
        log.push(out(b"x"), Some(3));
        assert_eq!(log.start(), 3);
        log.trim(0, None);
        assert_eq!((log.start(), log.held()), (log.end(), 0));
    }
}
