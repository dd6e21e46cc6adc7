//! CA certificates a sandbox trusts: for a private CA, or a TLS-inspecting
//! proxy between the host and the internet.
//!
//! - [`CaCert`] (`cert`): one certificate, checked when it is made from PEM
//!   text, a PEM file or DER.
//! - [`host_roots`] (`host_store`): the host's own system store.
//! - `TrustConfig`: what a [`SandboxBuilder`](crate::SandboxBuilder) was
//!   given ([`ca_cert`](crate::SandboxBuilder::ca_cert),
//!   [`trust_host_roots`](crate::SandboxBuilder::trust_host_roots)), or,
//!   when it was given nothing, what [`CA_CERTS_ENV`] names. Resolved once
//!   per start, before the VM boots, into `GuestRoots`.
//!
//! A start then installs the roots in the guest with `System.TrustRoots`
//! (see `sandbox::trust`), after the guest is reached, so a clone of a
//! template gets the roots of its own start; and a sandbox with a network
//! adds them to the roots its gateway checks the servers of secret-bound
//! hosts against.

mod cert;
mod error;
mod host_store;
mod origin;

use std::sync::Arc;

use airlock_proto::contract::trust::{MAX_ROOTS, MAX_TOTAL_BYTES};

pub use cert::CaCert;
pub use error::{CaCertError, HostStoreError, NoHostStore, TrustError};
pub use host_store::host_roots;
pub use origin::{Origin, CA_CERTS_ENV};

/// The entry of [`CA_CERTS_ENV`] that stands for the host's store.
const HOST_ENTRY: &str = "host";

/// The roots a guest is given at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GuestRoots {
    /// The certificates, the host's store first when it is given.
    pub certs: Vec<CaCert>,
    /// Whether they replace the image's roots (the host's store was given).
    pub replace: bool,
}

/// What a builder was told about roots.
#[derive(Debug, Clone)]
pub(crate) struct TrustConfig {
    certs: Vec<CaCert>,
    host_roots: bool,
    /// Nothing was said: [`CA_CERTS_ENV`] decides.
    from_env: bool,
    /// Resolved by this start (`None` inside: no roots).
    resolved: Option<Option<Arc<GuestRoots>>>,
}

impl Default for TrustConfig {
    fn default() -> Self {
        Self {
            certs: Vec::new(),
            host_roots: false,
            from_env: true,
            resolved: None,
        }
    }
}

impl TrustConfig {
    /// Adds certificates (and stops [`CA_CERTS_ENV`] from deciding).
    pub fn add(&mut self, certs: impl IntoIterator<Item = CaCert>) {
        self.certs.extend(certs);
        self.from_env = false;
        self.resolved = None;
    }

    /// Trusts exactly the host's store, or not (and stops
    /// [`CA_CERTS_ENV`] from deciding).
    pub fn host_roots(&mut self, on: bool) {
        self.host_roots = on;
        self.from_env = false;
        self.resolved = None;
    }

    /// Whether [`CA_CERTS_ENV`] decides (the builder was told nothing).
    pub fn env_decides(&self) -> bool {
        self.from_env
    }

    /// Gathers the roots, once: from the builder or from [`CA_CERTS_ENV`],
    /// the host's store read now.
    pub fn resolve(&mut self) -> Result<Option<Arc<GuestRoots>>, TrustError> {
        if let Some(resolved) = &self.resolved {
            return Ok(resolved.clone());
        }
        let (certs, host_roots) = if self.from_env {
            match std::env::var(CA_CERTS_ENV) {
                Ok(value) => from_env(&value).map_err(|e| TrustError::FromEnv(Box::new(e)))?,
                Err(_) => (Vec::new(), false),
            }
        } else {
            (self.certs.clone(), self.host_roots)
        };
        let resolved = gather(certs, host_roots)?.map(Arc::new);
        self.resolved = Some(resolved.clone());
        Ok(resolved)
    }
}

/// The certificates and host-store choice of a [`CA_CERTS_ENV`] value.
fn from_env(value: &str) -> Result<(Vec<CaCert>, bool), TrustError> {
    let mut certs = Vec::new();
    let mut host = false;
    for entry in value.split(':').map(str::trim).filter(|e| !e.is_empty()) {
        if entry == HOST_ENTRY {
            host = true;
        } else {
            certs.extend(CaCert::from_pem_file(entry)?);
        }
    }
    Ok((certs, host))
}

/// The host's store (when asked for) followed by `certs`, within bounds.
fn gather(certs: Vec<CaCert>, host_roots: bool) -> Result<Option<GuestRoots>, TrustError> {
    let mut all = match host_roots {
        true => host_store::host_roots()?,
        false => Vec::new(),
    };
    all.extend(certs);
    if all.is_empty() && !host_roots {
        return Ok(None);
    }
    let bytes = all.iter().map(|c| c.der().len()).sum();
    if all.len() > MAX_ROOTS || bytes > MAX_TOTAL_BYTES {
        return Err(TrustError::TooMany {
            count: all.len(),
            bytes,
        });
    }
    Ok(Some(GuestRoots {
        certs: all,
        replace: host_roots,
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ca_file(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let path = dir.join(format!("{name}.pem"));
        std::fs::write(&path, params.self_signed(&key).unwrap().pem()).unwrap();
        path
    }

    #[test]
    fn the_variable_lists_files_and_the_host_store() {
        let dir = tempfile::tempdir().unwrap();
        let a = ca_file(dir.path(), "a");
        let b = ca_file(dir.path(), "b");
        let value = format!("{}::{} ", a.display(), b.display());
        let (certs, host) = from_env(&value).unwrap();
        assert_eq!(certs.len(), 2);
        assert!(!host);
        let (certs, host) = from_env(&format!("host:{}", a.display())).unwrap();
        assert_eq!((certs.len(), host), (1, true));
        assert_eq!(from_env("").unwrap().0.len(), 0);
        let missing = dir.path().join("missing.pem");
        let error = from_env(&missing.display().to_string()).unwrap_err();
        let error = TrustError::FromEnv(Box::new(error)).to_string();
        assert!(
            error.starts_with("AIRLOCK_CA_CERTS: cannot read "),
            "{error}"
        );
        assert!(error.contains("missing.pem"), "{error}");
    }

    #[test]
    fn builder_roots_are_resolved_once_and_none_means_none() {
        let dir = tempfile::tempdir().unwrap();
        let certs = CaCert::from_pem_file(ca_file(dir.path(), "c")).unwrap();
        let mut config = TrustConfig::default();
        config.add(Vec::new());
        assert_eq!(config.resolve().unwrap(), None, "explicitly none");
        config.add(certs.clone());
        let resolved = config.resolve().unwrap().unwrap();
        assert_eq!(resolved.certs, certs);
        assert!(!resolved.replace);
        assert!(Arc::ptr_eq(&resolved, &config.resolve().unwrap().unwrap()));
    }
}
