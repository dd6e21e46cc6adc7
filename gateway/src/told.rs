//! What a refused program is told, in one wording wherever it is told.
//!
//! A refusal reaches the guest in one of two ways. Where the protocol has
//! a way to answer (a request to the HTTP proxy, a plain HTTP request, a
//! DNS query) the host answers it: [`http_answer`] is the whole HTTP/1.1
//! response the gateway writes before anything else on a connection, with
//! [`status`] and the [`sentence`] as its reason phrase and body, and the
//! HTTP gate answers its own refusals with the same pieces. Where it has
//! none (raw TCP, TLS whose server name is refused) the connection is reset.
//! Either way the agent is given a [`Told`], which it appends to the
//! guest's refusal log (`airlock_proto::contract::paths::REFUSAL_LOG`), so
//! a program whose connection was reset can still learn why.
//!
//! The sentence always names the destination as the program asked for it
//! (`evil.example:443`, `192.0.2.7:22`) and never an address the host
//! resolved a name to.

use std::fmt;
use std::sync::Arc;

use http::StatusCode;

use super::audit::Refusal;
use super::secrets::HttpRefusal;

/// The most characters of a sentence used as an HTTP reason phrase.
const MAX_REASON_PHRASE: usize = 200;

/// A refusal as the guest's agent is told of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Told {
    /// What the program was answered (`HTTP 403`, `NXDOMAIN`), or `None`
    /// when its connection is reset.
    pub answer: Option<String>,
    /// Why, naming the destination: [`sentence`].
    pub reason: String,
}

impl Told {
    /// A refusal the program was answered about with an HTTP `status`.
    pub fn http(status: StatusCode, reason: String) -> Self {
        Self {
            answer: Some(format!("HTTP {}", status.as_u16())),
            reason,
        }
    }

    /// A refusal that resets the program's connection.
    pub fn reset(reason: String) -> Self {
        Self {
            answer: None,
            reason,
        }
    }
}

impl fmt::Display for Told {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.answer {
            Some(answer) => write!(f, "answered {answer}: {}", self.reason),
            None => write!(f, "connection reset: {}", self.reason),
        }
    }
}

/// Where the gateway tells the agent of the refusals it answered itself.
pub type Tell = Arc<dyn Fn(Told) + Send + Sync>;

/// Why `refusal` happened to a connection to `destination` (`host:port`),
/// as one sentence for the program, its log and the model reading them.
pub fn sentence(refusal: &Refusal, destination: &str) -> String {
    match refusal {
        Refusal::NotAllowed => format!("no rule allows {destination}"),
        Refusal::RestrictedAddress { .. } => format!(
            "{destination} resolves to a restricted address (loopback, private, link-local \
             or metadata) and no CIDR rule allows it"
        ),
        Refusal::HostAddress { kind, .. } => format!(
            "{destination} is {kind}: this sandbox may not reach the host it runs on, whatever \
             its rules say (only the machine's owner may allow it)"
        ),
        Refusal::ServerNameMismatch {
            server_name: Some(name),
        } => format!(
            "TLS server name {name:?} is not {destination}, the name this connection was allowed for"
        ),
        Refusal::ServerNameMismatch { server_name: None } => {
            format!("the TLS hello to {destination} names no server (no SNI)")
        }
        Refusal::HostMismatch { host: Some(host) } => format!(
            "HTTP host {host:?} is not {destination}, the name this connection was allowed for; \
             send the request on a connection of its own"
        ),
        Refusal::HostMismatch { host: None } => {
            format!("the HTTP request to {destination} names no host")
        }
        Refusal::PlaceholderElsewhere { secret } => {
            format!("the placeholder of secret {secret} may not be sent to {destination}")
        }
        Refusal::TooManyConnections { limit } => format!(
            "no connection to {destination}: the sandbox already has {limit} open, its limit"
        ),
        Refusal::Malformed { what } => format!("malformed {what} (to {destination})"),
        Refusal::TimedOut => format!("the connection to {destination} timed out"),
        Refusal::Resolve { message } => {
            format!("{destination} did not resolve on the host: {message}")
        }
        Refusal::Upstream { message } => format!("{destination} could not be reached: {message}"),
        Refusal::UpstreamUntrusted { detail } => format!(
            "the certificate of {destination} is not from a CA the host trusts ({detail}); \
             give the sandbox that CA (--ca-cert FILE, or --trust-host-roots behind a \
             TLS-inspecting proxy)"
        ),
        Refusal::GuestUntrusted { alert } => format!(
            "the program refused the sandbox's certificate for {destination} ({alert}): it \
             does not read the system store; point it at $SSL_CERT_FILE"
        ),
        Refusal::NoToken => format!("{destination} needs the sandbox's traffic token"),
        Refusal::WrongToken => format!("the traffic token is not the one of {destination}"),
        Refusal::PortClosed => format!("nothing listens on {destination}"),
    }
}

/// The HTTP status a refusal is answered with.
pub fn status(refusal: &Refusal) -> StatusCode {
    match refusal {
        Refusal::NotAllowed
        | Refusal::RestrictedAddress { .. }
        | Refusal::HostAddress { .. }
        | Refusal::ServerNameMismatch { .. }
        | Refusal::PlaceholderElsewhere { .. } => StatusCode::FORBIDDEN,
        Refusal::HostMismatch { .. } => StatusCode::MISDIRECTED_REQUEST,
        Refusal::NoToken | Refusal::WrongToken => StatusCode::UNAUTHORIZED,
        Refusal::TooManyConnections { .. } => StatusCode::TOO_MANY_REQUESTS,
        Refusal::Malformed { .. } => StatusCode::BAD_REQUEST,
        Refusal::TimedOut => StatusCode::GATEWAY_TIMEOUT,
        Refusal::Resolve { .. }
        | Refusal::Upstream { .. }
        | Refusal::UpstreamUntrusted { .. }
        | Refusal::GuestUntrusted { .. }
        | Refusal::PortClosed => StatusCode::BAD_GATEWAY,
    }
}

/// What to do about an answer with `status`: the body's second line.
fn advice(status: StatusCode) -> &'static str {
    match status {
        StatusCode::FORBIDDEN => {
            "Blocked by this sandbox's network rules: retrying will not help. \
             Only a rule added to the sandbox can allow it."
        }
        StatusCode::MISDIRECTED_REQUEST => {
            "Each connection is allowed for one name: open another connection for another name."
        }
        StatusCode::TOO_MANY_REQUESTS => {
            "Close connections this sandbox no longer needs, then try again."
        }
        StatusCode::BAD_GATEWAY | StatusCode::GATEWAY_TIMEOUT => {
            "This sandbox's network rules allow it, but the host could not reach it."
        }
        _ => "The sandbox's network proxy could not use the request.",
    }
}

/// The HTTP reason phrase for `reason`: `airlock: ` and the sentence, in
/// printable ASCII (anything else becomes `?`), cut to a sane length.
pub fn reason_phrase(reason: &str) -> String {
    format!("airlock: {reason}")
        .chars()
        .take(MAX_REASON_PHRASE)
        .map(|c| {
            if c == ' ' || c.is_ascii_graphic() {
                c
            } else {
                '?'
            }
        })
        .collect()
}

/// The body of an answer: the sentence and what to do about it.
pub fn body(status: StatusCode, reason: &str) -> String {
    format!("airlock: {reason}\n{}\n", advice(status))
}

/// A whole HTTP/1.1 response refusing a request, which closes the
/// connection; without a body when the request was `HEAD`.
pub fn http_answer(status: StatusCode, reason: &str, head_request: bool) -> Vec<u8> {
    let body = body(status, reason);
    let mut answer = format!(
        "HTTP/1.1 {} {}\r\n\
         Content-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\n\
         Connection: close\r\n\r\n",
        status.as_u16(),
        reason_phrase(reason),
        body.len()
    );
    if !head_request {
        answer.push_str(&body);
    }
    answer.into_bytes()
}

impl From<HttpRefusal> for Refusal {
    fn from(refusal: HttpRefusal) -> Self {
        match refusal {
            HttpRefusal::HostMismatch { host } => Refusal::HostMismatch { host },
            HttpRefusal::PlaceholderElsewhere { secret } => {
                Refusal::PlaceholderElsewhere { secret }
            }
            HttpRefusal::Malformed { what } => Refusal::Malformed { what },
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_its_destination_and_reason() {
        assert_eq!(
            sentence(&Refusal::NotAllowed, "evil.example:443"),
            "no rule allows evil.example:443"
        );
        let restricted = Refusal::RestrictedAddress {
            addr: "10.0.0.1"
                .parse()
                .unwrap_or(std::net::Ipv4Addr::LOCALHOST.into()),
        };
        let text = sentence(&restricted, "intranet.test:80");
        assert!(
            text.starts_with("intranet.test:80 resolves to a restricted address"),
            "{text}"
        );
        assert!(
            !text.contains("10.0.0.1"),
            "the host's address stays on the host"
        );
        assert_eq!(status(&restricted), StatusCode::FORBIDDEN);
        assert_eq!(
            status(&Refusal::TooManyConnections { limit: 4 }),
            StatusCode::TOO_MANY_REQUESTS
        );
        let upstream = Refusal::Upstream {
            message: "Connection refused (os error 111)".into(),
        };
        assert_eq!(
            sentence(&upstream, "down.test:8080"),
            "down.test:8080 could not be reached: Connection refused (os error 111)"
        );
        assert_eq!(status(&upstream), StatusCode::BAD_GATEWAY);
    }

    #[test]
    fn an_answer_is_a_closing_response_with_the_sentence_as_its_reason() {
        let reason = sentence(&Refusal::NotAllowed, "evil.example:443");
        let answer = String::from_utf8(http_answer(StatusCode::FORBIDDEN, &reason, false)).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        let mut lines = head.lines();
        assert_eq!(
            lines.next(),
            Some("HTTP/1.1 403 airlock: no rule allows evil.example:443")
        );
        assert!(head.contains("Connection: close"), "{head}");
        assert!(
            head.contains(&format!("Content-Length: {}", body.len())),
            "{head}"
        );
        assert!(body.starts_with("airlock: no rule allows evil.example:443\n"));
        assert!(body.contains("network rules"), "{body}");

        let head_only = http_answer(StatusCode::FORBIDDEN, &reason, true);
        assert!(head_only.ends_with(b"\r\n\r\n"));
    }

    #[test]
    fn a_reason_phrase_is_printable_and_bounded() {
        let phrase = reason_phrase("host \"a\r\nInjected: 1\u{e9}\" refused");
        assert!(!phrase.contains(['\r', '\n']), "{phrase}");
        assert!(phrase.chars().all(|c| c == ' ' || c.is_ascii_graphic()));
        assert_eq!(reason_phrase(&"x".repeat(1000)).len(), MAX_REASON_PHRASE);
    }

    #[test]
    fn told_reads_as_a_log_line_tail() {
        let told = Told::http(StatusCode::FORBIDDEN, "no rule allows a.test:443".into());
        assert_eq!(
            told.to_string(),
            "answered HTTP 403: no rule allows a.test:443"
        );
        let reset = Told::reset("no rule allows 192.0.2.7:22".into());
        assert_eq!(
            reset.to_string(),
            "connection reset: no rule allows 192.0.2.7:22"
        );
    }
}
