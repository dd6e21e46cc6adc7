//! The files of a trust store in the layout Debian's update-ca-certificates
//! makes, which OpenSSL (and with it Python, pip, curl) reads:
//!
//! - `<local>/airlock-N.crt`: each root (PEM), where update-ca-certificates
//!   takes local roots from, so a guest that runs it keeps them;
//! - `<certs>/airlock-N.pem`: a link to it, as update-ca-certificates makes;
//! - `<certs>/<subject hash>.K`: a link to that, which OpenSSL's
//!   directory lookup (`-CApath`, `SSL_CERT_DIR`) finds a root by, `K` the
//!   first number free for that hash;
//! - `<certs>/ca-certificates.crt`: the bundle, the roots already there
//!   (none when replacing) followed by each root.
//!
//! [`write()`] only writes files; whose directories these are (the image's,
//! or mounts over them) is [`super`]'s business.

use std::io;
use std::path::{Path, PathBuf};

use base64::Engine;

use super::error::StoreError;
use super::subject_hash;

/// The prefix of every file this module names.
const PREFIX: &str = "airlock-";
/// The bundle's file name in the certificate directory.
pub const BUNDLE_NAME: &str = "ca-certificates.crt";

fn at(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| StoreError {
        path: path.to_owned(),
        source,
    }
}

/// Where the store's files go.
#[derive(Debug, Clone)]
pub struct Layout {
    /// OpenSSL's certificate directory (`/etc/ssl/certs`), holding the bundle.
    pub certs: PathBuf,
    /// update-ca-certificates' local directory (`/usr/local/share/ca-certificates`).
    pub local: PathBuf,
    /// What the links in `certs` name `local` by: `local` as the guest's
    /// programs see it.
    pub local_as_seen: PathBuf,
}

/// What [`write()`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// Roots added.
    pub roots: usize,
    /// Roots that got a hashed link.
    pub hashed: usize,
}

/// Writes `roots` (DER) into `layout`. With `replace`, the bundle holds
/// them alone; otherwise they follow the bundle already there. Both
/// directories must exist.
pub fn write(layout: &Layout, roots: &[Vec<u8>], replace: bool) -> Result<Written, StoreError> {
    let bundle_path = layout.certs.join(BUNDLE_NAME);
    let mut bundle = match replace {
        true => String::new(),
        false => match std::fs::read_to_string(&bundle_path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(at(&bundle_path)(e)),
        },
    };
    let mut hashed = 0;
    for (index, der) in roots.iter().enumerate() {
        let pem = to_pem(der);
        let name = format!("{PREFIX}{}", index + 1);
        let crt = layout.local.join(format!("{name}.crt"));
        std::fs::write(&crt, &pem).map_err(at(&crt))?;
        let pem_link = layout.certs.join(format!("{name}.pem"));
        replace_link(&layout.local_as_seen.join(format!("{name}.crt")), &pem_link)?;
        match subject_hash::of_certificate(der) {
            Ok(hash) => {
                let link = free_hash_link(&layout.certs, &hash);
                replace_link(Path::new(&format!("{name}.pem")), &link)?;
                hashed += 1;
            }
            // The bundle still has it: only a directory lookup misses it.
            Err(error) => {
                tracing::warn!(root = index + 1, %error, "no hashed link for this root")
            }
        }
        if !bundle.is_empty() && !bundle.ends_with('\n') {
            bundle.push('\n');
        }
        bundle.push_str(&pem);
    }
    std::fs::write(&bundle_path, bundle).map_err(at(&bundle_path))?;
    Ok(Written {
        roots: roots.len(),
        hashed,
    })
}

/// A certificate (DER) as PEM: base64 in lines of 64, between the markers.
pub fn to_pem(der: &[u8]) -> String {
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let mut pem = String::with_capacity(body.len() + body.len() / 64 + 64);
    pem.push_str("-----BEGIN CERTIFICATE-----\n");
    for line in body.as_bytes().chunks(64) {
        // Base64 is ASCII.
        pem.push_str(&String::from_utf8_lossy(line));
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    pem
}

/// `<dir>/<hash>.K` for the first `K` not taken.
fn free_hash_link(dir: &Path, hash: &str) -> PathBuf {
    (0u32..)
        .map(|k| dir.join(format!("{hash}.{k}")))
        .find(|path| path.symlink_metadata().is_err())
        .unwrap_or_else(|| dir.join(format!("{hash}.0")))
}

/// Makes `link` a symbolic link to `target`, replacing what was there.
fn replace_link(target: &Path, link: &Path) -> Result<(), StoreError> {
    match std::fs::remove_file(link) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(at(link)(e)),
    }
    std::os::unix::fs::symlink(target, link).map_err(at(link))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::trust::subject_hash;

    /// A root made with `openssl req -x509` (subject CN=Airlock Test Root,
    /// hash fffdbd1b).
    const ROOT: &str = "MIIBkDCCATWgAwIBAgIUbfPmqJQL9dPbl9hS2VAygHbIcskwCgYIKoZIzj0EAwIw\
HDEaMBgGA1UEAwwRQWlybG9jayBUZXN0IFJvb3QwIBcNMjYxMjAyMTg1NTM1WhgP\
MjEyNjExMDgxODU1MzVaMBwxGjAYBgNVBAMMEUFpcmxvY2sgVGVzdCBSb290MFkw\
EwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE9CW0hc+lSswMk+p6RQafAL9Y0GsXDR5Y\
iNyuL23Q8844FSS40YAT84XQ8OAGsNanmMCt8ZVW+gHPkihxH0V1eaNTMFEwHQYD\
VR0OBBYEFO5iD/IFKWn6QknhBMiUu5YV2sJQMB8GA1UdIwQYMBaAFO5iD/IFKWn6\
QknhBMiUu5YV2sJQMA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDSQAwRgIh\
AMwc+USBy8+LMQMNVjhz2FIoCxhHgyUmK6cb+u+hv5iYAiEA/zamMhiti7J5rmLC\
bevTpA2KRxtfJDW1sxZb1UImggs=";

    fn root() -> Vec<u8> {
        base64::engine::general_purpose::STANDARD
            .decode(ROOT)
            .unwrap()
    }

    fn layout(dir: &Path) -> Layout {
        let certs = dir.join("etc/ssl/certs");
        let local = dir.join("usr/local/share/ca-certificates");
        std::fs::create_dir_all(&certs).unwrap();
        std::fs::create_dir_all(&local).unwrap();
        Layout {
            certs,
            local_as_seen: local.clone(),
            local,
        }
    }

    #[test]
    fn pem_round_trips_through_lines_of_64() {
        let pem = to_pem(&root());
        assert!(pem.starts_with("-----BEGIN CERTIFICATE-----\nMIIBkDCC"));
        assert!(pem.lines().all(|line| line.len() <= 64));
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        assert_eq!(body, ROOT);
    }

    #[test]
    fn roots_join_the_bundle_and_get_update_ca_certificates_links() {
        let dir = tempfile::tempdir().unwrap();
        let layout = layout(dir.path());
        std::fs::write(layout.certs.join(BUNDLE_NAME), "IMAGE ROOTS").unwrap();
        // The image already has a root with this subject hash.
        std::os::unix::fs::symlink("Other.pem", layout.certs.join("fffdbd1b.0")).unwrap();
        let written = write(&layout, &[root()], false).unwrap();
        assert_eq!(
            written,
            Written {
                roots: 1,
                hashed: 1
            }
        );

        let pem = to_pem(&root());
        let bundle = std::fs::read_to_string(layout.certs.join(BUNDLE_NAME)).unwrap();
        assert_eq!(bundle, format!("IMAGE ROOTS\n{pem}"));
        assert_eq!(
            std::fs::read_to_string(layout.local.join("airlock-1.crt")).unwrap(),
            pem
        );
        assert_eq!(
            std::fs::read_link(layout.certs.join("airlock-1.pem")).unwrap(),
            layout.local.join("airlock-1.crt")
        );
        assert_eq!(
            std::fs::read_link(layout.certs.join("fffdbd1b.1")).unwrap(),
            Path::new("airlock-1.pem"),
            "the next free number"
        );
        assert_eq!(
            std::fs::read_to_string(layout.certs.join("fffdbd1b.1")).unwrap(),
            pem,
            "the hashed link leads to the root"
        );
        assert_eq!(subject_hash::of_certificate(&root()).unwrap(), "fffdbd1b");
    }

    #[test]
    fn replacing_leaves_the_given_roots_alone_in_the_bundle() {
        let dir = tempfile::tempdir().unwrap();
        let layout = layout(dir.path());
        std::fs::write(layout.certs.join(BUNDLE_NAME), "IMAGE ROOTS").unwrap();
        write(&layout, &[root(), root()], true).unwrap();
        let bundle = std::fs::read_to_string(layout.certs.join(BUNDLE_NAME)).unwrap();
        assert_eq!(bundle, format!("{0}{0}", to_pem(&root())));
        assert!(layout.certs.join("fffdbd1b.0").exists());
        assert!(layout.certs.join("fffdbd1b.1").exists());
    }

    #[test]
    fn a_root_whose_subject_cannot_be_hashed_is_in_the_bundle_only() {
        let dir = tempfile::tempdir().unwrap();
        let layout = layout(dir.path());
        let written = write(&layout, &[b"\x30\x00".to_vec()], false).unwrap();
        assert_eq!(
            written,
            Written {
                roots: 1,
                hashed: 0
            }
        );
        let bundle = std::fs::read_to_string(layout.certs.join(BUNDLE_NAME)).unwrap();
        assert!(bundle.starts_with("-----BEGIN CERTIFICATE-----\nMAA=\n"));
    }
}
