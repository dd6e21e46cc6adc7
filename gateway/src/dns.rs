//! The guest's DNS resolver, answered on the host from the policy alone.
//!
//! [`answer`] turns one query from the guest into one response, with no I/O
//! of any kind: a name no rule allows gets NXDOMAIN (and no lookup anywhere
//! that could leak it); an allowed name's A query gets a fake address from
//! [`FakeIps`] that stands for the name until the guest connects to it.
//! AAAA and every other type get an empty NOERROR answer: IPv6 does not
//! leave the guest, and nothing else is needed to connect. Parsing and
//! writing DNS messages is hickory-proto's.

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};
use hickory_proto::ProtoError;

use super::fake_ip::FakeIps;
use super::policy::NetworkPolicy;

/// The largest query answered; larger ones are malformed.
pub const MAX_QUERY_BYTES: usize = 4096;

/// How long the guest may cache a fake address, in seconds: short, so a
/// name whose address was given to another name is asked for again soon.
pub const ANSWER_TTL: u32 = 30;

/// Why a query got no response at all (the caller drops it and audits it as
/// malformed).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DnsError {
    /// The query was larger than [`MAX_QUERY_BYTES`].
    #[error("dns query of {len} bytes is larger than {MAX_QUERY_BYTES}")]
    TooLarge {
        /// Its size.
        len: usize,
    },
    /// The query was not a DNS message.
    #[error("dns query does not parse")]
    Parse(#[source] ProtoError),
    /// The response could not be written (a name too long to answer).
    #[error("dns response does not encode")]
    Encode(#[source] ProtoError),
}

/// A query's response, and what to audit about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsOutcome {
    /// The response to send back to the guest.
    pub response: Vec<u8>,
    /// The name asked for (lowercase, no trailing dot), if the query had
    /// exactly one question.
    pub name: Option<String>,
    /// The record type asked for (`A`, `AAAA` ...), likewise.
    pub record_type: Option<String>,
    /// Whether a rule allows the name; false for refused names and for
    /// queries answered with FORMERR or NOTIMP.
    pub allowed: bool,
}

/// The response to `query` under `policy`, assigning fake addresses from
/// `fake` for allowed names. Never does I/O.
pub fn answer(
    query: &[u8],
    policy: &NetworkPolicy,
    fake: &mut FakeIps,
) -> Result<DnsOutcome, DnsError> {
    if query.len() > MAX_QUERY_BYTES {
        return Err(DnsError::TooLarge { len: query.len() });
    }
    let request = Message::from_vec(query).map_err(DnsError::Parse)?;

    if request.message_type() != MessageType::Query {
        return refuse_message(&request, OpCode::Query, ResponseCode::FormErr);
    }
    if request.op_code() != OpCode::Query {
        return refuse_message(&request, request.op_code(), ResponseCode::NotImp);
    }
    let [question] = request.queries() else {
        return refuse_message(&request, OpCode::Query, ResponseCode::FormErr);
    };

    let name = query_name(question.name());
    let record_type = question.query_type();
    let allowed = policy.allows_name_on_some_port(&name);
    let mut response = response_to(&request, question);
    if !allowed {
        response.set_response_code(ResponseCode::NXDomain);
    } else if record_type == RecordType::A && question.query_class() == DNSClass::IN {
        let addr = fake.assign(&name);
        response.add_answer(Record::from_rdata(
            question.name().clone(),
            ANSWER_TTL,
            RData::A(A(addr)),
        ));
    }
    tracing::trace!(%name, %record_type, allowed, "dns query answered");
    Ok(DnsOutcome {
        response: response.to_vec().map_err(DnsError::Encode)?,
        name: Some(name),
        record_type: Some(record_type.to_string()),
        allowed,
    })
}

/// A NOERROR response echoing the id, the question and RD.
fn response_to(request: &Message, question: &Query) -> Message {
    let mut response = Message::new();
    response
        .set_id(request.id())
        .set_message_type(MessageType::Response)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(request.recursion_desired())
        .set_recursion_available(true)
        .set_response_code(ResponseCode::NoError)
        .add_query(question.clone());
    response
}

/// A response with `code` and no question, for a query we will not answer.
fn refuse_message(
    request: &Message,
    op_code: OpCode,
    code: ResponseCode,
) -> Result<DnsOutcome, DnsError> {
    let mut response = Message::error_msg(request.id(), op_code, code);
    response
        .set_recursion_desired(request.recursion_desired())
        .set_recursion_available(true);
    tracing::debug!(%code, "dns query refused unread");
    Ok(DnsOutcome {
        response: response.to_vec().map_err(DnsError::Encode)?,
        name: None,
        record_type: None,
        allowed: false,
    })
}

/// The name as the policy compares it: labels joined by dots, lowercase,
/// without the root's trailing dot. A byte that has no place in a rule's
/// name (a dot or space inside a label, anything not ASCII ...) is written
/// `\DDD`, so such a name matches no rule and reads plainly in the audit.
fn query_name(name: &Name) -> String {
    use std::fmt::Write as _;

    let mut text = String::new();
    for (i, label) in name.iter().enumerate() {
        if i > 0 {
            text.push('.');
        }
        for &byte in label {
            if byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_' {
                text.push(char::from(byte.to_ascii_lowercase()));
            } else {
                // Writing to a String cannot fail.
                let _ = write!(text, "\\{byte:03}");
            }
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::fake_ip::FAKE_RANGE;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn query(name: &str, record_type: RecordType) -> Result<Vec<u8>, ProtoError> {
        let mut message = Message::new();
        message
            .set_id(0x4242)
            .set_recursion_desired(true)
            .add_query(Query::query(Name::from_ascii(name)?, record_type));
        message.to_vec()
    }

    fn policy(rules: &[&str]) -> Result<NetworkPolicy, Box<dyn std::error::Error>> {
        let mut policy = NetworkPolicy::new();
        for rule in rules {
            policy.push(rule.parse()?);
        }
        Ok(policy)
    }

    fn addresses(response: &Message) -> Vec<Ipv4Addr> {
        response
            .answers()
            .iter()
            .filter_map(|record| match record.data() {
                RData::A(A(addr)) => Some(*addr),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn allowed_name_gets_the_same_fake_address_each_time() -> TestResult {
        let policy = policy(&["api.example.com"])?;
        let mut fake = FakeIps::new();
        let first = answer(
            &query("API.example.com.", RecordType::A)?,
            &policy,
            &mut fake,
        )?;
        let response = Message::from_vec(&first.response)?;
        assert!(first.allowed);
        assert_eq!(first.name.as_deref(), Some("api.example.com"));
        assert_eq!(first.record_type.as_deref(), Some("A"));
        assert_eq!(response.id(), 0x4242);
        assert_eq!(response.message_type(), MessageType::Response);
        assert_eq!(response.response_code(), ResponseCode::NoError);
        assert!(response.recursion_desired() && response.recursion_available());
        assert_eq!(response.queries().len(), 1);
        let addrs = addresses(&response);
        assert_eq!(addrs.len(), 1);
        assert!(FAKE_RANGE.contains(&addrs[0]));
        assert_eq!(response.answers()[0].ttl(), ANSWER_TTL);
        assert_eq!(fake.name_of(addrs[0]), Some("api.example.com"));

        let again = answer(
            &query("api.example.com", RecordType::A)?,
            &policy,
            &mut fake,
        )?;
        assert_eq!(addresses(&Message::from_vec(&again.response)?), addrs);
        Ok(())
    }

    #[test]
    fn refused_name_gets_nxdomain_and_no_address() -> TestResult {
        let policy = policy(&["api.example.com"])?;
        let mut fake = FakeIps::new();
        let outcome = answer(&query("evil.com.", RecordType::A)?, &policy, &mut fake)?;
        let response = Message::from_vec(&outcome.response)?;
        assert!(!outcome.allowed);
        assert_eq!(outcome.name.as_deref(), Some("evil.com"));
        assert_eq!(response.response_code(), ResponseCode::NXDomain);
        assert!(response.answers().is_empty());
        assert!(fake.is_empty());
        Ok(())
    }

    #[test]
    fn garbage_is_an_error_not_a_response() -> TestResult {
        let mut fake = FakeIps::new();
        let policy = policy(&["example.com"])?;
        assert!(matches!(
            answer(b"\x12\x34garbage", &policy, &mut fake),
            Err(DnsError::Parse(_))
        ));
        assert!(matches!(
            answer(&[0; MAX_QUERY_BYTES + 1], &policy, &mut fake),
            Err(DnsError::TooLarge { .. })
        ));
        Ok(())
    }

    #[test]
    fn aaaa_gets_an_empty_answer() -> TestResult {
        let policy = policy(&["api.example.com"])?;
        let mut fake = FakeIps::new();
        let outcome = answer(
            &query("api.example.com", RecordType::AAAA)?,
            &policy,
            &mut fake,
        )?;
        let response = Message::from_vec(&outcome.response)?;
        assert!(outcome.allowed);
        assert_eq!(outcome.record_type.as_deref(), Some("AAAA"));
        assert_eq!(response.response_code(), ResponseCode::NoError);
        assert!(response.answers().is_empty());
        let mx = answer(
            &query("api.example.com", RecordType::MX)?,
            &policy,
            &mut fake,
        )?;
        assert!(Message::from_vec(&mx.response)?.answers().is_empty());
        Ok(())
    }

    #[test]
    fn wildcard_rules_answer_names_under_the_suffix_only() -> TestResult {
        let policy = policy(&["*.example.com"])?;
        let mut fake = FakeIps::new();
        let under = answer(
            &query("a.b.example.com", RecordType::A)?,
            &policy,
            &mut fake,
        )?;
        assert!(under.allowed);
        assert_eq!(addresses(&Message::from_vec(&under.response)?).len(), 1);
        let apex = answer(&query("example.com", RecordType::A)?, &policy, &mut fake)?;
        assert!(!apex.allowed);
        Ok(())
    }

    #[test]
    fn a_name_allowed_only_on_one_port_still_resolves() -> TestResult {
        let policy = policy(&["api.example.com:443"])?;
        let mut fake = FakeIps::new();
        let outcome = answer(
            &query("api.example.com", RecordType::A)?,
            &policy,
            &mut fake,
        )?;
        assert!(outcome.allowed);
        assert_eq!(addresses(&Message::from_vec(&outcome.response)?).len(), 1);
        Ok(())
    }

    #[test]
    fn address_rules_do_not_make_names_resolve() -> TestResult {
        let policy = policy(&["0.0.0.0/0"])?;
        let mut fake = FakeIps::new();
        let outcome = answer(&query("example.com", RecordType::A)?, &policy, &mut fake)?;
        assert!(!outcome.allowed);
        Ok(())
    }

    #[test]
    fn a_dot_inside_a_label_does_not_pass_for_a_separator() -> TestResult {
        let policy = policy(&["api.example.com"])?;
        let mut fake = FakeIps::new();
        let name = Name::from_labels([&b"api.example"[..], &b"com"[..]])?;
        let mut message = Message::new();
        message.add_query(Query::query(name, RecordType::A));
        let outcome = answer(&message.to_vec()?, &policy, &mut fake)?;
        assert!(!outcome.allowed);
        assert_eq!(outcome.name.as_deref(), Some("api\\046example.com"));
        Ok(())
    }

    #[test]
    fn queries_without_exactly_one_question_get_formerr() -> TestResult {
        let policy = policy(&["example.com"])?;
        let mut fake = FakeIps::new();
        let mut empty = Message::new();
        empty.set_id(7);
        let mut two = Message::new();
        two.set_id(8)
            .add_query(Query::query(
                Name::from_ascii("example.com")?,
                RecordType::A,
            ))
            .add_query(Query::query(
                Name::from_ascii("example.com")?,
                RecordType::AAAA,
            ));
        let mut reply = Message::new();
        reply
            .set_id(9)
            .set_message_type(MessageType::Response)
            .add_query(Query::query(
                Name::from_ascii("example.com")?,
                RecordType::A,
            ));
        for (message, id) in [(empty, 7), (two, 8), (reply, 9)] {
            let outcome = answer(&message.to_vec()?, &policy, &mut fake)?;
            let response = Message::from_vec(&outcome.response)?;
            assert_eq!(response.id(), id);
            assert_eq!(response.response_code(), ResponseCode::FormErr);
            assert!(!outcome.allowed);
            assert_eq!(outcome.name, None);
        }
        assert!(fake.is_empty());
        Ok(())
    }

    #[test]
    fn other_opcodes_get_notimp() -> TestResult {
        let policy = policy(&["example.com"])?;
        let mut fake = FakeIps::new();
        let mut notify = Message::new();
        notify
            .set_id(11)
            .set_op_code(OpCode::Notify)
            .add_query(Query::query(
                Name::from_ascii("example.com")?,
                RecordType::SOA,
            ));
        let outcome = answer(&notify.to_vec()?, &policy, &mut fake)?;
        let response = Message::from_vec(&outcome.response)?;
        assert_eq!(response.id(), 11);
        assert_eq!(response.response_code(), ResponseCode::NotImp);
        assert_eq!(response.op_code(), OpCode::Notify);
        Ok(())
    }
}
