//! What a guest's connection says it is for, from its first bytes.
//!
//! Before a connection to an allowed name is dialed, its first bytes are
//! read and kept (the caller replays them upstream): a TLS ClientHello's
//! server name or an HTTP request's Host must name the server the guest
//! connected to, so a connection to an allowed name cannot be steered to
//! another one behind the same address. [`classify`] judges the bytes read
//! so far, leaving parsing to rustls (`Acceptor`) and httparse;
//! [`read_head`] reads until it can.

use std::io;
use std::time::Duration;

use rustls::server::Acceptor;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::time::Instant;

use super::policy::normalize_name;

/// How many bytes may pass without a decision.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

/// The most headers an HTTP request head may have.
const MAX_HEADERS: usize = 64;

/// The request methods that mark a connection as HTTP.
const METHODS: [&str; 9] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
];

/// What a connection's first bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Head {
    /// A TLS ClientHello, with its server name (SNI; lowercase, no trailing
    /// dot) if it has one.
    Tls {
        /// The server name.
        server_name: Option<String>,
    },
    /// An HTTP/1 request head.
    Http {
        /// The method, e.g. `GET`.
        method: String,
        /// The request target as sent: `/path`, `http://host/path`, or
        /// `host:port` for `CONNECT`.
        target: String,
        /// The host it is for (lowercase, without port or brackets): from
        /// the Host header, or from an absolute-form or `CONNECT` target.
        host: Option<String>,
    },
    /// Neither TLS nor HTTP.
    Other,
    /// Nothing arrived within the wait, as with protocols whose server
    /// speaks first.
    Silent,
}

/// Why no decision was made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SniffError {
    /// [`MAX_HEAD_BYTES`] passed without a decision.
    #[error("no complete request within the first {MAX_HEAD_BYTES} bytes")]
    TooLarge,
    /// A request began but did not complete in time.
    #[error("the first request did not complete in time")]
    TimedOut,
    /// The connection closed in the middle of its first request.
    #[error("the connection closed in the middle of its first request")]
    Truncated,
    /// The connection closed before sending anything.
    #[error("the connection closed before sending anything")]
    Closed,
    /// The bytes began as TLS or HTTP but did not parse as it.
    #[error("malformed {what}")]
    Malformed {
        /// What was wrong.
        what: String,
    },
    /// Reading failed.
    #[error("reading the first request failed")]
    Io(#[source] io::Error),
}

fn malformed(what: impl Into<String>) -> SniffError {
    SniffError::Malformed { what: what.into() }
}

/// Judges the bytes read so far: `Ok(None)` means more are needed.
pub fn classify(buf: &[u8]) -> Result<Option<Head>, SniffError> {
    let decision = match kind(buf) {
        Kind::NeedMore => None,
        Kind::Tls => classify_tls(buf)?,
        Kind::Http => classify_http(buf)?,
        Kind::Other => Some(Head::Other),
    };
    if decision.is_none() && buf.len() > MAX_HEAD_BYTES {
        return Err(SniffError::TooLarge);
    }
    Ok(decision)
}

/// What the first few bytes look like.
enum Kind {
    NeedMore,
    Tls,
    Http,
    Other,
}

fn kind(buf: &[u8]) -> Kind {
    match buf {
        [] => Kind::NeedMore,
        // A handshake record, SSL 3.0 to TLS 1.3 record versions.
        [0x16, 0x03, minor, ..] if *minor <= 0x04 => Kind::Tls,
        [0x16] | [0x16, 0x03] => Kind::NeedMore,
        _ => {
            let mut need_more = false;
            for method in METHODS {
                let token = method.bytes().chain([b' ']);
                if buf.iter().zip(token).all(|(got, want)| *got == want) {
                    if buf.len() > method.len() {
                        return Kind::Http;
                    }
                    need_more = true;
                }
            }
            if need_more {
                Kind::NeedMore
            } else {
                Kind::Other
            }
        }
    }
}

/// Feeds a copy of the bytes to rustls until it has a whole ClientHello.
fn classify_tls(buf: &[u8]) -> Result<Option<Head>, SniffError> {
    let mut acceptor = Acceptor::default();
    let mut rest = buf;
    // `read_tls` takes at most a few KiB at a time: alternate with `accept`.
    loop {
        match acceptor.read_tls(&mut rest) {
            Ok(0) => return Ok(None),
            Ok(_) => {}
            Err(err) => return Err(malformed(format!("tls client hello: {err}"))),
        }
        match acceptor.accept() {
            Ok(Some(accepted)) => {
                let server_name = accepted.client_hello().server_name().map(normalize_name);
                return Ok(Some(Head::Tls { server_name }));
            }
            Ok(None) if rest.is_empty() => return Ok(None),
            Ok(None) => {}
            Err((err, _alert)) => return Err(malformed(format!("tls client hello: {err}"))),
        }
    }
}

fn classify_http(buf: &[u8]) -> Result<Option<Head>, SniffError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(buf) {
        Ok(httparse::Status::Partial) => return Ok(None),
        Ok(httparse::Status::Complete(_)) => {}
        Err(httparse::Error::TooManyHeaders) => {
            return Err(malformed(format!(
                "http request: more than {MAX_HEADERS} headers"
            )))
        }
        Err(err) => return Err(malformed(format!("http request: {err}"))),
    }
    let method = request.method.unwrap_or_default().to_owned();
    let target = request.path.unwrap_or_default().to_owned();

    let mut hosts = request
        .headers
        .iter()
        .filter(|header| header.name.eq_ignore_ascii_case("host"));
    let header_host = match (hosts.next(), hosts.next()) {
        (None, _) => None,
        (Some(_), Some(_)) => return Err(malformed("http request: more than one host header")),
        (Some(header), None) => {
            let value = std::str::from_utf8(header.value)
                .map_err(|_| malformed("http request: host header is not text"))?;
            host_of_authority(value.trim())
        }
    };
    let target_host = if method == "CONNECT" {
        host_of_authority(&target)
    } else {
        absolute_form_authority(&target).and_then(host_of_authority)
    };
    let host = match (header_host, target_host) {
        (Some(header), Some(target)) if header != target => {
            return Err(malformed(format!(
                "http request: target names {target:?} but the host header {header:?}"
            )))
        }
        (header, target) => header.or(target),
    };
    Ok(Some(Head::Http {
        method,
        target,
        host,
    }))
}

/// The authority of `scheme://authority/path?query`, if `target` has that form.
fn absolute_form_authority(target: &str) -> Option<&str> {
    let (scheme, rest) = target.split_once("://")?;
    let is_scheme = !scheme.is_empty()
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
    if !is_scheme {
        return None;
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    Some(&rest[..end])
}

/// The host of `[userinfo@]host[:port]`: lowercase, without brackets, port
/// or a trailing dot; `None` if empty.
fn host_of_authority(authority: &str) -> Option<String> {
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    let host = if let Some(bracketed) = host_port.strip_prefix('[') {
        bracketed
            .split_once(']')
            .map_or(bracketed, |(host, _)| host)
    } else {
        match host_port.rsplit_once(':') {
            Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
            _ => host_port,
        }
    };
    let host = normalize_name(host);
    (!host.is_empty()).then_some(host)
}

/// Reads from `reader` into `buf`, keeping every byte, until [`classify`]
/// decides. Bytes already in `buf` count.
///
/// With nothing within `first_byte_wait`, the connection is
/// [`Head::Silent`]; once bytes arrive, the rest of the head must arrive
/// within `head_wait` of the first ([`SniffError::TimedOut`]). A connection
/// that closes with nothing sent is [`SniffError::Closed`], and one that
/// closes mid-head [`SniffError::Truncated`].
pub async fn read_head<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    first_byte_wait: Duration,
    head_wait: Duration,
) -> Result<Head, SniffError> {
    if let Some(head) = classify(buf)? {
        return Ok(head);
    }
    let mut deadline = (!buf.is_empty()).then(|| Instant::now() + head_wait);
    loop {
        let until = deadline.unwrap_or_else(|| Instant::now() + first_byte_wait);
        let read = match read_some(reader, buf, until).await {
            Ok(read) => read,
            Err(err) => return Err(SniffError::Io(err)),
        };
        match read {
            None if deadline.is_none() => return Ok(Head::Silent),
            None => return Err(SniffError::TimedOut),
            Some(0) if buf.is_empty() => return Err(SniffError::Closed),
            Some(0) => return Err(SniffError::Truncated),
            Some(_) => {}
        }
        if deadline.is_none() {
            deadline = Some(Instant::now() + head_wait);
        }
        if let Some(head) = classify(buf)? {
            return Ok(head);
        }
    }
}

/// One read appended to `buf`, up to one byte past [`MAX_HEAD_BYTES`];
/// `None` if nothing came by `until`.
async fn read_some<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    until: Instant,
) -> io::Result<Option<usize>> {
    let start = buf.len();
    let want = (MAX_HEAD_BYTES + 1).saturating_sub(start).clamp(1, 8192);
    buf.resize(start + want, 0);
    let result = tokio::time::timeout_at(until, reader.read(&mut buf[start..])).await;
    let read = match result {
        Ok(Ok(n)) => Ok(Some(n)),
        Ok(Err(err)) => Err(err),
        Err(_elapsed) => Ok(None),
    };
    let kept = read.as_ref().ok().copied().flatten().unwrap_or(0);
    buf.truncate(start + kept);
    read
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rustls::pki_types::ServerName;
    use rustls::{ClientConfig, ClientConnection, RootCertStore};
    use tokio::io::AsyncWriteExt;

    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    /// A real ClientHello, as rustls (ring) sends it.
    fn client_hello(
        server_name: &str,
        alpn: Vec<Vec<u8>>,
    ) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(RootCertStore::empty())
            .with_no_client_auth();
        config.alpn_protocols = alpn;
        let name = ServerName::try_from(server_name.to_owned())?;
        let mut conn = ClientConnection::new(Arc::new(config), name)?;
        let mut bytes = Vec::new();
        while conn.wants_write() {
            conn.write_tls(&mut bytes)?;
        }
        Ok(bytes)
    }

    fn wait() -> Duration {
        Duration::from_secs(5)
    }

    #[test]
    fn a_client_hello_gives_its_server_name() -> TestResult {
        let hello = client_hello("API.example.com", Vec::new())?;
        assert_eq!(
            classify(&hello)?,
            Some(Head::Tls {
                server_name: Some("api.example.com".into())
            })
        );
        Ok(())
    }

    #[test]
    fn part_of_a_client_hello_needs_more() -> TestResult {
        let hello = client_hello("api.example.com", Vec::new())?;
        for len in [1, 2, 3, 5, 40, hello.len() - 1] {
            assert_eq!(classify(&hello[..len])?, None, "{len} bytes");
        }
        Ok(())
    }

    #[test]
    fn a_large_client_hello_is_recognised() -> TestResult {
        let alpn = (0..40).map(|i| vec![b'a' + (i % 26) as u8; 250]).collect();
        let hello = client_hello("api.example.com", alpn)?;
        assert!(hello.len() > 8192, "{}", hello.len());
        assert!(matches!(
            classify(&hello)?,
            Some(Head::Tls { server_name: Some(name) }) if name == "api.example.com"
        ));
        Ok(())
    }

    #[test]
    fn a_broken_client_hello_is_malformed() -> TestResult {
        let mut hello = client_hello("api.example.com", Vec::new())?;
        // The handshake message type: ServerHello instead of ClientHello.
        hello[5] = 2;
        assert!(matches!(
            classify(&hello),
            Err(SniffError::Malformed { .. })
        ));
        Ok(())
    }

    #[tokio::test]
    async fn a_client_hello_in_two_reads_is_recognised_and_kept() -> TestResult {
        let hello = client_hello("api.example.com", Vec::new())?;
        let (mut guest, mut host) = tokio::io::duplex(64 * 1024);
        let (first, second) = hello.split_at(hello.len() / 2);
        let (first, second) = (first.to_vec(), second.to_vec());
        let writer = tokio::spawn(async move {
            guest.write_all(&first).await?;
            tokio::time::sleep(Duration::from_millis(20)).await;
            guest.write_all(&second).await?;
            Ok::<_, io::Error>(guest)
        });
        let mut buf = Vec::new();
        let head = read_head(&mut host, &mut buf, wait(), wait()).await?;
        assert_eq!(
            head,
            Head::Tls {
                server_name: Some("api.example.com".into())
            }
        );
        assert_eq!(buf, hello);
        drop(writer.await??);
        Ok(())
    }

    #[test]
    fn http_gives_method_target_and_host_without_port() -> TestResult {
        let request =
            b"GET /v1/models HTTP/1.1\r\nHost: API.Example.com:8080\r\nAccept: */*\r\n\r\n";
        assert_eq!(
            classify(request)?,
            Some(Head::Http {
                method: "GET".into(),
                target: "/v1/models".into(),
                host: Some("api.example.com".into())
            })
        );
        assert_eq!(classify(&request[..30])?, None);
        assert_eq!(classify(b"GE")?, None);
        Ok(())
    }

    #[test]
    fn absolute_form_gives_the_host_from_the_target() -> TestResult {
        let request =
            b"POST http://user@Api.example.com:8080/x?y HTTP/1.1\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(
            classify(request)?,
            Some(Head::Http {
                method: "POST".into(),
                target: "http://user@Api.example.com:8080/x?y".into(),
                host: Some("api.example.com".into())
            })
        );
        Ok(())
    }

    #[test]
    fn connect_gives_the_host_from_the_target() -> TestResult {
        let request = b"CONNECT [::1]:443 HTTP/1.1\r\n\r\n";
        assert!(matches!(
            classify(request)?,
            Some(Head::Http { host: Some(host), .. }) if host == "::1"
        ));
        Ok(())
    }

    #[test]
    fn a_target_and_host_header_that_disagree_are_malformed() {
        let request = b"GET http://evil.com/ HTTP/1.1\r\nHost: api.example.com\r\n\r\n";
        assert!(matches!(
            classify(request),
            Err(SniffError::Malformed { .. })
        ));
        let request = b"GET / HTTP/1.1\r\nHost: a.com\r\nHost: b.com\r\n\r\n";
        assert!(matches!(
            classify(request),
            Err(SniffError::Malformed { .. })
        ));
    }

    #[test]
    fn http_without_a_host_has_none() -> TestResult {
        assert!(matches!(
            classify(b"GET / HTTP/1.0\r\n\r\n")?,
            Some(Head::Http { host: None, .. })
        ));
        Ok(())
    }

    #[test]
    fn broken_http_is_malformed() {
        let request = b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n";
        assert!(matches!(
            classify(request),
            Err(SniffError::Malformed { .. })
        ));
    }

    #[test]
    fn other_protocols_are_other() -> TestResult {
        assert_eq!(classify(b"SSH-2.0-OpenSSH_9.6\r\n")?, Some(Head::Other));
        assert_eq!(
            classify(b"\x00\x00\x00\x08\x04\xd2\x16\x2f")?,
            Some(Head::Other)
        );
        assert_eq!(classify(b"\x16\x02")?, Some(Head::Other));
        assert_eq!(classify(b"GETX / HTTP/1.1\r\n")?, Some(Head::Other));
        assert_eq!(classify(b"")?, None);
        Ok(())
    }

    #[test]
    fn a_head_that_never_ends_is_too_large() {
        let mut long = b"GET / HTTP/1.1\r\nX-Long: ".to_vec();
        long.resize(MAX_HEAD_BYTES, b'a');
        assert!(matches!(classify(&long), Ok(None)));
        long.push(b'a');
        assert!(matches!(classify(&long), Err(SniffError::TooLarge)));
    }

    #[test]
    fn more_than_64_headers_is_malformed() {
        let mut request = b"GET / HTTP/1.1\r\n".to_vec();
        for _ in 0..65 {
            request.extend_from_slice(b"X-Padding: a\r\n");
        }
        request.extend_from_slice(b"\r\n");
        let result = classify(&request);
        assert!(
            matches!(&result, Err(SniffError::Malformed { what }) if what.contains("64 headers")),
            "{result:?}"
        );
    }

    #[tokio::test]
    async fn reading_stops_past_the_limit() {
        let (mut guest, mut host) = tokio::io::duplex(64 * 1024);
        let writer = tokio::spawn(async move {
            let mut long = b"GET / HTTP/1.1\r\nX-Long: ".to_vec();
            long.resize(4 * MAX_HEAD_BYTES, b'a');
            guest.write_all(&long).await
        });
        let mut buf = Vec::new();
        let result = read_head(&mut host, &mut buf, wait(), wait()).await;
        assert!(matches!(result, Err(SniffError::TooLarge)), "{result:?}");
        assert_eq!(buf.len(), MAX_HEAD_BYTES + 1);
        drop(host);
        writer.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_guest_that_sends_nothing_is_silent() -> TestResult {
        let (_guest, mut host) = tokio::io::duplex(1024);
        let mut buf = Vec::new();
        let started = Instant::now();
        let head = read_head(&mut host, &mut buf, Duration::from_secs(2), wait()).await?;
        assert_eq!(head, Head::Silent);
        assert!(started.elapsed() >= Duration::from_secs(2));
        assert!(buf.is_empty());
        Ok(())
    }

    #[tokio::test(start_paused = true)]
    async fn a_head_that_stalls_times_out() -> TestResult {
        let (mut guest, mut host) = tokio::io::duplex(1024);
        guest.write_all(b"GET / HTTP/1.1\r\nHo").await?;
        let mut buf = Vec::new();
        let result = read_head(&mut host, &mut buf, wait(), Duration::from_secs(3)).await;
        assert!(matches!(result, Err(SniffError::TimedOut)), "{result:?}");
        assert_eq!(buf, b"GET / HTTP/1.1\r\nHo");
        Ok(())
    }

    #[tokio::test]
    async fn closing_early_is_closed_or_truncated() -> TestResult {
        let (guest, mut host) = tokio::io::duplex(1024);
        drop(guest);
        let mut buf = Vec::new();
        let result = read_head(&mut host, &mut buf, wait(), wait()).await;
        assert!(matches!(result, Err(SniffError::Closed)), "{result:?}");

        let (mut guest, mut host) = tokio::io::duplex(1024);
        guest.write_all(b"GET / HT").await?;
        drop(guest);
        let result = read_head(&mut host, &mut buf, wait(), wait()).await;
        assert!(matches!(result, Err(SniffError::Truncated)), "{result:?}");
        assert_eq!(buf, b"GET / HT");
        Ok(())
    }

    #[tokio::test]
    async fn bytes_already_read_count() -> TestResult {
        let (_guest, mut host) = tokio::io::duplex(1024);
        let mut buf = b"SSH-2.0-x\r\n".to_vec();
        let head = read_head(&mut host, &mut buf, wait(), wait()).await?;
        assert_eq!(head, Head::Other);
        Ok(())
    }
}
