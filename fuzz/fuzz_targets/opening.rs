//! The serial channel's opening (`airlock_proto::opening`): what the host
//! reads from the guest until its answer, what the guest reads from the
//! host, and the flush that ends a half-read frame of an old connection.
//!
//! Input: `[mode: u8][chunking seed: u8][bytes]`. An even mode is the
//! host's side, an odd one the guest's; mode 0xF_ checks the flush against
//! a half-read frame described by the bytes. (The host's 4 MiB skip limit
//! is checked as an invariant but not reached: 4 MiB per input would take
//! the fuzzer to a few inputs a second; a unit test reaches it.)
#![no_main]

use airlock_fuzz::{chunks, find, Input};
use airlock_proto::opening::{
    GuestOpening, GuestStep, HostOpening, Nonce, AGENT_MAX_FRAME_BYTES, FLUSH_LEN, MAX_SKIPPED,
};
use libfuzzer_sys::fuzz_target;

/// The nonce of every run (seeds carry its lines).
const NONCE: u64 = 0x0123_4567_89ab_cdef;
const FRAME_HEADER_LEN: usize = 9;

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let mode = input.u8();
    let seed = input.u8();
    let bytes = input.rest();
    if mode & 0xf0 == 0xf0 {
        flush_ends_any_half_read_frame(bytes);
    } else if mode & 1 == 0 {
        host(seed, bytes);
    } else {
        guest(seed, bytes);
    }
});

/// The host takes the stream after its own answer, exactly, and gives up
/// only past its skip limit.
fn host(seed: u8, bytes: &[u8]) {
    let nonce = Nonce::new(NONCE);
    let answer = nonce.ready();
    let mut opening = HostOpening::new(nonce);
    let mut seen: Vec<u8> = Vec::new();
    let reads = chunks(seed, bytes);
    for read in reads {
        // Where the answer could end within this read.
        let from = seen.len().saturating_sub(answer.len() - 1);
        seen.extend_from_slice(read);
        let found = find(&seen[from..], &answer).map(|at| from + at);
        match opening.feed(read) {
            Ok(Some(rest)) => {
                let at = found.expect("answered without the answer line in the input");
                assert_eq!(
                    rest,
                    &seen[at + answer.len()..],
                    "the stream after the answer"
                );
                return;
            }
            Ok(None) => {
                assert!(found.is_none(), "an answer was missed");
                assert!(
                    seen.len() <= MAX_SKIPPED + answer.len(),
                    "skipped {} bytes without giving up",
                    seen.len()
                );
            }
            Err(no_answer) => {
                assert!(found.is_none(), "gave up on a present answer");
                assert!(no_answer.skipped > MAX_SKIPPED);
                assert!(
                    seen.len() > MAX_SKIPPED,
                    "gave up after {} bytes",
                    seen.len()
                );
                return;
            }
        }
    }
}

/// The guest answers the first complete hello, once, drops repeats of it
/// and opens with exactly what follows.
fn guest(seed: u8, bytes: &[u8]) {
    let mut opening = GuestOpening::new();
    let first = first_hello(bytes);
    let mut fed = 0usize;
    let mut answered = false;
    for read in chunks(seed, bytes) {
        fed += read.len();
        let mut step = opening.feed(read);
        if let GuestStep::Answer(answer) = &step {
            let (nonce, end) = first.expect("answered without a hello");
            assert!(!answered, "answered twice");
            assert!(
                end <= fed && end > fed - read.len(),
                "answered at the wrong read"
            );
            assert_eq!(*answer, nonce.ready());
            answered = true;
            step = opening.feed(&[]);
        }
        match step {
            GuestStep::Answer(_) => panic!("a second answer without input"),
            GuestStep::Read => {
                if let (true, Some((nonce, end))) = (answered, first) {
                    let after = &bytes[end..fed];
                    assert!(
                        only_repeats(after, &nonce.hello()),
                        "waiting on bytes that are no repeat"
                    );
                } else {
                    assert!(first.is_none_or(|(_, end)| end > fed), "a hello was missed");
                }
            }
            GuestStep::Open(rest) => {
                let (nonce, end) = first.expect("opened without a hello");
                let hello = nonce.hello();
                let mut expected = &bytes[end..fed];
                while expected.starts_with(&hello) {
                    expected = &expected[hello.len()..];
                }
                assert_eq!(rest, expected, "the stream after the hello");
                return;
            }
        }
    }
}

/// The first complete `airlock-hello <16 lowercase hex>\n` and the offset
/// past it.
fn first_hello(bytes: &[u8]) -> Option<(Nonce, usize)> {
    const PREFIX: &[u8] = b"airlock-hello ";
    let len = PREFIX.len() + 17;
    (0..bytes.len().saturating_sub(len - 1)).find_map(|start| {
        let line = &bytes[start..start + len];
        let digits = &line[PREFIX.len()..len - 1];
        let ok = line.starts_with(PREFIX)
            && line[len - 1] == b'\n'
            && digits
                .iter()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b));
        let value = std::str::from_utf8(digits)
            .ok()
            .and_then(|d| u64::from_str_radix(d, 16).ok());
        match (ok, value) {
            (true, Some(value)) => Some((Nonce::new(value), start + len)),
            _ => None,
        }
    })
}

/// Whether `bytes` is whole repeats of `hello`, then perhaps the start of one.
fn only_repeats(mut bytes: &[u8], hello: &[u8]) -> bool {
    while bytes.starts_with(hello) {
        bytes = &bytes[hello.len()..];
    }
    hello.starts_with(bytes)
}

/// An old connection that has read part of a legal frame reads the flush as
/// the rest of it and then as a frame header no frame may have, before it
/// reaches the hello.
fn flush_ends_any_half_read_frame(bytes: &[u8]) {
    let mut input = Input::new(bytes);
    let max = AGENT_MAX_FRAME_BYTES as usize;
    let length = usize::from(input.u16()) * 251 % (max + 1);
    let mut frame = vec![0u8; FRAME_HEADER_LEN + length];
    frame[..3].copy_from_slice(&(length as u32).to_be_bytes()[1..]);
    frame[3] = input.u8();
    frame[4] = input.u8();
    let read = usize::from(input.u16()) * 257 % frame.len();
    let nonce = Nonce::new(NONCE);
    let opening = HostOpening::new(nonce);
    let flush = opening.flush();
    assert_eq!(flush.len(), FLUSH_LEN);
    let mut stream = frame[..read].to_vec();
    stream.extend(&flush);
    let hello_at = stream.len();
    stream.extend(opening.hello());
    let mut at = 0;
    loop {
        let header = stream
            .get(at..at + FRAME_HEADER_LEN)
            .expect("the stream ended before an impossible frame header");
        assert!(
            at + FRAME_HEADER_LEN <= hello_at,
            "a frame header reached into the hello"
        );
        let len = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
        if len > max {
            break;
        }
        at += FRAME_HEADER_LEN + len;
    }
    // The guest's side finds the hello after the same bytes.
    let mut guest = GuestOpening::new();
    assert_eq!(guest.feed(&stream), GuestStep::Answer(nonce.ready()));
}
