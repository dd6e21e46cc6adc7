//! The guest's DNS queries (the gateway's `dns::answer`, which it calls
//! on every query the agent carries), answered from a policy with fake
//! addresses.
//!
//! Input: queries, each `[length: u16][bytes]`, answered in turn with one
//! table of fake addresses small enough that names lose their addresses.
#![no_main]

use std::net::Ipv4Addr;

use airlock_gateway::fuzzing::{answer, DnsError, FakeIps, FAKE_RANGE, MAX_QUERY_BYTES};
use airlock_gateway::policy::NetworkPolicy;
use airlock_gateway::GATEWAY_ADDR;
use airlock_fuzz::Input;
use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::{DNSClass, RData, RecordType};
use libfuzzer_sys::fuzz_target;

/// Rules as a user writes them: names, a wildcard, a port, a range.
const RULES: [&str; 5] = [
    "allowed.test",
    "*.wild.test",
    "port.test:443",
    "10.0.0.0/8",
    "xn--bcher-kva.test",
];

fuzz_target!(|data: &[u8]| {
    let mut policy = NetworkPolicy::new();
    for rule in RULES {
        policy.push(rule.parse().expect("fixture rule"));
    }
    let mut fake = FakeIps::with_capacity(3);
    let mut input = Input::new(data);
    while !input.is_empty() {
        let query = input.field();
        check(query, &policy, &mut fake);
    }
});

fn check(query: &[u8], policy: &NetworkPolicy, fake: &mut FakeIps) {
    let held_before = fake.len();
    let outcome = match answer(query, policy, fake) {
        Ok(outcome) => outcome,
        Err(DnsError::TooLarge { len }) => {
            assert!(len > MAX_QUERY_BYTES && query.len() == len);
            return;
        }
        Err(DnsError::Parse(_)) => {
            assert!(Message::from_vec(query).is_err(), "a parsing query refused");
            return;
        }
        Err(other) => panic!("no response for a query that parses: {other}"),
    };
    let request = Message::from_vec(query).expect("answered a query that does not parse");
    // The response is small, a DNS message, and for this query.
    assert!(
        outcome.response.len() <= 512,
        "a response of {} bytes",
        outcome.response.len()
    );
    let response = Message::from_vec(&outcome.response).expect("the response does not parse");
    assert_eq!(response.id(), request.id());
    assert_eq!(response.message_type(), MessageType::Response);

    let Some(name) = outcome.name.as_deref() else {
        assert!(!outcome.allowed);
        assert!(response.answers().is_empty());
        assert!(matches!(
            response.response_code(),
            ResponseCode::FormErr | ResponseCode::NotImp
        ));
        assert_eq!(fake.len(), held_before, "an unread query took an address");
        return;
    };
    assert!(
        name.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.\\".contains(&b)),
        "the audited name {name:?} holds a byte a rule cannot"
    );
    let [question] = request.queries() else {
        panic!("a name was read from a query without exactly one question")
    };
    assert_eq!(response.queries(), [question.clone()]);
    assert_eq!(outcome.allowed, policy.allows_name_on_some_port(name));

    let addresses: Vec<Ipv4Addr> = response
        .answers()
        .iter()
        .map(|record| match record.data() {
            RData::A(a) => a.0,
            other => panic!("an answer that is not an address: {other:?}"),
        })
        .collect();
    if !outcome.allowed {
        assert_eq!(response.response_code(), ResponseCode::NXDomain);
        assert!(addresses.is_empty(), "a refused name got an address");
        assert_eq!(fake.len(), held_before, "a refused name took an address");
        return;
    }
    assert_eq!(response.response_code(), ResponseCode::NoError);
    if question.query_type() == RecordType::A && question.query_class() == DNSClass::IN {
        let [addr] = addresses[..] else {
            panic!("an allowed A query got {} addresses", addresses.len())
        };
        assert!(FAKE_RANGE.contains(&addr) && addr != GATEWAY_ADDR, "{addr}");
        assert_eq!(response.answers()[0].name(), question.name());
        // The address stands for this name, until another name takes it.
        assert_eq!(fake.name_of(addr), Some(name));
        assert!(fake.len() <= fake.capacity());
    } else {
        assert!(addresses.is_empty(), "only A queries get addresses");
    }
}
