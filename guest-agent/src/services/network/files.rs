//! The files programs read to find the network: `/etc/resolv.conf`, and a
//! CA bundle that adds the host's CA (for hosts whose secrets the host puts
//! into requests) to the image's own roots.

use std::io;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// The resolver configuration programs read.
pub const RESOLV_CONF: &str = "/etc/resolv.conf";
/// Where the image's roots usually are (Debian, Ubuntu, Alpine), and
/// where `System.TrustRoots` puts them ([`crate::trust`]).
pub use airlock_proto::contract::trust::SYSTEM_BUNDLE;
/// The bundle the agent writes: the image's roots and the host's CA.
pub const AGENT_BUNDLE: &str = "/etc/airlock/ca-bundle.pem";

/// A file could not be written.
#[derive(Debug, thiserror::Error)]
#[error("writing {path}")]
pub struct FileError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    #[source]
    pub source: io::Error,
}

fn at(path: &Path) -> impl FnOnce(io::Error) -> FileError + '_ {
    move |source| FileError {
        path: path.to_owned(),
        source,
    }
}

/// Points the resolver at `nameserver`, replacing whatever the image had
/// (often a link to a resolver daemon's file that is not running here).
pub fn write_resolv_conf(root: &Path, nameserver: Ipv4Addr) -> Result<(), FileError> {
    let path = root.join(RESOLV_CONF.trim_start_matches('/'));
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(at(&path)(e)),
    }
    std::fs::write(&path, format!("nameserver {nameserver}\n")).map_err(at(&path))
}

/// Writes [`AGENT_BUNDLE`] (the image's roots, then `extra_pem`) and adds
/// `extra_pem` to the image's own bundle if it has one, so that programs
/// trust it with or without the CA environment variables. Returns the
/// bundle's path. Repeating it adds nothing twice.
pub fn write_ca_bundle(root: &Path, extra_pem: &str) -> Result<PathBuf, FileError> {
    let system = root.join(SYSTEM_BUNDLE.trim_start_matches('/'));
    let mut roots = match std::fs::read_to_string(&system) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(at(&system)(e)),
    };
    let extra = extra_pem.trim();
    if let Some(text) = roots.as_mut().filter(|text| !text.contains(extra)) {
        append_pem(text, extra);
        std::fs::write(&system, text.as_bytes()).map_err(at(&system))?;
    }
    let mut bundle = roots.unwrap_or_default();
    if !bundle.contains(extra) {
        append_pem(&mut bundle, extra);
    }
    let path = root.join(AGENT_BUNDLE.trim_start_matches('/'));
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(at(dir))?;
    }
    std::fs::write(&path, bundle).map_err(at(&path))?;
    Ok(PathBuf::from(AGENT_BUNDLE))
}

fn append_pem(text: &mut String, pem: &str) {
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(pem);
    text.push('\n');
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const CA: &str = "-----BEGIN CERTIFICATE-----\nQUJD\n-----END CERTIFICATE-----";

    #[test]
    fn resolv_conf_replaces_a_dangling_link() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("etc")).unwrap();
        std::os::unix::fs::symlink("/run/nowhere", root.path().join("etc/resolv.conf")).unwrap();
        write_resolv_conf(root.path(), Ipv4Addr::new(198, 18, 0, 1)).unwrap();
        let text = std::fs::read_to_string(root.path().join("etc/resolv.conf")).unwrap();
        assert_eq!(text, "nameserver 198.18.0.1\n");
    }

    #[test]
    fn the_ca_joins_the_image_roots_once() {
        let root = tempfile::tempdir().unwrap();
        let system = root.path().join("etc/ssl/certs/ca-certificates.crt");
        std::fs::create_dir_all(system.parent().unwrap()).unwrap();
        std::fs::write(&system, "ROOTS").unwrap();
        for _ in 0..2 {
            let path = write_ca_bundle(root.path(), CA).unwrap();
            assert_eq!(path, PathBuf::from(AGENT_BUNDLE));
        }
        let bundle =
            std::fs::read_to_string(root.path().join("etc/airlock/ca-bundle.pem")).unwrap();
        assert_eq!(bundle, format!("ROOTS\n{CA}\n"));
        assert_eq!(std::fs::read_to_string(&system).unwrap(), bundle);
    }

    #[test]
    fn an_image_without_roots_gets_a_bundle_of_the_ca_alone() {
        let root = tempfile::tempdir().unwrap();
        write_ca_bundle(root.path(), CA).unwrap();
        let bundle =
            std::fs::read_to_string(root.path().join("etc/airlock/ca-bundle.pem")).unwrap();
        assert_eq!(bundle, format!("{CA}\n"));
        assert!(!root
            .path()
            .join("etc/ssl/certs/ca-certificates.crt")
            .exists());
    }
}
