//! The audit log: a bounded record of every connection and DNS query the
//! guest made, allowed or refused, and why.
//!
//! The network code calls [`AuditLog::record`] once per decision; an embedder
//! reads [`AuditLog::records`] (or, to follow along, [`AuditLog::since`] the
//! last sequence number it saw). The log keeps the newest
//! [`DEFAULT_AUDIT_CAPACITY`] records (or the capacity it was made with) and
//! counts the ones pushed out in [`AuditLog::dropped`]. Each record is also
//! a `tracing` event: debug for allowed, info for refused.
//!
//! An adoptable sandbox's log is also kept on disk, in its state directory
//! (`disk`: appended as records are made, bounded, read back by the
//! process that adopts the sandbox, which goes on numbering from the
//! last).

mod disk;

use std::collections::VecDeque;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use disk::{AuditFile, DEFAULT_AUDIT_FILE_CAP};

/// How many records an [`AuditLog`] keeps unless told otherwise.
pub const DEFAULT_AUDIT_CAPACITY: usize = 4096;

/// What kind of traffic a record is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Protocol {
    /// A DNS query to the guest's resolver.
    Dns,
    /// A TCP connection whose first bytes were neither TLS nor HTTP.
    Tcp,
    /// A TLS connection (judged by its ClientHello's server name).
    Tls,
    /// A plain HTTP connection (judged by its Host).
    Http,
    /// A request to the HTTP proxy (a `CONNECT` or an absolute-form request).
    Proxy,
    /// Ingress: a connection from outside into a guest port (the name is
    /// the client's address, the port the guest's).
    Ingress,
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::Dns => "dns",
            Protocol::Tcp => "tcp",
            Protocol::Tls => "tls",
            Protocol::Http => "http",
            Protocol::Proxy => "proxy",
            Protocol::Ingress => "ingress",
        })
    }
}

impl Protocol {
    /// Every protocol, in the order of [`refusals_in_process`]' counts.
    pub const ALL: [Protocol; 6] = [
        Protocol::Dns,
        Protocol::Tcp,
        Protocol::Tls,
        Protocol::Http,
        Protocol::Proxy,
        Protocol::Ingress,
    ];

    fn index(self) -> usize {
        match self {
            Protocol::Dns => 0,
            Protocol::Tcp => 1,
            Protocol::Tls => 2,
            Protocol::Http => 3,
            Protocol::Proxy => 4,
            Protocol::Ingress => 5,
        }
    }
}

/// Refusals recorded by every [`AuditLog`] of this process, by protocol
/// (the index of [`Protocol::ALL`]): a counter that only grows, whatever
/// the logs drop and however many sandboxes come and go.
static REFUSED: [AtomicU64; Protocol::ALL.len()] = [const { AtomicU64::new(0) }; 6];

/// How many refusals of `protocol` every [`AuditLog`] of this process has
/// recorded since it started (a server's metrics read it).
pub fn refusals_in_process(protocol: Protocol) -> u64 {
    REFUSED[protocol.index()].load(Ordering::Relaxed)
}

/// Why a connection or query was refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Refusal {
    /// No rule allows the destination.
    NotAllowed,
    /// The allowed name resolved to a restricted address (loopback, private,
    /// metadata ...) and no network rule allows that address.
    RestrictedAddress {
        /// The restricted address.
        addr: IpAddr,
    },
    /// The destination is the host itself (loopback, link-local, the
    /// unspecified address or one of the host's own addresses) and the
    /// sandbox's host access is denied, whatever the rules say.
    HostAddress {
        /// The host's address.
        addr: IpAddr,
        /// What it is of the host's.
        kind: super::host::HostKind,
    },
    /// The TLS ClientHello named another server than the name connected to
    /// (or none).
    ServerNameMismatch {
        /// The server name in the ClientHello, if it had one.
        server_name: Option<String>,
    },
    /// The HTTP request's Host is not the name connected to (or is missing).
    HostMismatch {
        /// The request's host, if it had one.
        host: Option<String>,
    },
    /// A secret's placeholder was sent towards a host the secret is not for.
    PlaceholderElsewhere {
        /// The secret's name.
        secret: String,
    },
    /// The sandbox already had as many connections open as it may.
    TooManyConnections {
        /// The limit.
        limit: usize,
    },
    /// What the guest sent could not be understood.
    Malformed {
        /// What it was, e.g. "dns query" or "tls client hello".
        what: String,
    },
    /// The guest or the upstream took too long.
    TimedOut,
    /// The host could not resolve the allowed name.
    Resolve {
        /// The resolver's error.
        message: String,
    },
    /// The upstream could not be reached or failed.
    Upstream {
        /// The error.
        message: String,
    },
    /// The upstream server's certificate (of a secret-bound host, whose
    /// TLS the host ends and begins again) is not from a CA the host
    /// trusts: a private CA, or a TLS-inspecting proxy on the host's way
    /// out. The guest got 502.
    UpstreamUntrusted {
        /// What rustls said.
        detail: String,
    },
    /// Ingress: the request carried no traffic token for a private port.
    NoToken,
    /// Ingress: the request's traffic token is not the sandbox's.
    WrongToken,
    /// Ingress: nothing listens on the guest port.
    PortClosed,
    /// The guest's program refused the certificate the host presented for
    /// a secret-bound host (issued by the sandbox's CA): it reads roots of
    /// its own instead of the system store.
    GuestUntrusted {
        /// The TLS alert it sent.
        alert: String,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NotAllowed => f.write_str("no rule allows it"),
            Refusal::RestrictedAddress { addr } => write!(
                f,
                "resolves to restricted address {addr} and no CIDR rule allows it"
            ),
            Refusal::HostAddress { addr, kind } => write!(
                f,
                "{addr} is {kind}; this sandbox may not reach the host (only the machine's owner \
                 may allow it)"
            ),
            Refusal::ServerNameMismatch {
                server_name: Some(name),
            } => write!(f, "TLS server name {name:?} is not the allowed name"),
            Refusal::ServerNameMismatch { server_name: None } => {
                f.write_str("TLS hello names no server (no SNI)")
            }
            Refusal::HostMismatch { host: Some(host) } => {
                write!(f, "HTTP host {host:?} is not the allowed name")
            }
            Refusal::HostMismatch { host: None } => f.write_str("HTTP request names no host"),
            Refusal::PlaceholderElsewhere { secret } => write!(
                f,
                "placeholder for secret {secret:?} sent to a host it is not for"
            ),
            Refusal::TooManyConnections { limit } => {
                write!(f, "already {limit} connections open (the limit)")
            }
            Refusal::Malformed { what } => write!(f, "malformed {what}"),
            Refusal::TimedOut => f.write_str("timed out"),
            Refusal::NoToken => f.write_str("no traffic token for a private port"),
            Refusal::WrongToken => f.write_str("the traffic token is not this sandbox's"),
            Refusal::PortClosed => f.write_str("nothing listens on the guest port"),
            Refusal::Resolve { message } => write!(f, "name did not resolve: {message}"),
            Refusal::Upstream { message } => write!(f, "upstream failed: {message}"),
            Refusal::UpstreamUntrusted { detail } => write!(
                f,
                "the server's certificate is not from a CA the host trusts ({detail}); \
                 give the sandbox that CA (--ca-cert FILE, or --trust-host-roots behind a \
                 TLS-inspecting proxy)"
            ),
            Refusal::GuestUntrusted { alert } => write!(
                f,
                "the guest's program refused the sandbox's certificate ({alert}): it does not \
                 read the system store; point it at $SSL_CERT_FILE"
            ),
        }
    }
}

/// The decision on one connection or query.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// It went ahead.
    Allowed,
    /// It was refused, for this reason.
    Refused(Refusal),
}

impl Verdict {
    /// Whether it went ahead.
    pub fn is_allowed(&self) -> bool {
        matches!(self, Verdict::Allowed)
    }

    /// The reason it was refused, if it was.
    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            Verdict::Allowed => None,
            Verdict::Refused(refusal) => Some(refusal),
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Allowed => f.write_str("allowed"),
            Verdict::Refused(refusal) => write!(f, "refused: {refusal}"),
        }
    }
}

/// One decision, as the log keeps it.
#[derive(Clone, Debug)]
pub struct AuditRecord {
    /// Position in the log, from 1, increasing by one per record.
    pub seq: u64,
    /// When it was recorded.
    pub at: SystemTime,
    /// What kind of traffic it was.
    pub protocol: Protocol,
    /// The destination name the guest used (from its DNS query, the TLS
    /// server name, the HTTP Host or the proxy request), if known.
    pub name: Option<String>,
    /// The address dialed, or the raw destination the guest asked for.
    pub addr: Option<IpAddr>,
    /// The destination port.
    pub port: u16,
    /// The decision.
    pub verdict: Verdict,
}

impl AuditRecord {
    /// The destination as one word: `name:port`, `addr:port`, or, with both,
    /// `name:port (addr)`.
    pub fn destination(&self) -> String {
        match (&self.name, self.addr) {
            (Some(name), Some(addr)) => format!("{name}:{} ({addr})", self.port),
            (Some(name), None) => format!("{name}:{}", self.port),
            (None, Some(addr)) => SocketAddr::new(addr, self.port).to_string(),
            (None, None) => format!("?:{}", self.port),
        }
    }
}

impl fmt::Display for AuditRecord {
    /// `#SEQ SECONDS.MILLIS PROTOCOL DESTINATION VERDICT`, with the time in
    /// seconds since the Unix epoch.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let since = self.at.duration_since(UNIX_EPOCH).unwrap_or_default();
        write!(
            f,
            "#{} {}.{:03} {} {} {}",
            self.seq,
            since.as_secs(),
            since.subsec_millis(),
            self.protocol,
            self.destination(),
            self.verdict
        )
    }
}

/// The bounded log of decisions, shared by every connection of a sandbox.
#[derive(Debug)]
pub struct AuditLog {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    capacity: usize,
    next_seq: u64,
    dropped: u64,
    records: VecDeque<AuditRecord>,
    /// Where records are appended as well, for an adoptable sandbox.
    disk: Option<AuditFile>,
}

const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<AuditLog>();
};

impl Default for AuditLog {
    fn default() -> Self {
        Self::new(DEFAULT_AUDIT_CAPACITY)
    }
}

impl AuditLog {
    /// A log keeping the newest `capacity` records (none at all with 0,
    /// though records still get numbers and count as dropped).
    pub fn new(capacity: usize) -> Self {
        Self {
            inner: Mutex::new(Inner {
                capacity,
                next_seq: 1,
                dropped: 0,
                records: VecDeque::with_capacity(capacity.min(DEFAULT_AUDIT_CAPACITY)),
                disk: None,
            }),
        }
    }

    /// A log of [`DEFAULT_AUDIT_CAPACITY`] records kept in `dir` (a
    /// sandbox's state directory) as well: the records its files hold
    /// already come first (the newest that fit), numbering goes on from
    /// the last, and every new record is appended. A file that cannot be
    /// opened is logged, and the log is kept in memory only.
    pub fn kept_in(dir: &Path) -> Self {
        Self::kept_in_with(dir, DEFAULT_AUDIT_CAPACITY, DEFAULT_AUDIT_FILE_CAP)
    }

    /// [`kept_in`](AuditLog::kept_in) with a capacity of `capacity` records
    /// and files of at most `file_cap` bytes each.
    pub fn kept_in_with(dir: &Path, capacity: usize, file_cap: u64) -> Self {
        let log = Self::new(capacity);
        let (file, records) = match AuditFile::open(dir, file_cap) {
            Ok(opened) => opened,
            Err(error) => {
                tracing::warn!(
                    dir = %dir.display(),
                    %error,
                    "cannot keep the audit log on disk; it is kept in memory only"
                );
                return log;
            }
        };
        {
            let mut inner = log.lock();
            if let Some(last) = records.last() {
                inner.next_seq = last.seq + 1;
            }
            let skip = records.len().saturating_sub(capacity);
            inner.dropped = records
                .first()
                .map_or(0, |first| first.seq.saturating_sub(1))
                + skip as u64;
            inner.records.extend(records.into_iter().skip(skip));
            inner.disk = Some(file);
        }
        log
    }

    /// Records a decision and returns its sequence number. When the log is
    /// full, its oldest record goes.
    pub fn record(
        &self,
        protocol: Protocol,
        name: Option<String>,
        addr: Option<IpAddr>,
        port: u16,
        verdict: Verdict,
    ) -> u64 {
        let mut inner = self.lock();
        let seq = inner.next_seq;
        inner.next_seq += 1;
        let record = AuditRecord {
            seq,
            at: SystemTime::now(),
            protocol,
            name,
            addr,
            port,
            verdict,
        };
        match &record.verdict {
            Verdict::Allowed => tracing::debug!(
                seq,
                %protocol,
                destination = %record.destination(),
                "network: allowed"
            ),
            Verdict::Refused(refusal) => {
                REFUSED[protocol.index()].fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                seq,
                %protocol,
                destination = %record.destination(),
                %refusal,
                "network: refused"
                )
            }
        }
        if let Some(disk) = &mut inner.disk {
            if let Err(error) = disk.append(&record) {
                tracing::warn!(
                    seq,
                    %error,
                    "cannot append to the audit file; the log is kept in memory only from here"
                );
                inner.disk = None;
            }
        }
        if inner.capacity == 0 {
            inner.dropped += 1;
            return seq;
        }
        if inner.records.len() == inner.capacity {
            inner.records.pop_front();
            inner.dropped += 1;
        }
        inner.records.push_back(record);
        seq
    }

    /// Every record kept, oldest first.
    pub fn records(&self) -> Vec<AuditRecord> {
        self.lock().records.iter().cloned().collect()
    }

    /// The records kept with a sequence number above `seq`, oldest first:
    /// `since(0)` is every record, `since(last_seen)` the new ones.
    pub fn since(&self, seq: u64) -> Vec<AuditRecord> {
        let inner = self.lock();
        // Sequence numbers increase along the deque, so skip to the first.
        let start = inner.records.partition_point(|record| record.seq <= seq);
        inner.records.range(start..).cloned().collect()
    }

    /// How many records the capacity pushed out.
    pub fn dropped(&self) -> u64 {
        self.lock().dropped
    }

    /// How many records are kept now.
    pub fn len(&self) -> usize {
        self.lock().records.len()
    }

    /// Whether no record is kept.
    pub fn is_empty(&self) -> bool {
        self.lock().records.is_empty()
    }

    /// The records are plain data, so a panic while holding the lock leaves
    /// them consistent: carry on with them.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn refused(log: &AuditLog, port: u16) -> u64 {
        log.record(
            Protocol::Tcp,
            None,
            Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            port,
            Verdict::Refused(Refusal::NotAllowed),
        )
    }

    #[test]
    fn refusals_are_counted_for_the_process_by_protocol_and_never_go_down() {
        // Other tests refuse TCP concurrently: only growth is certain.
        let proxy = refusals_in_process(Protocol::Proxy);
        let log = AuditLog::new(0);
        log.record(Protocol::Proxy, None, None, 443, Verdict::Allowed);
        assert_eq!(refusals_in_process(Protocol::Proxy), proxy);
        for _ in 0..3 {
            log.record(
                Protocol::Proxy,
                None,
                None,
                443,
                Verdict::Refused(Refusal::NotAllowed),
            );
        }
        drop(log);
        assert!(refusals_in_process(Protocol::Proxy) >= proxy + 3);
        assert_eq!(Protocol::ALL.map(Protocol::index), [0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn records_come_back_oldest_first_with_increasing_numbers() {
        let log = AuditLog::default();
        let first = log.record(
            Protocol::Dns,
            Some("example.com".into()),
            None,
            53,
            Verdict::Allowed,
        );
        let second = refused(&log, 22);
        assert!(second > first);
        let records = log.records();
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].seq, first);
        assert_eq!(records[0].protocol, Protocol::Dns);
        assert!(records[0].verdict.is_allowed());
        assert_eq!(records[1].port, 22);
        assert_eq!(records[1].verdict.refusal(), Some(&Refusal::NotAllowed));
    }

    #[test]
    fn a_full_log_drops_its_oldest_records_and_counts_them() {
        let log = AuditLog::new(3);
        for port in 1..=5 {
            refused(&log, port);
        }
        let ports: Vec<u16> = log.records().iter().map(|r| r.port).collect();
        assert_eq!(ports, [3, 4, 5]);
        assert_eq!(log.dropped(), 2);
        assert_eq!(log.len(), 3);
    }

    #[test]
    fn since_returns_only_newer_records() {
        let log = AuditLog::new(3);
        let seqs: Vec<u64> = (1..=5).map(|port| refused(&log, port)).collect();
        let newer: Vec<u64> = log.since(seqs[2]).iter().map(|r| r.seq).collect();
        assert_eq!(newer, &seqs[3..]);
        assert_eq!(log.since(0).len(), 3);
        assert!(log.since(seqs[4]).is_empty());
    }

    #[test]
    fn a_log_of_no_capacity_keeps_nothing_but_counts() {
        let log = AuditLog::new(0);
        refused(&log, 1);
        assert!(log.is_empty());
        assert_eq!(log.dropped(), 1);
    }

    #[test]
    fn a_record_prints_as_one_readable_line() {
        let record = AuditRecord {
            seq: 7,
            at: UNIX_EPOCH + std::time::Duration::from_millis(1_700_000_000_123),
            protocol: Protocol::Tls,
            name: Some("api.example.com".into()),
            addr: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            port: 443,
            verdict: Verdict::Refused(Refusal::RestrictedAddress {
                addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
            }),
        };
        assert_eq!(
            record.to_string(),
            "#7 1700000000.123 tls api.example.com:443 (127.0.0.1) refused: \
             resolves to restricted address 127.0.0.1 and no CIDR rule allows it"
        );
    }

    #[test]
    fn refusals_read_as_reasons() {
        let cases = [
            (
                Refusal::ServerNameMismatch {
                    server_name: Some("evil.com".into()),
                },
                "TLS server name \"evil.com\" is not the allowed name",
            ),
            (
                Refusal::HostMismatch { host: None },
                "HTTP request names no host",
            ),
            (
                Refusal::TooManyConnections { limit: 64 },
                "already 64 connections open (the limit)",
            ),
            (
                Refusal::Malformed {
                    what: "dns query".into(),
                },
                "malformed dns query",
            ),
        ];
        for (refusal, text) in cases {
            assert_eq!(refusal.to_string(), text);
        }
        assert_eq!(Protocol::Proxy.to_string(), "proxy");
        let v6 = AuditRecord {
            seq: 1,
            at: UNIX_EPOCH,
            protocol: Protocol::Tcp,
            name: None,
            addr: Some(IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)),
            port: 22,
            verdict: Verdict::Allowed,
        };
        assert_eq!(v6.destination(), "[::1]:22");
    }

    #[test]
    fn the_log_is_shared_between_threads() {
        let log = std::sync::Arc::new(AuditLog::new(1000));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let log = log.clone();
                std::thread::spawn(move || {
                    for port in 0..100 {
                        refused(&log, port);
                    }
                })
            })
            .collect();
        for thread in threads {
            assert!(thread.join().is_ok());
        }
        let seqs: Vec<u64> = log.records().iter().map(|r| r.seq).collect();
        assert_eq!(seqs, (1..=400).collect::<Vec<u64>>());
    }
}
