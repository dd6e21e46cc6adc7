//! The opening of every connection on the agent's virtio-serial port.
//!
//! A virtio-serial port is one byte pipe that outlives its connections: the
//! host connects to QEMU's socket, disconnects, and connects again (after a
//! restore, say), while the guest holds the same port open throughout. The
//! guest learns of a disconnection only when it next reads, so bytes of an
//! old connection can meet bytes of the next one, and a snapshot can catch
//! the guest between the two. Each connection therefore opens with a short
//! exchange that both sides find in whatever surrounds it:
//!
//! 1. The host writes a flush, [`FLUSH_LEN`] bytes of [`FLUSH_BYTE`], then
//!    `airlock-hello <nonce>\n` (a nonce fresh for each connection), and
//!    writes the hello again every [`HELLO_INTERVAL`] until it is answered:
//!    a hello that an old connection swallowed is simply repeated.
//!
//!    The flush is for an old connection that the guest still serves. After
//!    a restore, the guest can miss that its host left (the port's close and
//!    the next host's open both arrive before it looks), and a snapshot can
//!    catch that connection in the middle of a frame of up to
//!    [`AGENT_MAX_FRAME_BYTES`]. The flush completes that frame, and its
//!    next bytes read as a frame header whose length no frame may have: the
//!    old connection fails at once and hands the port to the opening,
//!    instead of taking hello after hello as the payload of its frame.
//! 2. The guest skips everything up to the first complete hello, answers
//!    `airlock-ready <nonce>\n` once, drops repeats of that same hello that
//!    arrive next, and serves HTTP/2 from the first byte that is not one.
//! 3. The host skips everything up to the answer carrying its nonce (at most
//!    [`MAX_SKIPPED`] bytes) and speaks HTTP/2 from the byte after it.
//!
//! The HTTP/2 client preface starts with `PRI`, so it can never be taken for
//! a repeated hello. [`GuestOpening`] and [`HostOpening`] are the two sides
//! without I/O: each side feeds them what it reads and writes what they say.

use std::fmt;
use std::time::Duration;

/// The largest HTTP/2 frame the agent accepts (its
/// `SETTINGS_MAX_FRAME_SIZE`, which it sets explicitly): the most that an
/// old connection can still be waiting for at a restore.
pub const AGENT_MAX_FRAME_BYTES: u32 = 16 << 10;
/// The length of an HTTP/2 frame header.
const FRAME_HEADER_LEN: usize = 9;
/// What the host's flush is made of. Read as the start of an HTTP/2 frame
/// header, it gives a length past [`AGENT_MAX_FRAME_BYTES`]; it is no part
/// of a hello, and the HTTP/2 preface does not start with it.
pub const FLUSH_BYTE: u8 = 0xff;
/// How many bytes the host's flush has: enough to finish the rest of a
/// half-read frame (its header and its payload) and then to make a whole
/// frame header of flush bytes.
pub const FLUSH_LEN: usize = AGENT_MAX_FRAME_BYTES as usize + 2 * FRAME_HEADER_LEN;
/// What starts the host's line.
pub const HELLO: &[u8] = b"airlock-hello ";
/// What starts the guest's answer.
pub const READY: &[u8] = b"airlock-ready ";
/// Hex digits in a nonce.
pub const NONCE_LEN: usize = 16;
/// How often the host repeats an unanswered hello.
pub const HELLO_INTERVAL: Duration = Duration::from_millis(20);
/// How many bytes the host skips looking for its answer before it gives up
/// on the connection (output of an old connection, at most).
pub const MAX_SKIPPED: usize = 4 << 20;
/// The longest line of the opening.
const LINE_LEN: usize = HELLO.len() + NONCE_LEN + 1;
/// How much unmatched input the guest keeps while it looks for a hello.
const GUEST_WINDOW: usize = 4096;

/// One connection's nonce: 16 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Nonce([u8; NONCE_LEN]);

impl Nonce {
    /// The nonce spelling `value` in hex.
    pub fn new(value: u64) -> Self {
        let mut digits = [0u8; NONCE_LEN];
        for (index, digit) in digits.iter_mut().enumerate() {
            let shift = 4 * (NONCE_LEN - 1 - index);
            let nibble = ((value >> shift) & 0xf) as u8;
            *digit = match nibble {
                0..=9 => b'0' + nibble,
                _ => b'a' + nibble - 10,
            };
        }
        Nonce(digits)
    }

    fn parse(bytes: &[u8]) -> Option<Self> {
        let digits: [u8; NONCE_LEN] = bytes.try_into().ok()?;
        digits
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
            .then_some(Nonce(digits))
    }

    /// The host's line for this nonce.
    pub fn hello(&self) -> Vec<u8> {
        self.line(HELLO)
    }

    /// The guest's answer for this nonce.
    pub fn ready(&self) -> Vec<u8> {
        self.line(READY)
    }

    fn line(&self, prefix: &[u8]) -> Vec<u8> {
        let mut line = Vec::with_capacity(LINE_LEN);
        line.extend_from_slice(prefix);
        line.extend_from_slice(&self.0);
        line.push(b'\n');
        line
    }
}

impl fmt::Debug for Nonce {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Nonce({})", String::from_utf8_lossy(&self.0))
    }
}

/// Every complete `prefix <nonce>\n` in `buf`, with the offset just past it.
fn lines<'a>(buf: &'a [u8], prefix: &'a [u8]) -> impl Iterator<Item = (Nonce, usize)> + 'a {
    (0..buf.len().saturating_sub(LINE_LEN - 1)).filter_map(move |start| {
        let line = &buf[start..start + LINE_LEN];
        (line.starts_with(prefix) && line[LINE_LEN - 1] == b'\n')
            .then(|| Nonce::parse(&line[prefix.len()..LINE_LEN - 1]))
            .flatten()
            .map(|nonce| (nonce, start + LINE_LEN))
    })
}

/// What the guest does next.
#[derive(Debug, PartialEq, Eq)]
pub enum GuestStep {
    /// Read more and feed it.
    Read,
    /// Write this answer, then feed an empty slice to go on.
    Answer(Vec<u8>),
    /// The opening is over: serve HTTP/2, starting with these bytes.
    Open(Vec<u8>),
}

/// The guest's side of the opening.
#[derive(Debug, Default)]
pub struct GuestOpening {
    buf: Vec<u8>,
    answered: Option<Nonce>,
}

impl GuestOpening {
    /// A guest waiting for a hello.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes what was read and says what to do.
    pub fn feed(&mut self, bytes: &[u8]) -> GuestStep {
        self.buf.extend_from_slice(bytes);
        let Some(nonce) = self.answered else {
            let found = lines(&self.buf, HELLO).next();
            if let Some((nonce, end)) = found {
                self.buf.drain(..end);
                self.answered = Some(nonce);
                return GuestStep::Answer(nonce.ready());
            }
            if self.buf.len() > GUEST_WINDOW {
                // Keep a tail long enough to hold a hello's beginning.
                self.buf.drain(..self.buf.len() - LINE_LEN);
            }
            return GuestStep::Read;
        };
        let hello = nonce.hello();
        loop {
            if self.buf.starts_with(&hello) {
                self.buf.drain(..hello.len());
            } else if hello.starts_with(&self.buf) {
                // Empty, or the beginning of another repeat: wait for more.
                return GuestStep::Read;
            } else {
                return GuestStep::Open(std::mem::take(&mut self.buf));
            }
        }
    }
}

/// The host skipped [`MAX_SKIPPED`] bytes without finding its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoAnswer {
    /// How many bytes were skipped.
    pub skipped: usize,
}

impl fmt::Display for NoAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the agent did not answer the opening within {} bytes of other output",
            self.skipped
        )
    }
}

impl std::error::Error for NoAnswer {}

/// The host's side of the opening.
#[derive(Debug)]
pub struct HostOpening {
    nonce: Nonce,
    buf: Vec<u8>,
    skipped: usize,
}

impl HostOpening {
    /// A connection opening with `nonce`.
    pub fn new(nonce: Nonce) -> Self {
        HostOpening {
            nonce,
            buf: Vec::new(),
            skipped: 0,
        }
    }

    /// What to write once, before the first hello: the flush.
    pub fn flush(&self) -> Vec<u8> {
        vec![FLUSH_BYTE; FLUSH_LEN]
    }

    /// The line to write after the flush and every [`HELLO_INTERVAL`]
    /// until answered.
    pub fn hello(&self) -> Vec<u8> {
        self.nonce.hello()
    }

    /// Takes what was read: `Some(rest)` once answered, where `rest` is the
    /// start of the guest's HTTP/2 stream.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Option<Vec<u8>>, NoAnswer> {
        self.buf.extend_from_slice(bytes);
        let answer = lines(&self.buf, READY).find(|(nonce, _)| *nonce == self.nonce);
        if let Some((_, end)) = answer {
            return Ok(Some(self.buf.split_off(end)));
        }
        if self.buf.len() > LINE_LEN {
            let drop = self.buf.len() - LINE_LEN;
            self.buf.drain(..drop);
            self.skipped += drop;
        }
        if self.skipped > MAX_SKIPPED {
            return Err(NoAnswer {
                skipped: self.skipped,
            });
        }
        Ok(None)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

    #[test]
    fn nonces_are_hex() {
        assert_eq!(
            Nonce::new(0xab).hello(),
            b"airlock-hello 00000000000000ab\n"
        );
        assert_eq!(
            Nonce::new(u64::MAX).ready(),
            b"airlock-ready ffffffffffffffff\n"
        );
    }

    #[test]
    fn the_guest_finds_a_hello_after_junk_and_drops_its_repeats() {
        let nonce = Nonce::new(7);
        let mut guest = GuestOpening::new();
        let mut input = b"\0\x01stale http/2 bytes".to_vec();
        input.extend(nonce.hello());
        input.extend(nonce.hello());
        input.extend(PREFACE);
        assert_eq!(guest.feed(&input), GuestStep::Answer(nonce.ready()));
        assert_eq!(guest.feed(&[]), GuestStep::Open(PREFACE.to_vec()));
    }

    #[test]
    fn the_guest_skips_the_flush() {
        let nonce = Nonce::new(7);
        let host = HostOpening::new(nonce);
        let mut guest = GuestOpening::new();
        let mut input = host.flush();
        input.extend(host.hello());
        input.extend(PREFACE);
        assert_eq!(guest.feed(&input), GuestStep::Answer(nonce.ready()));
        assert_eq!(guest.feed(&[]), GuestStep::Open(PREFACE.to_vec()));
    }

    #[test]
    fn after_any_half_read_frame_the_flush_makes_a_header_no_frame_may_have() {
        let flush = HostOpening::new(Nonce::new(1)).flush();
        let max = AGENT_MAX_FRAME_BYTES as usize;
        // The largest frame the agent allows, of which an old connection
        // has read `read` bytes before the flush comes.
        let mut frame = vec![0u8; FRAME_HEADER_LEN + max];
        frame[..3].copy_from_slice(&(max as u32).to_be_bytes()[1..]);
        for read in [0, 1, 2, 3, 8, 9, 10, 1000, frame.len() - 1] {
            let mut stream = frame[..read].to_vec();
            stream.extend(&flush);
            // The frames that connection reads, until one is too long.
            let mut at = 0;
            let too_long = loop {
                let Some(header) = stream.get(at..at + FRAME_HEADER_LEN) else {
                    break false;
                };
                let length = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
                if length > max {
                    break true;
                }
                at += FRAME_HEADER_LEN + length;
            };
            assert!(too_long, "after {read} bytes of a frame");
        }
    }

    #[test]
    fn the_guest_waits_on_a_partial_repeat() {
        let nonce = Nonce::new(7);
        let mut guest = GuestOpening::new();
        assert_eq!(guest.feed(&nonce.hello()), GuestStep::Answer(nonce.ready()));
        assert_eq!(guest.feed(&[]), GuestStep::Read);
        assert_eq!(guest.feed(&nonce.hello()[..5]), GuestStep::Read);
        assert_eq!(guest.feed(&nonce.hello()[5..]), GuestStep::Read);
        assert_eq!(guest.feed(b"P"), GuestStep::Open(b"P".to_vec()));
    }

    #[test]
    fn the_guest_finds_a_hello_split_across_reads_and_bounds_its_buffer() {
        let nonce = Nonce::new(9);
        let mut guest = GuestOpening::new();
        assert_eq!(guest.feed(&vec![b'x'; 100_000]), GuestStep::Read);
        assert!(guest.buf.len() <= GUEST_WINDOW);
        let hello = nonce.hello();
        for byte in &hello[..hello.len() - 1] {
            assert_eq!(guest.feed(&[*byte]), GuestStep::Read);
        }
        assert_eq!(guest.feed(b"\n"), GuestStep::Answer(nonce.ready()));
    }

    #[test]
    fn a_malformed_hello_is_junk() {
        let mut guest = GuestOpening::new();
        assert_eq!(
            guest.feed(b"airlock-hello 00000000000000XY\n"),
            GuestStep::Read
        );
        assert_eq!(
            guest.feed(b"airlock-hello 0000000000000001"),
            GuestStep::Read
        );
        assert_eq!(guest.feed(b"0\n"), GuestStep::Read);
    }

    #[test]
    fn the_host_takes_only_its_own_answer() {
        let mut host = HostOpening::new(Nonce::new(2));
        let mut input = b"junk".to_vec();
        input.extend(Nonce::new(1).ready());
        assert_eq!(host.feed(&input).unwrap(), None);
        let mut input = Nonce::new(2).ready();
        input.extend(b"\0\0\x06settings");
        assert_eq!(host.feed(&input[..10]).unwrap(), None);
        assert_eq!(
            host.feed(&input[10..]).unwrap(),
            Some(b"\0\0\x06settings".to_vec())
        );
    }

    #[test]
    fn the_host_gives_up_after_too_much_junk() {
        let mut host = HostOpening::new(Nonce::new(2));
        let chunk = vec![0u8; 1 << 20];
        let mut result = Ok(None);
        for _ in 0..5 {
            result = host.feed(&chunk);
            if result.is_err() {
                break;
            }
        }
        assert!(result.is_err());
        assert!(host.buf.len() <= LINE_LEN);
    }

    #[test]
    fn both_sides_together() {
        let nonce = Nonce::new(0x1234);
        let mut host = HostOpening::new(nonce);
        let mut guest = GuestOpening::new();
        let mut to_guest = host.hello();
        to_guest.extend(host.hello());
        let GuestStep::Answer(answer) = guest.feed(&to_guest) else {
            panic!("no answer")
        };
        let rest = host.feed(&answer).unwrap().unwrap();
        assert!(rest.is_empty());
        assert_eq!(guest.feed(PREFACE), GuestStep::Open(PREFACE.to_vec()));
    }
}
