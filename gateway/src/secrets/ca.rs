//! The per-sandbox certificate authority that lets the host read the
//! guest's HTTPS to hosts with secrets.
//!
//! [`SandboxCa::generate`] makes a fresh ECDSA P-256 CA when a sandbox is
//! created; only its certificate ([`SandboxCa::cert_pem`]) goes into the
//! guest's trust store. Its key stays in this type: `Debug` redacts it,
//! and it dies with the value, so a CA is never reused across sandboxes.
//! The one exception is the same sandbox under a new owner: an adoptable
//! sandbox's record (0600, see the library's `adopt`) keeps the CA's parts
//! ([`SandboxCa::parts`], the one accessor that returns the key), so that
//! the process that adopts it rebuilds the very CA its guest already
//! trusts. For each host the guest reaches through the
//! proxy, `SandboxCa::server_config_for` issues a leaf certificate
//! (dNSName SAN, serverAuth) and keeps the rustls configuration for the
//! next connection.
//!
//! Validity: the CA from one hour before it was made (slack for a guest
//! clock behind the host's) to [`CA_LIFETIME`] after; leaves the same hour
//! before issue to [`LEAF_LIFETIME`] after, never past the CA, re-issued
//! once less than [`LEAF_RENEW_BEFORE`] remains.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::ServerConfig;

use super::secret::normalize_host;
use airlock_random::RandomError;

/// How long a sandbox CA is valid after it is made.
pub const CA_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);
/// How long a leaf certificate is valid after it is issued.
pub const LEAF_LIFETIME: Duration = Duration::from_secs(30 * 24 * 3600);
/// A cached leaf is re-issued once less than this remains of it.
pub const LEAF_RENEW_BEFORE: Duration = Duration::from_secs(24 * 3600);
/// How far before "now" certificates start, for a guest clock behind.
const CLOCK_SLACK: Duration = Duration::from_secs(3600);
/// At most this many hosts' configurations are kept (a wildcard binding
/// lets the guest name any number of hosts).
const MAX_CACHED_LEAVES: usize = 256;
/// The last second certificate times can express (9999-12-31T23:59:59Z).
const MAX_CERT_SECS: u64 = 253_402_300_799;
/// The only application protocol offered to the guest.
const HTTP_1_1: &[u8] = b"http/1.1";

/// Why the CA or one of its leaves could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    /// No random name could be drawn.
    #[error("cannot name the sandbox CA")]
    Random(#[from] RandomError),
    /// The system clock is outside what a certificate can express.
    #[error("the system clock is before 1970 or past 9999")]
    Clock,
    /// The CA's validity has ended.
    #[error("the sandbox CA expired; create a new sandbox")]
    Expired,
    /// The CA's key or certificate could not be made.
    #[error("cannot make the sandbox CA")]
    Generate(#[source] rcgen::Error),
    /// The host cannot be named in a certificate.
    #[error("cannot issue a certificate for {host:?}")]
    Issue {
        /// The host.
        host: String,
        /// What rcgen said.
        #[source]
        source: rcgen::Error,
    },
    /// The parts kept for an adopted sandbox do not make its CA.
    #[error("the sandbox CA kept for adoption is unusable: {0}")]
    Kept(&'static str),
    /// rustls refused the issued certificate or key.
    #[error("cannot build the TLS configuration for {host:?}")]
    Tls {
        /// The host.
        host: String,
        /// What rustls said.
        #[source]
        source: rustls::Error,
    },
}

/// A cached leaf configuration.
struct Leaf {
    config: Arc<ServerConfig>,
    renew_at: SystemTime,
}

/// A certificate authority private to one sandbox.
pub struct SandboxCa {
    id: String,
    issuer: Issuer<'static, KeyPair>,
    cert: CertificateDer<'static>,
    cert_pem: String,
    not_after: SystemTime,
    provider: Arc<CryptoProvider>,
    leaves: Mutex<HashMap<String, Leaf>>,
}

const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<SandboxCa>();
};

impl SandboxCa {
    /// A fresh CA, named `Airlock sandbox CA <8 random hex digits>`.
    pub fn generate() -> Result<Self, CaError> {
        let id = airlock_random::hex::<4>().map_err(RandomError)?;
        let now = SystemTime::now();
        let not_before = checked_time(now.checked_sub(CLOCK_SLACK))?;
        let not_after = checked_time(now.checked_add(CA_LIFETIME))?;

        let mut params = ca_params(&id);
        params.not_before = not_before.into();
        params.not_after = not_after.into();

        let key =
            KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(CaError::Generate)?;
        let cert = params.self_signed(&key).map_err(CaError::Generate)?;
        tracing::debug!(ca = %id, "sandbox CA made");
        Ok(Self::assemble(
            id,
            Issuer::new(params, key),
            cert.der().clone(),
            cert.pem(),
            not_after,
        ))
    }

    /// The CA `parts` describe (one [`parts`](SandboxCa::parts) gave):
    /// the same certificate, key and name, so that a guest trusting the
    /// certificate trusts the leaves it issues.
    pub fn from_parts(parts: &CaParts) -> Result<Self, CaError> {
        let cert = CertificateDer::from_pem_slice(parts.cert_pem.as_bytes())
            .map_err(|_| CaError::Kept("its certificate is not PEM"))?;
        let key =
            KeyPair::from_pem(&parts.key_pem).map_err(|_| CaError::Kept("its key is not PEM"))?;
        // The certificate's public key is the key's (no X.509 parser
        // needed: the raw point appears verbatim in the certificate).
        let public = key.public_key_raw();
        if public.is_empty() || !cert.windows(public.len()).any(|w| w == public) {
            return Err(CaError::Kept("its key is not its certificate's"));
        }
        Ok(Self::assemble(
            parts.id.clone(),
            Issuer::new(ca_params(&parts.id), key),
            cert,
            parts.cert_pem.clone(),
            parts.not_after,
        ))
    }

    /// What [`from_parts`](SandboxCa::from_parts) needs to rebuild this
    /// CA, its private key included: for an adoptable sandbox's record
    /// only.
    pub fn parts(&self) -> CaParts {
        CaParts {
            id: self.id.clone(),
            cert_pem: self.cert_pem.clone(),
            key_pem: self.issuer.key().serialize_pem(),
            not_after: self.not_after,
        }
    }

    fn assemble(
        id: String,
        issuer: Issuer<'static, KeyPair>,
        cert: CertificateDer<'static>,
        cert_pem: String,
        not_after: SystemTime,
    ) -> Self {
        Self {
            id,
            issuer,
            cert,
            cert_pem,
            not_after,
            provider: Arc::new(rustls::crypto::ring::default_provider()),
            leaves: Mutex::new(HashMap::new()),
        }
    }

    /// The CA's certificate in PEM: what the guest's trust store gets.
    pub fn cert_pem(&self) -> String {
        self.cert_pem.clone()
    }

    /// The CA's certificate in DER.
    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert
    }

    /// The TLS configuration that presents the guest a certificate for
    /// `host`, issued by this CA, offering only HTTP/1.1 by ALPN. Made on
    /// the first call for a host and kept for the next ones.
    pub(crate) fn server_config_for(&self, host: &str) -> Result<Arc<ServerConfig>, CaError> {
        let host = normalize_host(host);
        let now = SystemTime::now();
        if let Some(leaf) = self.lock_leaves().get(&host) {
            if now < leaf.renew_at {
                return Ok(Arc::clone(&leaf.config));
            }
        }
        let leaf = self.issue(&host, now)?;
        let config = Arc::clone(&leaf.config);
        let mut leaves = self.lock_leaves();
        if leaves.len() >= MAX_CACHED_LEAVES && !leaves.contains_key(&host) {
            leaves.retain(|_, l| now < l.renew_at);
            if leaves.len() >= MAX_CACHED_LEAVES {
                leaves.clear();
            }
        }
        leaves.insert(host, leaf);
        Ok(config)
    }

    fn issue(&self, host: &str, now: SystemTime) -> Result<Leaf, CaError> {
        if now >= self.not_after {
            return Err(CaError::Expired);
        }
        let issue_error = |source| CaError::Issue {
            host: host.to_owned(),
            source,
        };
        let not_before = checked_time(now.checked_sub(CLOCK_SLACK))?;
        let not_after = checked_time(now.checked_add(LEAF_LIFETIME))?.min(self.not_after);

        let mut params = CertificateParams::new(vec![host.to_owned()]).map_err(issue_error)?;
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, host);
        params.distinguished_name = name;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        params.not_before = not_before.into();
        params.not_after = not_after.into();

        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(issue_error)?;
        let cert = params.signed_by(&key, &self.issuer).map_err(issue_error)?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));

        let tls_error = |source| CaError::Tls {
            host: host.to_owned(),
            source,
        };
        let mut config = ServerConfig::builder_with_provider(Arc::clone(&self.provider))
            .with_safe_default_protocol_versions()
            .map_err(tls_error)?
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], key)
            .map_err(tls_error)?;
        config.alpn_protocols = vec![HTTP_1_1.to_vec()];
        tracing::debug!(ca = %self.id, host, "leaf certificate issued");
        Ok(Leaf {
            config: Arc::new(config),
            renew_at: not_after
                .checked_sub(LEAF_RENEW_BEFORE)
                .unwrap_or(not_after),
        })
    }

    fn lock_leaves(&self) -> std::sync::MutexGuard<'_, HashMap<String, Leaf>> {
        // The map is only ever inserted into or pruned whole, so a panic
        // elsewhere cannot leave it half-changed.
        self.leaves.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for SandboxCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SandboxCa")
            .field("id", &self.id)
            .field("key", &"<redacted>")
            .field("not_after", &self.not_after)
            .field(
                "cached_hosts",
                &self.leaves.try_lock().map(|l| l.len()).ok(),
            )
            .finish()
    }
}

/// What rebuilds a [`SandboxCa`]: its name, certificate, private key and
/// end of validity. `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct CaParts {
    /// The 8 hex digits of its name.
    pub id: String,
    /// The certificate, PEM.
    pub cert_pem: String,
    /// The private key, PKCS #8 in PEM.
    pub key_pem: String,
    /// The end of its validity.
    pub not_after: SystemTime,
}

impl fmt::Debug for CaParts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaParts")
            .field("id", &self.id)
            .field("key_pem", &"<redacted>")
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

/// The CA certificate's name, constraints and usages for the CA `id`: what
/// its leaves name as their issuer, so the same for a CA made again from
/// its parts.
fn ca_params(id: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, format!("Airlock sandbox CA {id}"));
    name.push(DnType::OrganizationName, "Airlock");
    params.distinguished_name = name;
    // Leaves only: no intermediate may be made under this CA.
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params
}

/// `time`, if a certificate can express it.
fn checked_time(time: Option<SystemTime>) -> Result<SystemTime, CaError> {
    let time = time.ok_or(CaError::Clock)?;
    match time.duration_since(UNIX_EPOCH) {
        Ok(since) if since.as_secs() <= MAX_CERT_SECS => Ok(time),
        _ => Err(CaError::Clock),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::ServerName;
    use rustls::{ClientConfig, RootCertStore};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::{TlsAcceptor, TlsConnector};

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn client_trusting(ca: &SandboxCa) -> Result<Arc<ClientConfig>, rustls::Error> {
        let mut roots = RootCertStore::empty();
        roots.add(ca.cert_der().clone())?;
        let mut config =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()?
                .with_root_certificates(roots)
                .with_no_client_auth();
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    /// Handshakes a client asking for `asked` with a server presenting the
    /// leaf for `issued`; the negotiated ALPN protocol on success.
    async fn handshake(
        ca: &SandboxCa,
        issued: &str,
        asked: &str,
    ) -> Result<Option<Vec<u8>>, Box<dyn std::error::Error>> {
        let (client_io, server_io) = tokio::io::duplex(16 << 10);
        let acceptor = TlsAcceptor::from(ca.server_config_for(issued)?);
        let server = tokio::spawn(async move {
            let mut tls = acceptor.accept(server_io).await?;
            tls.write_all(b"hi").await?;
            tls.shutdown().await?;
            Ok::<_, std::io::Error>(())
        });
        let connector = TlsConnector::from(client_trusting(ca)?);
        let mut tls = connector
            .connect(ServerName::try_from(asked.to_owned())?, client_io)
            .await?;
        let alpn = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
        let mut got = Vec::new();
        tls.read_to_end(&mut got).await?;
        assert_eq!(got, b"hi");
        server.await??;
        Ok(alpn)
    }

    #[tokio::test]
    async fn a_guest_trusting_the_ca_accepts_its_leaf_with_http_1_1() -> TestResult {
        let ca = SandboxCa::generate()?;
        let alpn = handshake(&ca, "api.test", "api.test").await?;
        assert_eq!(alpn.as_deref(), Some(&b"http/1.1"[..]));
        Ok(())
    }

    #[tokio::test]
    async fn a_leaf_is_refused_for_any_other_name() -> TestResult {
        let ca = SandboxCa::generate()?;
        assert!(handshake(&ca, "api.test", "other.test").await.is_err());
        Ok(())
    }

    #[tokio::test]
    async fn another_sandbox_ca_is_not_trusted() -> TestResult {
        let ours = SandboxCa::generate()?;
        let theirs = SandboxCa::generate()?;
        let (client_io, server_io) = tokio::io::duplex(16 << 10);
        let acceptor = TlsAcceptor::from(theirs.server_config_for("api.test")?);
        let server = tokio::spawn(async move { acceptor.accept(server_io).await.is_ok() });
        let connector = TlsConnector::from(client_trusting(&ours)?);
        let client = connector
            .connect(ServerName::try_from("api.test")?, client_io)
            .await;
        assert!(client.is_err());
        assert!(!server.await?);
        Ok(())
    }

    #[test]
    fn a_host_config_is_made_once_and_reused() -> TestResult {
        let ca = SandboxCa::generate()?;
        let first = ca.server_config_for("api.test")?;
        let again = ca.server_config_for("API.test.")?;
        assert!(Arc::ptr_eq(&first, &again));
        let other = ca.server_config_for("other.test")?;
        assert!(!Arc::ptr_eq(&first, &other));
        Ok(())
    }

    #[test]
    fn the_ca_certificate_is_pem_and_named_for_airlock() -> TestResult {
        let ca = SandboxCa::generate()?;
        let pem = ca.cert_pem();
        assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
        let cn = format!("Airlock sandbox CA {}", ca.id);
        let der = ca.cert_der();
        assert!(der.windows(cn.len()).any(|w| w == cn.as_bytes()));
        Ok(())
    }

    #[tokio::test]
    async fn a_ca_made_again_from_its_parts_is_trusted_where_the_first_was() -> TestResult {
        let first = SandboxCa::generate()?;
        let parts = first.parts();
        let again = SandboxCa::from_parts(&parts)?;
        assert_eq!(again.cert_pem(), first.cert_pem());
        assert_eq!(again.cert_der(), first.cert_der());
        // A guest that trusts the first CA's certificate accepts the
        // leaves of the CA made again.
        let (client_io, server_io) = tokio::io::duplex(16 << 10);
        let acceptor = TlsAcceptor::from(again.server_config_for("api.test")?);
        let server = tokio::spawn(async move { acceptor.accept(server_io).await.is_ok() });
        let connector = TlsConnector::from(client_trusting(&first)?);
        let client = connector
            .connect(ServerName::try_from("api.test")?, client_io)
            .await?;
        assert!(server.await?);
        drop(client);

        let shown = format!("{parts:?}");
        let key_body: String = parts.key_pem.lines().skip(1).take(1).collect();
        assert!(!shown.contains(&key_body), "{shown}");

        let other = SandboxCa::generate()?.parts();
        let mismatched = CaParts {
            key_pem: other.key_pem,
            ..parts.clone()
        };
        assert!(matches!(
            SandboxCa::from_parts(&mismatched),
            Err(CaError::Kept(_))
        ));
        let garbled = CaParts {
            cert_pem: "not a certificate".into(),
            ..parts
        };
        assert!(SandboxCa::from_parts(&garbled).is_err());
        Ok(())
    }

    #[test]
    fn debug_never_shows_the_ca_key() -> TestResult {
        let ca = SandboxCa::generate()?;
        let shown = format!("{ca:?}");
        let key_pem = ca.issuer.key().serialize_pem();
        let key_body: String = key_pem.lines().skip(1).take(1).collect();
        assert!(!key_body.is_empty());
        assert!(!shown.contains(&key_body), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
        Ok(())
    }
}
