//! The gateway: one sandbox's network decisions. It answers the guest's DNS
//! queries and takes each guest connection from its original destination
//! to a verdict, and an allowed one to its upstream:
//!
//! 1. the destination: a fake address stands for the name the guest
//!    resolved, [`GATEWAY_ADDR`]:[`PROXY_PORT`] is the HTTP proxy (whose
//!    `CONNECT` or absolute-form request names the destination), anything
//!    else is a raw address;
//! 2. the policy: a name needs a domain rule for its port, a raw address a
//!    CIDR rule; the host resolves the name itself and refuses a restricted
//!    address (loopback, private, link-local, metadata) without a CIDR rule;
//! 3. the first bytes: a TLS ClientHello must name the allowed name, a
//!    plain HTTP request goes through the HTTP gate (Host and placeholders
//!    checked on every request); a secret-bound name's TLS is terminated
//!    with the sandbox's CA so that the secret goes into the request;
//! 4. the bytes both ways, with an idle timeout.
//!
//! Every decision goes into the audit log.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

use super::audit::{AuditLog, AuditRecord, Protocol, Refusal, Verdict};
use super::dns;
use super::fake_ip::{FakeIps, GATEWAY_ADDR};
use super::options::NetworkOptions;
use super::policy::{is_restricted, normalize_name, NetworkPolicy};
use super::prefixed::Prefixed;
use super::secrets::{
    intercept_tls, serve_http, upstream_client_config, HttpGate, HttpRefusal, SandboxCa, Secrets,
    Untrusted, Upstream,
};
use super::sniff::{read_head, Head, SniffError};
use super::splice::splice;

/// The HTTP proxy's port on [`GATEWAY_ADDR`].
pub const PROXY_PORT: u16 = 3128;
/// How long the host waits for a guest's first byte before it treats the
/// connection as one where the server speaks first.
const FIRST_BYTE_WAIT: Duration = Duration::from_millis(500);
/// How long the host gets to reach an upstream server.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// The gateway could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The secrets could not be prepared.
    #[error("preparing the sandbox's secrets")]
    Secrets(#[source] super::secrets::SecretsError),
    /// The sandbox's CA could not be made.
    #[error("making the sandbox's CA")]
    Ca(#[source] super::secrets::CaError),
    /// The upstream roots could not be loaded.
    #[error("loading the upstream roots")]
    Roots(#[source] super::secrets::UpstreamError),
}

/// One sandbox's network decisions.
#[derive(Debug)]
pub struct Gateway {
    policy: RwLock<NetworkPolicy>,
    audit: Arc<AuditLog>,
    fake: Mutex<FakeIps>,
    options: NetworkOptions,
    secrets: Secrets,
    ca: Option<SandboxCa>,
    upstream_tls: Arc<rustls::ClientConfig>,
    open: Arc<Semaphore>,
}

/// Where a guest connection is going.
#[derive(Debug, Clone)]
enum Target {
    /// A name (resolved on the host) and port.
    Named(String, u16),
    /// An address the guest gave as such.
    Raw(IpAddr, u16),
}

impl Target {
    fn port(&self) -> u16 {
        match self {
            Target::Named(_, port) | Target::Raw(_, port) => *port,
        }
    }
    fn name(&self) -> Option<String> {
        match self {
            Target::Named(name, _) => Some(name.clone()),
            Target::Raw(..) => None,
        }
    }
}

/// A decision against a connection: what to record.
#[derive(Debug)]
struct Refused {
    protocol: Protocol,
    name: Option<String>,
    addr: Option<IpAddr>,
    port: u16,
    refusal: Refusal,
}

impl Gateway {
    /// A gateway for a sandbox configured with `options`.
    pub fn new(options: NetworkOptions) -> Result<Self, GatewayError> {
        let secrets = Secrets::new(options.secrets.clone()).map_err(GatewayError::Secrets)?;
        let ca = if secrets.is_empty() {
            None
        } else {
            Some(SandboxCa::generate().map_err(GatewayError::Ca)?)
        };
        let upstream_tls =
            upstream_client_config(&options.upstream_roots).map_err(GatewayError::Roots)?;
        Ok(Self {
            policy: RwLock::new(options.policy.clone()),
            audit: Arc::new(AuditLog::default()),
            fake: Mutex::new(FakeIps::new()),
            open: Arc::new(Semaphore::new(options.max_connections)),
            options,
            secrets,
            ca,
            upstream_tls,
        })
    }

    /// The policy in force.
    pub fn policy(&self) -> NetworkPolicy {
        self.policy
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replaces the policy; connections already open stay open.
    pub fn set_policy(&self, policy: NetworkPolicy) {
        *self.policy.write().unwrap_or_else(PoisonError::into_inner) = policy;
    }

    /// The audit records kept, oldest first.
    pub fn audit(&self) -> Vec<AuditRecord> {
        self.audit.records()
    }

    /// The PEM certificate the guest must trust, when secrets are bound.
    pub fn ca_pem(&self) -> Option<String> {
        self.ca.as_ref().map(SandboxCa::cert_pem)
    }

    /// The environment every program gets: the proxy variables, the
    /// secrets' placeholders, and with a CA the usual CA variables
    /// pointing at `ca_bundle`.
    pub fn guest_env(&self, ca_bundle: Option<&str>) -> Vec<(String, String)> {
        let proxy = format!("http://{GATEWAY_ADDR}:{PROXY_PORT}");
        let mut env = Vec::new();
        for key in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
            env.push((key.to_owned(), proxy.clone()));
        }
        for key in ["NO_PROXY", "no_proxy"] {
            env.push((key.to_owned(), "localhost,127.0.0.1,::1".to_owned()));
        }
        if let Some(bundle) = ca_bundle.filter(|b| !b.is_empty()) {
            for key in airlock_proto::contract::trust::BUNDLE_VARIABLES {
                env.push((key.to_owned(), bundle.to_owned()));
            }
        }
        env.extend(self.secrets.placeholders());
        env
    }

    /// Answers one DNS query, or `None` to drop it.
    pub fn dns(&self, query: &[u8]) -> Option<Vec<u8>> {
        let policy = self.policy();
        let outcome = {
            let mut fake = self.fake.lock().unwrap_or_else(PoisonError::into_inner);
            dns::answer(query, &policy, &mut fake)
        };
        match outcome {
            Ok(outcome) => {
                let verdict = if outcome.allowed {
                    Verdict::Allowed
                } else {
                    Verdict::Refused(Refusal::NotAllowed)
                };
                self.audit
                    .record(Protocol::Dns, outcome.name, None, 53, verdict);
                Some(outcome.response)
            }
            Err(error) => {
                self.audit.record(
                    Protocol::Dns,
                    None,
                    None,
                    53,
                    Verdict::Refused(Refusal::Malformed {
                        what: error.to_string(),
                    }),
                );
                None
            }
        }
    }

    /// Takes one guest connection to its end. A refusal is recorded and
    /// returned (the guest's connection is then reset).
    pub async fn connection<S>(&self, guest: S, destination: SocketAddrV4) -> Result<(), Refusal>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let Ok(_permit) = self.open.clone().try_acquire_owned() else {
            return Err(self.refuse(Refused {
                protocol: Protocol::Tcp,
                name: None,
                addr: Some(IpAddr::V4(*destination.ip())),
                port: destination.port(),
                refusal: Refusal::TooManyConnections {
                    limit: self.options.max_connections,
                },
            }));
        };
        match self.carry(guest, destination).await {
            Ok(()) => Ok(()),
            Err(refused) => Err(self.refuse(refused)),
        }
    }

    fn refuse(&self, refused: Refused) -> Refusal {
        self.audit.record(
            refused.protocol,
            refused.name,
            refused.addr,
            refused.port,
            Verdict::Refused(refused.refusal.clone()),
        );
        refused.refusal
    }

    async fn carry<S>(&self, mut guest: S, destination: SocketAddrV4) -> Result<(), Refused>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let ip = *destination.ip();
        let port = destination.port();
        let raw = Refused {
            protocol: Protocol::Tcp,
            name: None,
            addr: Some(IpAddr::V4(ip)),
            port,
            refusal: Refusal::NotAllowed,
        };
        let mut head = Vec::new();
        let (target, protocol) = if ip == GATEWAY_ADDR {
            if port != PROXY_PORT {
                return Err(raw);
            }
            let target = self.proxy_request(&mut guest, &mut head).await?;
            (target, Protocol::Proxy)
        } else if let Some(name) = self.fake_name(ip) {
            (Target::Named(name, port), Protocol::Tcp)
        } else if FakeIps::new().contains(ip) {
            return Err(Refused {
                refusal: Refusal::Malformed {
                    what: "an address no DNS answer gave".to_owned(),
                },
                ..raw
            });
        } else {
            (Target::Raw(IpAddr::V4(ip), port), Protocol::Tcp)
        };
        let addr = self.admit(&target, protocol).await?;
        let refused = |protocol, refusal| Refused {
            protocol,
            name: target.name(),
            addr: Some(addr),
            port: target.port(),
            refusal,
        };
        if head.is_empty() {
            head = Vec::new();
            let sniffed = read_head(
                &mut guest,
                &mut head,
                FIRST_BYTE_WAIT,
                self.options.head_timeout,
            )
            .await;
            let sniffed = sniffed.map_err(|e| refused(protocol, sniff_refusal(e)))?;
            if matches!(sniffed, Head::Silent) {
                return self
                    .first_speaker(guest, head, &target, addr, protocol, &refused)
                    .await;
            }
            self.forward(guest, head, sniffed, &target, addr, protocol)
                .await
        } else {
            // A proxy's absolute-form request: the head is plain HTTP.
            let sniffed = Head::Http {
                method: String::new(),
                target: String::new(),
                host: target.name(),
            };
            self.forward(guest, head, sniffed, &target, addr, protocol)
                .await
        }
    }

    /// The destination of a request to the HTTP proxy: a `CONNECT`
    /// (answered here; the tunnel's bytes follow) or an absolute-form
    /// request (left in `head` to be forwarded).
    async fn proxy_request<S>(&self, guest: &mut S, head: &mut Vec<u8>) -> Result<Target, Refused>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let refused = |refusal| Refused {
            protocol: Protocol::Proxy,
            name: None,
            addr: None,
            port: PROXY_PORT,
            refusal,
        };
        let sniffed = read_head(
            guest,
            head,
            self.options.head_timeout,
            self.options.head_timeout,
        )
        .await
        .map_err(|e| refused(sniff_refusal(e)))?;
        let Head::Http { method, target, .. } = sniffed else {
            return Err(refused(Refusal::Malformed {
                what: "not an HTTP proxy request".to_owned(),
            }));
        };
        let malformed = || {
            refused(Refusal::Malformed {
                what: format!("proxy request target {target:?}"),
            })
        };
        if method.eq_ignore_ascii_case("CONNECT") {
            let (host, port) = split_authority(&target, None).ok_or_else(malformed)?;
            // The tunnel's bytes are what is sniffed next.
            head.clear();
            guest
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
                .map_err(|e| {
                    refused(Refusal::Upstream {
                        message: e.to_string(),
                    })
                })?;
            return Ok(target_of(host, port));
        }
        let rest = target.strip_prefix("http://").ok_or_else(malformed)?;
        let authority = rest.split('/').next().unwrap_or_default();
        let (host, port) = split_authority(authority, Some(80)).ok_or_else(malformed)?;
        Ok(target_of(host, port))
    }

    /// The name a fake address stands for.
    fn fake_name(&self, ip: Ipv4Addr) -> Option<String> {
        let mut fake = self.fake.lock().unwrap_or_else(PoisonError::into_inner);
        fake.name_of(ip).map(str::to_owned)
    }

    /// Checks `target` against the policy and returns the address to dial.
    async fn admit(&self, target: &Target, protocol: Protocol) -> Result<IpAddr, Refused> {
        let policy = self.policy();
        match target {
            Target::Raw(addr, port) => {
                if policy.allows_addr(*addr, *port) {
                    Ok(*addr)
                } else {
                    Err(Refused {
                        protocol,
                        name: None,
                        addr: Some(*addr),
                        port: *port,
                        refusal: Refusal::NotAllowed,
                    })
                }
            }
            Target::Named(name, port) => {
                let refused = |addr, refusal| Refused {
                    protocol,
                    name: Some(name.clone()),
                    addr,
                    port: *port,
                    refusal,
                };
                if !policy.allows_name(name, *port) {
                    return Err(refused(None, Refusal::NotAllowed));
                }
                let addrs = self.options.resolver.resolve(name).await.map_err(|e| {
                    refused(
                        None,
                        Refusal::Resolve {
                            message: e.to_string(),
                        },
                    )
                })?;
                let usable = addrs
                    .iter()
                    .copied()
                    .filter(IpAddr::is_ipv4)
                    .find(|addr| !is_restricted(*addr) || policy.allows_addr(*addr, *port));
                match (usable, addrs.first()) {
                    (Some(addr), _) => Ok(addr),
                    (None, Some(first)) => Err(refused(
                        Some(*first),
                        Refusal::RestrictedAddress { addr: *first },
                    )),
                    (None, None) => Err(refused(
                        None,
                        Refusal::Resolve {
                            message: "no address".to_owned(),
                        },
                    )),
                }
            }
        }
    }

    /// Checks the first bytes and carries the connection to `addr`.
    async fn forward<S>(
        &self,
        guest: S,
        head: Vec<u8>,
        sniffed: Head,
        target: &Target,
        addr: IpAddr,
        via: Protocol,
    ) -> Result<(), Refused>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let port = target.port();
        let name = target.name();
        let refused = |protocol, refusal| Refused {
            protocol,
            name: name.clone(),
            addr: Some(addr),
            port,
            refusal,
        };
        let upstream_addr = SocketAddr::new(addr, port);
        let guest = Prefixed::new(Bytes::from(head.clone()), guest);
        match (&sniffed, target) {
            (Head::Tls { server_name }, Target::Named(expected, _)) => {
                let matches = server_name
                    .as_deref()
                    .is_some_and(|sn| normalize_name(sn) == *expected);
                if !matches {
                    return Err(refused(
                        Protocol::Tls,
                        Refusal::ServerNameMismatch {
                            server_name: server_name.clone(),
                        },
                    ));
                }
                self.allowed(Protocol::Tls, &name, addr, port);
                if let (true, Some(ca)) = (self.secrets.bound_hosts_match(expected), &self.ca) {
                    let gate = self.gate(
                        expected,
                        Upstream::Tls {
                            addr: upstream_addr,
                            server_name: expected.clone(),
                            config: self.upstream_tls.clone(),
                        },
                    );
                    // Allowed and recorded: what goes wrong from here (a
                    // guest that breaks off; an unreachable upstream, which
                    // the gate answers with 502) is logged, not refused.
                    if let Err(error) = intercept_tls(guest, expected, ca, gate).await {
                        let error = crate::error_chain(&error);
                        tracing::debug!(host = %expected, %error, "intercepted connection ended");
                    }
                    return Ok(());
                }
                self.pass(guest, upstream_addr, &refused, Protocol::Tls)
                    .await
            }
            (Head::Http { .. }, Target::Named(expected, _)) => {
                self.allowed(Protocol::Http, &name, addr, port);
                let gate = self.gate(
                    expected,
                    Upstream::Plain {
                        addr: upstream_addr,
                    },
                );
                if let Err(error) = serve_http(guest, gate).await {
                    let error = crate::error_chain(&error);
                    tracing::debug!(host = %expected, %error, "HTTP connection ended");
                }
                Ok(())
            }
            _ => {
                if let Some(secret) = self.secrets.find_placeholder(&head) {
                    return Err(refused(
                        via,
                        Refusal::PlaceholderElsewhere {
                            secret: secret.to_owned(),
                        },
                    ));
                }
                let protocol = match sniffed {
                    Head::Tls { .. } => Protocol::Tls,
                    Head::Http { .. } => Protocol::Http,
                    _ => via,
                };
                self.allowed(protocol, &name, addr, port);
                self.pass(guest, upstream_addr, &refused, protocol).await
            }
        }
    }

    fn allowed(&self, protocol: Protocol, name: &Option<String>, addr: IpAddr, port: u16) {
        self.audit
            .record(protocol, name.clone(), Some(addr), port, Verdict::Allowed);
    }

    /// The HTTP gate toward `host`, recording its refusals.
    fn gate(&self, host: &str, upstream: Upstream) -> HttpGate {
        let port = upstream.addr().port();
        let audit = self.audit_sink();
        let name = host.to_owned();
        HttpGate {
            expected_host: host.to_owned(),
            secrets: self.secrets.clone(),
            upstream,
            max_header_bytes: self.options.max_header_bytes,
            header_timeout: self.options.head_timeout,
            on_refusal: Arc::new(move |refusal: HttpRefusal| {
                let refusal = match refusal {
                    HttpRefusal::HostMismatch { host } => Refusal::HostMismatch { host },
                    HttpRefusal::PlaceholderElsewhere { secret } => {
                        Refusal::PlaceholderElsewhere { secret }
                    }
                    HttpRefusal::Malformed { what } => Refusal::Malformed { what },
                };
                audit(Protocol::Http, Some(name.clone()), refusal);
            }),
            on_untrusted: self.untrusted_sink(host, port),
        }
    }

    /// A sink for TLS that failed over an untrusted certificate on a
    /// connection to `host`, recorded so that the host's user sees why.
    fn untrusted_sink(&self, host: &str, port: u16) -> Arc<dyn Fn(Untrusted) + Send + Sync> {
        let log = Arc::clone(&self.audit);
        let name = host.to_owned();
        Arc::new(move |untrusted| {
            let refusal = match untrusted {
                Untrusted::Upstream { detail } => Refusal::UpstreamUntrusted { detail },
                Untrusted::Guest { alert } => Refusal::GuestUntrusted { alert },
            };
            log.record(
                Protocol::Tls,
                Some(name.clone()),
                None,
                port,
                Verdict::Refused(refusal),
            );
        })
    }

    /// A sink for refusals found after the connection was allowed.
    fn audit_sink(&self) -> impl Fn(Protocol, Option<String>, Refusal) + Send + Sync + 'static {
        let log = Arc::clone(&self.audit);
        move |protocol, name, refusal| {
            log.record(protocol, name, None, 0, Verdict::Refused(refusal));
        }
    }

    /// Dials `addr` and carries the bytes both ways.
    async fn pass<S>(
        &self,
        guest: S,
        addr: SocketAddr,
        refused: &(dyn Fn(Protocol, Refusal) -> Refused + Sync),
        protocol: Protocol,
    ) -> Result<(), Refused>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send,
    {
        let upstream = dial(addr, refused, protocol).await?;
        self.splice_to(guest, upstream, addr).await
    }

    /// A guest that sent nothing at first: the upstream is dialed, and
    /// whoever speaks first decides. The server first: a protocol whose
    /// server speaks first (SMTP, a database), carried as it is. The guest
    /// first, however late: its first bytes are checked as any others (a
    /// TLS ClientHello must name the allowed name), so waiting does not
    /// skip a check.
    async fn first_speaker<S>(
        &self,
        mut guest: S,
        mut head: Vec<u8>,
        target: &Target,
        addr: IpAddr,
        protocol: Protocol,
        refused: &(dyn Fn(Protocol, Refusal) -> Refused + Sync),
    ) -> Result<(), Refused>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let upstream_addr = SocketAddr::new(addr, target.port());
        let upstream = dial(upstream_addr, refused, protocol).await?;
        let mut byte = [0u8; 1];
        let guest_first = tokio::select! {
            spoke = upstream.peek(&mut byte) => match spoke {
                Ok(n) if n > 0 => None,
                _ => return Ok(()),
            },
            sniffed = read_head(
                &mut guest,
                &mut head,
                self.options.idle_timeout,
                self.options.head_timeout,
            ) => Some(sniffed),
        };
        match guest_first {
            None => {
                self.allowed(protocol, &target.name(), addr, target.port());
                self.splice_to(
                    Prefixed::new(Bytes::from(head), guest),
                    upstream,
                    upstream_addr,
                )
                .await
            }
            Some(sniffed) => {
                drop(upstream);
                let sniffed = match sniffed {
                    Ok(Head::Silent) => return Ok(()),
                    Ok(sniffed) => sniffed,
                    Err(e) => return Err(refused(protocol, sniff_refusal(e))),
                };
                self.forward(guest, head, sniffed, target, addr, protocol)
                    .await
            }
        }
    }

    /// Carries the bytes both ways until both sides are done or idle.
    async fn splice_to<S>(
        &self,
        guest: S,
        upstream: TcpStream,
        addr: SocketAddr,
    ) -> Result<(), Refused>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send,
    {
        match splice(guest, upstream, self.options.idle_timeout).await {
            Ok(totals) => {
                tracing::debug!(%addr, ?totals, "connection done");
                Ok(())
            }
            Err(error) => {
                tracing::debug!(%addr, %error, "connection ended");
                Ok(())
            }
        }
    }
}

/// Dials `addr` within [`DIAL_TIMEOUT`].
async fn dial(
    addr: SocketAddr,
    refused: &(dyn Fn(Protocol, Refusal) -> Refused + Sync),
    protocol: Protocol,
) -> Result<TcpStream, Refused> {
    let upstream = tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| refused(protocol, Refusal::TimedOut))?
        .map_err(|e| {
            refused(
                protocol,
                Refusal::Upstream {
                    message: e.to_string(),
                },
            )
        })?;
    let _ = upstream.set_nodelay(true);
    Ok(upstream)
}

/// A target from a host that may be an address.
fn target_of(host: String, port: u16) -> Target {
    match host.parse::<IpAddr>() {
        Ok(addr) => Target::Raw(addr, port),
        Err(_) => Target::Named(normalize_name(&host), port),
    }
}

/// `host:port` (or `[v6]:port`), with `default` for a missing port.
fn split_authority(authority: &str, default: Option<u16>) -> Option<(String, u16)> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(port) => port.parse().ok()?,
            None => default?,
        };
        return Some((host.to_owned(), port));
    }
    match authority.rsplit_once(':') {
        Some((host, port)) => Some((host.to_owned(), port.parse().ok()?)),
        None => Some((authority.to_owned(), default?)),
    }
    .filter(|(host, port)| !host.is_empty() && *port != 0)
}

fn sniff_refusal(error: SniffError) -> Refusal {
    match error {
        SniffError::TimedOut => Refusal::TimedOut,
        other => Refusal::Malformed {
            what: other.to_string(),
        },
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::network::resolver::StaticResolver;
    use hickory_proto::op::{Message, Query};
    use hickory_proto::rr::{Name, RData, RecordType};
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    /// A keep-alive HTTP server on loopback answering every request.
    async fn keep_alive_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (mut conn, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    loop {
                        match conn.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(_) => {
                                let reply = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                                if conn.write_all(reply).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        });
        addr
    }

    fn gateway(limit: usize) -> Gateway {
        let options = NetworkOptions::new()
            .policy(
                NetworkPolicy::new()
                    .allow("plain.test".parse().unwrap())
                    .allow("127.0.0.1/32".parse().unwrap()),
            )
            .resolver(Arc::new(
                StaticResolver::new().with("plain.test", IpAddr::V4(Ipv4Addr::LOCALHOST)),
            ))
            .max_connections(limit);
        Gateway::new(options).unwrap()
    }

    /// The fake address the gateway's DNS gives `name`.
    fn resolve(gateway: &Gateway, name: &str) -> Ipv4Addr {
        let mut query = Message::new();
        query.add_query(Query::query(Name::from_ascii(name).unwrap(), RecordType::A));
        let answer = Message::from_vec(&gateway.dns(&query.to_vec().unwrap()).unwrap()).unwrap();
        match answer.answers()[0].data() {
            RData::A(a) => a.0,
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_keep_alive_client_that_closes_frees_its_connection() {
        let server = keep_alive_server().await;
        let gateway = Arc::new(gateway(1));
        let fake = resolve(&gateway, "plain.test");
        for pause in [Duration::ZERO, FIRST_BYTE_WAIT * 2] {
            let (mut guest, host_side) = tokio::io::duplex(64 << 10);
            let task = tokio::spawn({
                let gateway = Arc::clone(&gateway);
                async move {
                    gateway
                        .connection(host_side, SocketAddrV4::new(fake, server.port()))
                        .await
                }
            });
            tokio::time::sleep(pause).await;
            guest
                .write_all(b"GET / HTTP/1.1\r\nHost: plain.test\r\n\r\n")
                .await
                .unwrap();
            let mut answer = [0u8; 12];
            guest.read_exact(&mut answer).await.unwrap();
            assert_eq!(&answer, b"HTTP/1.1 200");
            // A program's close reaches the host as an end of file; the
            // host's side stays writable, as on a carried connection.
            guest.shutdown().await.unwrap();
            let ended = tokio::time::timeout(Duration::from_secs(5), task).await;
            assert!(
                ended.is_ok(),
                "the connection (after a pause of {pause:?}) is still held"
            );
        }
    }

    #[test]
    fn authorities_split_into_host_and_port() {
        assert_eq!(
            split_authority("api.test:443", None),
            Some(("api.test".to_owned(), 443))
        );
        assert_eq!(
            split_authority("api.test", Some(80)),
            Some(("api.test".to_owned(), 80))
        );
        assert_eq!(split_authority("api.test", None), None);
        assert_eq!(
            split_authority("[::1]:8443", None),
            Some(("::1".to_owned(), 8443))
        );
        assert_eq!(split_authority(":443", None), None);
        assert_eq!(split_authority("h:0", None), None);
    }
}
