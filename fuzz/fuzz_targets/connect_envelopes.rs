//! A client stream on the E2B front's Connect protocol (envd's
//! `StreamInput`): 5-byte envelopes as a stranger sends them, arriving in
//! any split (`e2b::Decoder`).
//!
//! Input: a byte choosing how the stream is cut into reads, a byte for the
//! message bound (0 to 255 bytes), then the stream. Invariants: however the
//! bytes arrive, the same envelopes come out, each within the bound;
//! re-encoded, they are the stream's first bytes, exactly; a refusal comes
//! only for an envelope whose header says it is past the bound or
//! compressed, and only once its header has arrived.
#![no_main]

use airlock_fuzz::{chunks, Input};
use airlock_server::fuzzing::e2b::{encode, Decoder, Envelope};
use libfuzzer_sys::fuzz_target;

const HEADER: usize = 5;
const COMPRESSED: u8 = 0x01;

/// The envelopes of `pieces` fed in order, and whether the decoder refused
/// the stream.
fn decode(pieces: &[&[u8]], max: usize) -> (Vec<Envelope>, bool) {
    let mut decoder = Decoder::new(max);
    let mut out = Vec::new();
    for piece in pieces {
        decoder.push(piece);
        loop {
            match decoder.next_envelope() {
                Ok(Some(envelope)) => {
                    assert!(envelope.message.len() <= max, "past the bound");
                    out.push(envelope);
                }
                Ok(None) => break,
                Err(_) => return (out, true),
            }
        }
    }
    (out, false)
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let seed = input.u8();
    let max = usize::from(input.u8());
    let stream = input.rest();

    let (whole, whole_refused) = decode(&[stream], max);
    let (split, split_refused) = decode(&chunks(seed, stream), max);
    assert_eq!(whole, split, "the envelopes depend on how the bytes arrived");
    assert_eq!(whole_refused, split_refused);

    let mut again = Vec::new();
    for envelope in &whole {
        again.extend_from_slice(&encode(envelope.flags, &envelope.message));
    }
    assert_eq!(&stream[..again.len()], &again[..], "not the stream's bytes");

    let rest = &stream[again.len()..];
    if whole_refused {
        assert!(rest.len() >= HEADER, "refused before a header arrived");
        let length = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
        assert!(
            length > max || rest[0] & COMPRESSED != 0,
            "refused an envelope within the bound, uncompressed"
        );
    } else if rest.len() >= HEADER {
        let length = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
        assert!(rest.len() < HEADER + length, "a whole envelope left undecoded");
    }
    for envelope in &whole {
        assert_eq!(envelope.flags & COMPRESSED, 0, "a compressed message decoded");
    }
});
