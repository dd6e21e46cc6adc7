//! The first bytes of every carried connection (the gateway's `sniff`): what
//! the gateway reads to tell a TLS ClientHello's server name or an HTTP
//! request's host before it dials anything.
//!
//! Input: `[chunking seed: u8][bytes the guest sends, then closes]`.
#![no_main]

use std::time::Duration;

use airlock_gateway::fuzzing::{classify, read_head, Head, SniffError, MAX_HEAD_BYTES};
use airlock_fuzz::{block_on, chunks, ChunkedReader, Input};
use libfuzzer_sys::fuzz_target;

/// Long enough never to fire: the reader ends instead.
const WAIT: Duration = Duration::from_secs(3600);

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let seed = input.u8();
    let bytes = input.rest();
    let reads = chunks(seed, bytes);

    let mut reader = ChunkedReader::new(&reads);
    let mut buf = Vec::new();
    let result = block_on(read_head(&mut reader, &mut buf, WAIT, WAIT));

    // Every byte read is kept, in order: the gateway replays them upstream.
    assert!(buf.len() <= bytes.len());
    assert_eq!(
        buf,
        &bytes[..buf.len()],
        "the kept bytes are not what was read"
    );
    assert!(
        buf.len() <= MAX_HEAD_BYTES + 1,
        "read {} bytes undecided",
        buf.len()
    );

    // No read goes past the first prefix that decides.
    let mut end = 0;
    for read in &reads {
        if end >= buf.len() {
            break;
        }
        if end > 0 {
            assert!(
                matches!(classify(&bytes[..end]), Ok(None)),
                "read on after {end} bytes had decided"
            );
        }
        end += read.len();
    }

    match result {
        Ok(head) => {
            assert_eq!(
                classify(&buf).ok().flatten().as_ref(),
                Some(&head),
                "read_head and classify disagree"
            );
            check_head(&head);
        }
        Err(SniffError::Closed) => assert!(bytes.is_empty()),
        Err(SniffError::Truncated) => {
            assert_eq!(buf.len(), bytes.len());
            assert!(matches!(classify(&buf), Ok(None)));
        }
        Err(SniffError::TooLarge) => assert!(buf.len() > MAX_HEAD_BYTES),
        Err(SniffError::Malformed { .. }) => assert!(classify(&buf).is_err()),
        Err(other) => panic!("unexpected: {other}"),
    }
});

/// What a head says is fit to compare with a rule's name.
fn check_head(head: &Head) {
    match head {
        Head::Tls {
            server_name: Some(name),
        } => assert_normalized(name),
        Head::Http { method, host, .. } => {
            assert!(!method.is_empty());
            if let Some(host) = host {
                assert!(!host.is_empty());
                assert_normalized(host);
            }
        }
        Head::Tls { server_name: None } | Head::Other => {}
        Head::Silent => panic!("silent, with the bytes already there"),
    }
}

/// Lowercase, as rules compare names (a name of the form `a.` stays one
/// that no rule matches).
fn assert_normalized(name: &str) {
    assert_eq!(name.to_ascii_lowercase(), name, "a name not lowercased");
}
