//! The gateway: one sandbox's network decisions. It answers the guest's DNS
//! queries and takes each guest connection from its original destination
//! to a verdict, and an allowed one to its upstream:
//!
//! 1. the destination: a fake address stands for the name the guest
//!    resolved, [`GATEWAY_ADDR`]:[`PROXY_PORT`] is the HTTP proxy (whose
//!    `CONNECT` or absolute-form request names the destination), anything
//!    else is a raw address;
//! 2. the policy: the host itself (loopback, link-local, its own
//!    addresses) is refused first unless the sandbox's host access allows
//!    it (`super::host`); a name needs a domain rule for its port, a raw
//!    address a CIDR rule; the host resolves the name itself and refuses a restricted
//!    address (loopback, private, link-local, metadata) without a CIDR rule;
//!    the proxy decides (and dials the upstream) before it answers, so a
//!    refused `CONNECT` gets the refusal, never `200`;
//! 3. the first bytes: a TLS ClientHello must name the allowed name, a
//!    plain HTTP request goes through the HTTP gate (Host and placeholders
//!    checked on every request); a secret-bound name's TLS is terminated
//!    with the sandbox's CA so that the secret goes into the request;
//! 4. the bytes both ways, with an idle timeout.
//!
//! Every decision goes into the audit log. A refusal is answered where the
//! protocol allows (an HTTP request, to the proxy or directly, gets a
//! response that says why: [`told`]) and otherwise resets the
//! connection; either way the agent is told, for the guest's refusal log.
//!
//! Here: the gateway, its DNS answers and the path of a direct connection;
//! `proxied`: requests to the HTTP proxy; `refused`: a refusal on its way
//! to the audit log, and the answer that tells the program.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

use super::audit::{AuditLog, AuditRecord, Protocol, Refusal, Verdict};
use super::dns;
use super::fake_ip::{FakeIps, GATEWAY_ADDR};
use super::host::{host_kind, HostAccess};
use super::meter::{ByteCounts, ByteMeter};
use super::options::NetworkOptions;
use super::policy::{is_restricted, normalize_name, NetworkPolicy};
use super::prefixed::Prefixed;
use super::proxy::{Target, PROXY_PORT};
use super::secrets::{
    intercept_tls, serve_http, upstream_client_config, HttpGate, HttpRefusal, SandboxCa, Secrets,
    Untrusted, Upstream,
};
use super::sniff::{read_head, Head, SniffError};
use super::splice::splice;
use super::told::{self, Tell, Told};

mod proxied;
mod refused;
#[cfg(test)]
mod test_support;

use proxied::is_proxy;
use refused::{answer, Admitted, Refused};

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
    /// The guest's connections' bytes, each way.
    egress: Arc<ByteMeter>,
}

/// One DNS answer, and what the agent is told when the name was refused.
#[derive(Debug)]
pub(crate) struct DnsReply {
    /// The whole response for the program.
    pub response: Vec<u8>,
    /// Set when the name was refused.
    pub told: Option<Told>,
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
        Self::with_identity(options, secrets, ca)
    }

    /// A gateway with the placeholders and CA a sandbox's guest already
    /// holds (an adopted sandbox's; `options.secrets` is not read).
    pub fn with_identity(
        options: NetworkOptions,
        secrets: Secrets,
        ca: Option<SandboxCa>,
    ) -> Result<Self, GatewayError> {
        let upstream_tls =
            upstream_client_config(&options.upstream_roots).map_err(GatewayError::Roots)?;
        Ok(Self {
            policy: RwLock::new(options.policy.clone()),
            audit: Arc::new(match &options.audit_dir {
                Some(dir) => AuditLog::kept_in(dir),
                None => AuditLog::default(),
            }),
            fake: Mutex::new(FakeIps::new()),
            open: Arc::new(Semaphore::new(options.max_connections)),
            egress: Arc::default(),
            options,
            secrets,
            ca,
            upstream_tls,
        })
    }

    /// The bytes the guest's connections carried so far, each way.
    pub fn egress(&self) -> ByteCounts {
        self.egress.counts()
    }

    /// The meter the guest's carried connections count on.
    pub(crate) fn egress_meter(&self) -> Arc<ByteMeter> {
        Arc::clone(&self.egress)
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

    /// The audit records after sequence number `after`, oldest first.
    pub fn audit_since(&self, after: u64) -> Vec<AuditRecord> {
        self.audit.since(after)
    }

    /// Records a decision made outside the gateway (ingress).
    pub fn record(&self, protocol: Protocol, name: Option<String>, port: u16, verdict: Verdict) {
        self.audit.record(protocol, name, None, port, verdict);
    }

    /// The options it was made with.
    pub fn options(&self) -> &NetworkOptions {
        &self.options
    }

    /// The secrets with their placeholders.
    pub fn secrets(&self) -> &Secrets {
        &self.secrets
    }

    /// The sandbox's CA, when secrets are bound.
    pub fn ca(&self) -> Option<&SandboxCa> {
        self.ca.as_ref()
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
    pub(crate) fn dns(&self, query: &[u8]) -> Option<DnsReply> {
        let policy = self.policy();
        let outcome = {
            let mut fake = self.fake.lock().unwrap_or_else(PoisonError::into_inner);
            dns::answer(query, &policy, &mut fake)
        };
        match outcome {
            Ok(outcome) => {
                let (verdict, told) = if outcome.allowed {
                    (Verdict::Allowed, None)
                } else {
                    let name = outcome.name.as_deref().unwrap_or("the name asked for");
                    let told = Told {
                        answer: Some("NXDOMAIN".to_owned()),
                        reason: format!("no rule allows {name}"),
                    };
                    (Verdict::Refused(Refusal::NotAllowed), Some(told))
                };
                self.audit
                    .record(Protocol::Dns, outcome.name, None, 53, verdict);
                Some(DnsReply {
                    response: outcome.response,
                    told,
                })
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

    /// Takes one guest connection to its end. A refusal is recorded; one
    /// the program was answered about (an HTTP response) goes to `tell`,
    /// and one that resets the program's connection is returned.
    pub(crate) async fn connection<S>(
        &self,
        guest: S,
        destination: SocketAddrV4,
        tell: &Tell,
    ) -> Result<(), Told>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let outcome = match self.open.clone().try_acquire_owned() {
            Ok(_permit) => self.carry(guest, destination, tell).await,
            Err(_) => Err(self.over_limit(guest, destination, tell).await),
        };
        let Err(refused) = outcome else {
            return Ok(());
        };
        let reason = told::sentence(&refused.refusal, &refused.destination());
        self.audit.record(
            refused.protocol,
            refused.name,
            refused.addr,
            refused.port,
            Verdict::Refused(refused.refusal),
        );
        match refused.answered {
            // Told already, before the answer went out.
            Some(_) => Ok(()),
            None => Err(Told::reset(reason)),
        }
    }

    async fn carry<S>(
        &self,
        mut guest: S,
        destination: SocketAddrV4,
        tell: &Tell,
    ) -> Result<(), Refused>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        if is_proxy(destination) {
            return self.proxied(guest, tell).await;
        }
        let ip = *destination.ip();
        let raw = Target::Raw(IpAddr::V4(ip), destination.port());
        let target = if ip == GATEWAY_ADDR {
            return Err(self
                .refuse_direct(
                    guest,
                    Refused::new(Protocol::Tcp, &raw, None, Refusal::NotAllowed),
                    tell,
                )
                .await);
        } else if let Some(name) = self.fake_name(ip) {
            Target::Named(name, destination.port())
        } else if FakeIps::new().contains(ip) {
            let refusal = Refusal::Malformed {
                what: "an address no DNS answer gave".to_owned(),
            };
            let refused = Refused::new(Protocol::Tcp, &raw, None, refusal);
            return Err(self.refuse_direct(guest, refused, tell).await);
        } else {
            raw
        };
        let admitted = match self.admit(&target, Protocol::Tcp).await {
            Ok(addr) => Admitted {
                target,
                addr,
                via: Protocol::Tcp,
            },
            Err(refused) => return Err(self.refuse_direct(guest, refused, tell).await),
        };
        let mut head = Vec::new();
        let sniffed = read_head(
            &mut guest,
            &mut head,
            FIRST_BYTE_WAIT,
            self.options.head_timeout,
        )
        .await
        .map_err(|e| admitted.refused(Protocol::Tcp, sniff_refusal(e)))?;
        if matches!(sniffed, Head::Silent) {
            return self.first_speaker(guest, head, &admitted, None, tell).await;
        }
        self.forward(guest, head, sniffed, &admitted, None, tell)
            .await
    }

    /// Whether a connection to `name` is served by terminating its TLS
    /// (a secret is bound to it).
    fn intercepts(&self, name: &str) -> bool {
        self.ca.is_some() && self.secrets.bound_hosts_match(name)
    }

    /// The name a fake address stands for.
    fn fake_name(&self, ip: Ipv4Addr) -> Option<String> {
        let mut fake = self.fake.lock().unwrap_or_else(PoisonError::into_inner);
        fake.name_of(ip).map(str::to_owned)
    }

    /// Checks `target` against the policy and returns the address to dial.
    async fn admit(&self, target: &Target, protocol: Protocol) -> Result<IpAddr, Refused> {
        let policy = self.policy();
        let refused = |addr, refusal| Refused::new(protocol, target, addr, refusal);
        // The host itself is refused before any rule is read: no rule
        // reaches it unless the sandbox's host access is allowed.
        let host_kind = |addr: IpAddr| match self.options.host_access {
            HostAccess::Allowed => None,
            HostAccess::Denied => host_kind(addr),
        };
        match target {
            Target::Raw(addr, port) => {
                if let Some(kind) = host_kind(*addr) {
                    return Err(refused(None, Refusal::HostAddress { addr: *addr, kind }));
                }
                if policy.allows_addr(*addr, *port) {
                    Ok(*addr)
                } else {
                    Err(refused(None, Refusal::NotAllowed))
                }
            }
            Target::Named(name, port) => {
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
                    .filter(|addr| host_kind(*addr).is_none())
                    .find(|addr| !is_restricted(*addr) || policy.allows_addr(*addr, *port));
                // Refused for the host when it was among the answers.
                let host = addrs
                    .iter()
                    .find_map(|addr| Some((*addr, host_kind(*addr)?)));
                match (usable, addrs.first(), host) {
                    (Some(addr), _, _) => Ok(addr),
                    (None, _, Some((addr, kind))) => {
                        Err(refused(Some(addr), Refusal::HostAddress { addr, kind }))
                    }
                    (None, Some(first), None) => Err(refused(
                        Some(*first),
                        Refusal::RestrictedAddress { addr: *first },
                    )),
                    (None, None, None) => Err(refused(
                        None,
                        Refusal::Resolve {
                            message: "no address".to_owned(),
                        },
                    )),
                }
            }
        }
    }

    /// Checks the first bytes and carries the connection to its upstream
    /// (`upstream`, when it was dialed already).
    async fn forward<S>(
        &self,
        guest: S,
        head: Vec<u8>,
        sniffed: Head,
        admitted: &Admitted,
        upstream: Option<TcpStream>,
        tell: &Tell,
    ) -> Result<(), Refused>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let name = admitted.target.name();
        let (addr, port) = (admitted.addr, admitted.target.port());
        let upstream_addr = admitted.upstream_addr();
        let mut guest = Prefixed::new(Bytes::from(head.clone()), guest);
        match (&sniffed, &admitted.target) {
            (Head::Tls { server_name }, Target::Named(expected, _)) => {
                let matches = server_name
                    .as_deref()
                    .is_some_and(|sn| normalize_name(sn) == *expected);
                if !matches {
                    return Err(admitted.refused(
                        Protocol::Tls,
                        Refusal::ServerNameMismatch {
                            server_name: server_name.clone(),
                        },
                    ));
                }
                self.allowed(Protocol::Tls, &name, addr, port);
                if let (true, Some(ca)) = (self.intercepts(expected), &self.ca) {
                    let gate = self.gate(
                        expected,
                        Upstream::Tls {
                            addr: upstream_addr,
                            server_name: expected.clone(),
                            config: self.upstream_tls.clone(),
                        },
                        tell,
                    );
                    // Allowed and recorded: what goes wrong from here (a
                    // guest that breaks off; an unreachable upstream, which
                    // the gate answers with 502) is logged, not refused.
                    if let Err(error) = intercept_tls(guest, expected, ca, gate).await {
                        let error = airlock_report::chain(&error);
                        tracing::debug!(host = %expected, %error, "intercepted connection ended");
                    }
                    return Ok(());
                }
                self.pass(guest, admitted, Protocol::Tls, upstream).await
            }
            (Head::Http { .. }, Target::Named(expected, _)) => {
                self.allowed(Protocol::Http, &name, addr, port);
                let gate = self.gate(
                    expected,
                    Upstream::Plain {
                        addr: upstream_addr,
                    },
                    tell,
                );
                if let Err(error) = serve_http(guest, gate).await {
                    let error = airlock_report::chain(&error);
                    tracing::debug!(host = %expected, %error, "HTTP connection ended");
                }
                Ok(())
            }
            _ => {
                if let Some(secret) = self.secrets.find_placeholder(&head) {
                    let refused = admitted.refused(
                        admitted.via,
                        Refusal::PlaceholderElsewhere {
                            secret: secret.to_owned(),
                        },
                    );
                    return Err(match &sniffed {
                        Head::Http { method, .. } => {
                            let head_only = method.eq_ignore_ascii_case("HEAD");
                            answer(&mut guest, refused, head_only, tell).await
                        }
                        _ => refused,
                    });
                }
                let protocol = match sniffed {
                    Head::Tls { .. } => Protocol::Tls,
                    Head::Http { .. } => Protocol::Http,
                    _ => admitted.via,
                };
                self.allowed(protocol, &name, addr, port);
                self.pass(guest, admitted, protocol, upstream).await
            }
        }
    }

    fn allowed(&self, protocol: Protocol, name: &Option<String>, addr: IpAddr, port: u16) {
        self.audit
            .record(protocol, name.clone(), Some(addr), port, Verdict::Allowed);
    }

    /// The HTTP gate toward `host`, recording its refusals and telling the
    /// agent of them.
    fn gate(&self, host: &str, upstream: Upstream, tell: &Tell) -> HttpGate {
        let on_untrusted = self.untrusted_sink(host, upstream.addr().port(), tell);
        let log = Arc::clone(&self.audit);
        let name = host.to_owned();
        let destination = format!("{host}:{}", upstream.addr().port());
        let tell = Arc::clone(tell);
        HttpGate {
            expected_host: host.to_owned(),
            secrets: self.secrets.clone(),
            upstream,
            max_header_bytes: self.options.max_header_bytes,
            header_timeout: self.options.head_timeout,
            on_refusal: Arc::new(move |refusal: HttpRefusal| {
                let status = refusal.status();
                let refusal = Refusal::from(refusal);
                tell(Told::http(status, told::sentence(&refusal, &destination)));
                log.record(
                    Protocol::Http,
                    Some(name.clone()),
                    None,
                    0,
                    Verdict::Refused(refusal),
                );
            }),
            on_untrusted,
        }
    }

    /// A sink for TLS that failed over an untrusted certificate on a
    /// connection to `host`: recorded so that the host's user sees why,
    /// and told to the agent for the guest's refusal log.
    fn untrusted_sink(
        &self,
        host: &str,
        port: u16,
        tell: &Tell,
    ) -> Arc<dyn Fn(Untrusted) + Send + Sync> {
        let log = Arc::clone(&self.audit);
        let name = host.to_owned();
        let destination = format!("{host}:{port}");
        let tell = Arc::clone(tell);
        Arc::new(move |untrusted| {
            let (refusal, answered) = match untrusted {
                Untrusted::Upstream { detail } => (Refusal::UpstreamUntrusted { detail }, true),
                Untrusted::Guest { alert } => (Refusal::GuestUntrusted { alert }, false),
            };
            let reason = told::sentence(&refusal, &destination);
            tell(match answered {
                true => Told::http(told::status(&refusal), reason),
                false => Told::reset(reason),
            });
            log.record(
                Protocol::Tls,
                Some(name.clone()),
                None,
                port,
                Verdict::Refused(refusal),
            );
        })
    }

    /// Dials the upstream (unless `upstream` is already open) and carries
    /// the bytes both ways.
    async fn pass<S>(
        &self,
        guest: S,
        admitted: &Admitted,
        protocol: Protocol,
        upstream: Option<TcpStream>,
    ) -> Result<(), Refused>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send,
    {
        let upstream = match upstream {
            Some(upstream) => upstream,
            None => dial(admitted.upstream_addr())
                .await
                .map_err(|refusal| admitted.refused(protocol, refusal))?,
        };
        self.splice_to(guest, upstream, admitted.upstream_addr())
            .await
    }

    /// A guest that sent nothing at first: the upstream is dialed (unless
    /// `upstream` is already open), and whoever speaks first decides. The
    /// server first: a protocol whose server speaks first (SMTP, a
    /// database), carried as it is. The guest first, however late: its
    /// first bytes are checked as any others (a TLS ClientHello must name
    /// the allowed name), so waiting does not skip a check.
    async fn first_speaker<S>(
        &self,
        mut guest: S,
        mut head: Vec<u8>,
        admitted: &Admitted,
        upstream: Option<TcpStream>,
        tell: &Tell,
    ) -> Result<(), Refused>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let protocol = admitted.via;
        let upstream_addr = admitted.upstream_addr();
        let upstream = match upstream {
            Some(upstream) => upstream,
            None => dial(upstream_addr)
                .await
                .map_err(|refusal| admitted.refused(protocol, refusal))?,
        };
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
                let name = admitted.target.name();
                self.allowed(protocol, &name, admitted.addr, admitted.target.port());
                self.splice_to(
                    Prefixed::new(Bytes::from(head), guest),
                    upstream,
                    upstream_addr,
                )
                .await
            }
            Some(sniffed) => {
                let sniffed = match sniffed {
                    Ok(Head::Silent) => return Ok(()),
                    Ok(sniffed) => sniffed,
                    Err(e) => return Err(admitted.refused(protocol, sniff_refusal(e))),
                };
                self.forward(guest, head, sniffed, admitted, Some(upstream), tell)
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
async fn dial(addr: SocketAddr) -> Result<TcpStream, Refusal> {
    let upstream = tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| Refusal::TimedOut)?
        .map_err(|e| Refusal::Upstream {
            message: e.to_string(),
        })?;
    let _ = upstream.set_nodelay(true);
    Ok(upstream)
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
    use hickory_proto::op::{Message, Query};
    use hickory_proto::rr::{Name, RecordType};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::test_support::*;
    use super::*;

    #[tokio::test]
    async fn a_keep_alive_client_that_closes_frees_its_connection() {
        let server = keep_alive_server().await;
        let gateway = Arc::new(gateway(1));
        let fake = resolve(&gateway, "plain.test");
        let (tell, _) = collector();
        for pause in [Duration::ZERO, FIRST_BYTE_WAIT * 2] {
            let (mut guest, host_side) = tokio::io::duplex(64 << 10);
            let task = tokio::spawn({
                let (gateway, tell) = (Arc::clone(&gateway), Arc::clone(&tell));
                async move {
                    gateway
                        .connection(host_side, SocketAddrV4::new(fake, server.port()), &tell)
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

    #[tokio::test]
    async fn a_direct_refusal_answers_http_and_resets_anything_else() {
        let gateway = Arc::new(gateway(4));
        let refused = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 7), 80);
        let (read, ended, told) = exchange(
            &gateway,
            refused,
            b"GET / HTTP/1.1\r\nHost: 192.0.2.7\r\n\r\n",
        )
        .await;
        assert!(
            read.starts_with("HTTP/1.1 403 airlock: no rule allows 192.0.2.7:80\r\n"),
            "{read}"
        );
        assert_eq!(ended, Ok(()));
        assert_eq!(told.len(), 1);

        let ssh = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 7), 22);
        let (read, ended, told) = exchange(&gateway, ssh, b"SSH-2.0-OpenSSH_9.2\r\n").await;
        assert_eq!(read, "");
        assert_eq!(
            ended,
            Err(Told::reset("no rule allows 192.0.2.7:22".into()))
        );
        assert!(told.is_empty());
    }

    #[tokio::test]
    async fn a_misdirected_request_on_a_direct_connection_is_answered_with_why() {
        let server = keep_alive_server().await;
        let gateway = Arc::new(gateway(4));
        let fake = resolve(&gateway, "plain.test");
        let destination = SocketAddrV4::new(fake, server.port());
        let (read, ended, told) = exchange(
            &gateway,
            destination,
            b"GET / HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n",
        )
        .await;
        let why = format!(
            "HTTP host \"evil.example\" is not plain.test:{}, the name this connection was allowed for",
            server.port()
        );
        assert!(
            read.starts_with("HTTP/1.1 421 airlock: HTTP host \"evil.example\" is not plain.test:"),
            "{read}"
        );
        assert!(read.contains(&why), "{read}");
        assert_eq!(ended, Ok(()));
        assert_eq!(told.len(), 1, "{told:?}");
        assert!(told[0].reason.starts_with(&why), "{told:?}");
    }

    #[tokio::test]
    async fn without_host_access_no_rule_reaches_the_host() {
        let server = keep_alive_server().await;
        let policy = NetworkPolicy::new()
            .allow("0.0.0.0/0".parse().unwrap())
            .allow("localhost".parse().unwrap());
        let denied = Arc::new(gateway_with(policy.clone(), HostAccess::Denied, 8));
        let request = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        // A raw loopback address, through the proxy too, and a name that
        // resolves to loopback: each refused for the host, and recorded.
        let loopback = SocketAddrV4::new(Ipv4Addr::LOCALHOST, server.port());
        let (read, _, _) = exchange(&denied, loopback, request).await;
        assert!(
            read.starts_with("HTTP/1.1 403 airlock: 127.0.0.1:"),
            "{read}"
        );
        assert!(read.contains("is the host's loopback"), "{read}");
        let connect = format!(
            "CONNECT 127.0.0.1:{0} HTTP/1.1\r\nHost: 127.0.0.1:{0}\r\n\r\n",
            server.port()
        );
        let (read, _, _) = exchange(&denied, proxy(), connect.as_bytes()).await;
        assert!(read.starts_with("HTTP/1.1 403 "), "{read}");
        assert!(!read.contains(" 200 "), "{read}");
        let fake = resolve(&denied, "localhost");
        let (read, _, _) = exchange(
            &denied,
            SocketAddrV4::new(fake, server.port()),
            b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n",
        )
        .await;
        assert!(read.contains("is the host's loopback"), "{read}");
        let refusals: Vec<_> = denied
            .audit()
            .into_iter()
            .filter_map(|record| record.verdict.refusal().cloned())
            .collect();
        let host = |refusal: &Refusal| matches!(refusal, Refusal::HostAddress { .. });
        assert_eq!(
            refusals.iter().filter(|r| host(r)).count(),
            3,
            "{refusals:?}"
        );
        assert!(!denied
            .audit()
            .iter()
            .any(|r| r.verdict.is_allowed() && r.port == server.port()));

        // The same rules with host access allowed reach the server (which
        // keeps the connection open: its first answer is enough).
        let allowed = Arc::new(gateway_with(policy, HostAccess::Allowed, 8));
        let (tell, _) = collector();
        let (mut guest, host_side) = tokio::io::duplex(64 << 10);
        tokio::spawn(async move { allowed.connection(host_side, loopback, &tell).await });
        guest.write_all(request).await.unwrap();
        let mut answer = [0u8; 12];
        guest.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"HTTP/1.1 200");
    }

    #[test]
    fn a_refused_name_tells_nxdomain() {
        let gateway = gateway(4);
        let mut query = Message::new();
        query.add_query(Query::query(
            Name::from_ascii("evil.example.").unwrap(),
            RecordType::A,
        ));
        let reply = gateway.dns(&query.to_vec().unwrap()).unwrap();
        assert_eq!(
            reply.told,
            Some(Told {
                answer: Some("NXDOMAIN".into()),
                reason: "no rule allows evil.example".into()
            })
        );
        let mut query = Message::new();
        query.add_query(Query::query(
            Name::from_ascii("plain.test.").unwrap(),
            RecordType::A,
        ));
        assert_eq!(gateway.dns(&query.to_vec().unwrap()).unwrap().told, None);
    }
}
