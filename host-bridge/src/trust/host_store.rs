//! The host's system trust store: the bundle file OpenSSL reads, found as
//! OpenSSL-based tools find it (`SSL_CERT_FILE`, else the first of the
//! distributions' usual places), and taken as it is: expired roots stay
//! (they match nothing), and only certificates that do not parse, or that
//! rustls cannot use, are left out, each with a warning.

use std::path::{Path, PathBuf};

use super::cert::{parse_pem, read_limited, CaCert, Strictness};
use super::error::{HostStoreError, NoHostStore};
use super::origin::Origin;

/// Where OpenSSL looks for the bundle unless told otherwise.
const BUNDLE_ENV: &str = "SSL_CERT_FILE";

/// The bundle's usual places: Debian, Ubuntu and Alpine; Fedora and RHEL;
/// openSUSE; older RHEL; RHEL's extracted bundle; the BSDs and macOS.
const CANDIDATES: [&str; 6] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/pki/tls/cacert.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// Every root of the host's system store.
pub fn host_roots() -> Result<Vec<CaCert>, HostStoreError> {
    let path = locate(std::env::var_os(BUNDLE_ENV).map(PathBuf::from), &CANDIDATES)?;
    let origin = Origin::HostStore(path.clone());
    let roots = parse_pem(
        &read_limited(&path, &origin)?,
        &origin,
        Strictness::AsTheHostHasIt,
    )?;
    tracing::debug!(path = %path.display(), roots = roots.len(), "read the host's trust store");
    Ok(roots)
}

/// The bundle: `from_env` if it is a file, else the first candidate that is.
fn locate(from_env: Option<PathBuf>, candidates: &[&str]) -> Result<PathBuf, NoHostStore> {
    from_env
        .into_iter()
        .chain(candidates.iter().map(PathBuf::from))
        .find(|path| Path::new(path).is_file())
        .ok_or_else(|| NoHostStore {
            tried: candidates.join(", "),
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_wins_then_the_first_file_that_exists() {
        let dir = tempfile::tempdir().unwrap();
        let second = dir.path().join("second.pem");
        let third = dir.path().join("third.pem");
        std::fs::write(&second, "").unwrap();
        std::fs::write(&third, "").unwrap();
        let missing = dir.path().join("missing.pem");
        let candidates = [
            missing.to_str().unwrap(),
            second.to_str().unwrap(),
            third.to_str().unwrap(),
        ];
        assert_eq!(locate(None, &candidates).unwrap(), second);
        assert_eq!(locate(Some(third.clone()), &candidates).unwrap(), third);
        assert_eq!(locate(Some(missing.clone()), &candidates).unwrap(), second);
        let error = locate(None, &candidates[..1]).unwrap_err().to_string();
        assert!(error.contains("missing.pem"), "{error}");
        assert!(error.contains("ca-certificates"), "{error}");
    }
}
