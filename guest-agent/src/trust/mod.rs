//! `System.TrustRoots`: CA certificates the guest's programs trust.
//!
//! [`Roots::from_request`] checks a request: at least one certificate, at
//! most [`MAX_ROOTS`], each an X.509 certificate whose subject [`der`]
//! finds. [`TrustStore::install`] then (as PID 1) lays the system store
//! out anew in memory and mounts it over the image's:
//!
//! - over [`CERT_DIR`] and [`LOCAL_CERT_DIR`], an overlay whose lower layer
//!   is the image's directory and whose upper layer is a directory under
//!   `/run` (a tmpfs), so the image's roots stay and ours join them; when
//!   replacing the image's roots, a bind mount of that directory alone;
//! - into the mounted directories, [`store`] writes each root, its links
//!   (the [`subject_hash`] link OpenSSL's directory lookup uses) and the
//!   bundle [`SYSTEM_BUNDLE`];
//! - [`env()`] from then on gives every program [`BUNDLE_VARIABLES`] naming
//!   the bundle and [`DIR_VARIABLE`] naming the directory, for runtimes
//!   that bring roots of their own (Node, Python's requests).
//!
//! Nothing lands in the root overlay's writable layer, so a workspace
//! keeps no root from one start to the next, and a template's clone gets
//! the roots of its own start. Installing again first takes the previous
//! mounts away.

pub mod der;
pub mod error;
pub mod store;
pub mod subject_hash;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use airlock_proto::contract::trust::{
    BUNDLE_VARIABLES, CERT_DIR, DIR_VARIABLE, LOCAL_CERT_DIR, MAX_ROOTS, MAX_ROOT_BYTES,
    MAX_TOTAL_BYTES, SYSTEM_BUNDLE,
};
use airlock_proto::v1::TrustRootsRequest;
use nix::mount::{mount, umount2, MntFlags, MsFlags};

pub use self::error::{StoreError, TrustError};
use store::{Layout, Written};

/// Where the mounted directories live: on `/run`, a tmpfs.
const RUN_DIR: &str = "/run/airlock/trust";

/// The variables [`install`](TrustStore::install) adds to every program's
/// environment.
static ENV: RwLock<Vec<(String, String)>> = RwLock::new(Vec::new());

/// The environment every program gets on account of the trusted roots
/// (empty until they are installed).
pub fn env() -> Vec<(String, String)> {
    ENV.read().unwrap_or_else(PoisonError::into_inner).clone()
}

/// A checked `TrustRootsRequest`.
#[derive(Debug, Clone)]
pub struct Roots {
    certificates: Vec<Vec<u8>>,
    replace: bool,
}

impl Roots {
    /// Checks `request`.
    pub fn from_request(request: TrustRootsRequest) -> Result<Self, TrustError> {
        let TrustRootsRequest {
            certificates,
            replace_image_roots,
        } = request;
        if certificates.is_empty() {
            return Err(TrustError::Empty);
        }
        let bytes = certificates.iter().map(|c| c.len()).sum();
        if certificates.len() > MAX_ROOTS || bytes > MAX_TOTAL_BYTES {
            return Err(TrustError::TooMany {
                count: certificates.len(),
                bytes,
            });
        }
        let mut checked = Vec::with_capacity(certificates.len());
        for (i, certificate) in certificates.into_iter().enumerate() {
            let index = i + 1;
            if certificate.len() > MAX_ROOT_BYTES {
                return Err(TrustError::TooLarge {
                    index,
                    bytes: certificate.len(),
                });
            }
            der::subject_of(&certificate)
                .map_err(|source| TrustError::NotACertificate { index, source })?;
            checked.push(certificate.to_vec());
        }
        Ok(Self {
            certificates: checked,
            replace: replace_image_roots,
        })
    }
}

/// What [`TrustStore::install`] did.
#[derive(Debug, Clone)]
pub struct Installed {
    /// The bundle that holds every trusted root.
    pub bundle: PathBuf,
    /// What was written.
    pub written: Written,
}

/// The guest's system trust store, and the mounts this agent put over it.
#[derive(Debug, Clone, Default)]
pub struct TrustStore {
    /// The targets mounted over by the last install, to take away first.
    mounted: Arc<Mutex<Vec<&'static str>>>,
}

impl TrustStore {
    /// Installs `roots` (see the module docs). Only as PID 1: the mounts
    /// and files are the guest's.
    pub fn install(&self, roots: &Roots) -> Result<Installed, TrustError> {
        let mut mounted = self.mounted.lock().unwrap_or_else(PoisonError::into_inner);
        for target in mounted.drain(..) {
            if let Err(errno) = umount2(target, MntFlags::MNT_DETACH) {
                tracing::warn!(target, %errno, "cannot take the previous trust store away");
            }
        }
        let run = Path::new(RUN_DIR);
        match std::fs::remove_dir_all(run) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(TrustError::Dir {
                    path: run.to_owned(),
                    source,
                })
            }
        }
        for (target, name) in [(CERT_DIR, "certs"), (LOCAL_CERT_DIR, "local")] {
            create_dir(Path::new(target))?;
            let layer = run.join(name);
            cover(target, &layer, roots.replace)?;
            mounted.push(target);
        }
        let layout = Layout {
            certs: PathBuf::from(CERT_DIR),
            local: PathBuf::from(LOCAL_CERT_DIR),
            local_as_seen: PathBuf::from(LOCAL_CERT_DIR),
        };
        let written = store::write(&layout, &roots.certificates, roots.replace)?;
        let mut env: Vec<(String, String)> = BUNDLE_VARIABLES
            .iter()
            .map(|key| ((*key).to_owned(), SYSTEM_BUNDLE.to_owned()))
            .collect();
        env.push((DIR_VARIABLE.to_owned(), CERT_DIR.to_owned()));
        *ENV.write().unwrap_or_else(PoisonError::into_inner) = env;
        tracing::info!(
            roots = written.roots,
            hashed = written.hashed,
            replace = roots.replace,
            "trusted roots installed"
        );
        Ok(Installed {
            bundle: PathBuf::from(SYSTEM_BUNDLE),
            written,
        })
    }
}

/// Mounts a directory under `layer` over `target`: an overlay on the
/// target's own contents, or with `alone` the new directory by itself.
fn cover(target: &'static str, layer: &Path, alone: bool) -> Result<(), TrustError> {
    let failed = |what| {
        move |source| TrustError::Mount {
            what,
            target: target.to_owned(),
            source,
        }
    };
    if alone {
        create_dir(layer)?;
        return mount(
            Some(layer),
            target,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(failed("a directory of its own"));
    }
    let upper = layer.join("upper");
    let work = layer.join("work");
    create_dir(&upper)?;
    create_dir(&work)?;
    let options = format!(
        "lowerdir={target},upperdir={},workdir={},index=off",
        upper.display(),
        work.display()
    );
    mount(
        Some("overlay"),
        target,
        Some("overlay"),
        MsFlags::empty(),
        Some(options.as_str()),
    )
    .map_err(failed("an overlay"))
}

fn create_dir(path: &Path) -> Result<(), TrustError> {
    std::fs::create_dir_all(path).map_err(|source| TrustError::Dir {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn request(certificates: Vec<Vec<u8>>) -> TrustRootsRequest {
        TrustRootsRequest {
            certificates: certificates.into_iter().map(Into::into).collect(),
            replace_image_roots: false,
        }
    }

    #[test]
    fn requests_are_checked_before_anything_is_touched() {
        assert!(matches!(
            Roots::from_request(request(Vec::new())),
            Err(TrustError::Empty)
        ));
        assert!(matches!(
            Roots::from_request(request(vec![b"-----BEGIN CERTIFICATE-----".to_vec()])),
            Err(TrustError::NotACertificate { index: 1, .. })
        ));
        assert!(matches!(
            Roots::from_request(request(vec![vec![0x30, 0x00]; MAX_ROOTS + 1])),
            Err(TrustError::TooMany { .. })
        ));
        assert!(matches!(
            Roots::from_request(request(vec![vec![0u8; MAX_ROOT_BYTES + 1]])),
            Err(TrustError::TooLarge { index: 1, .. })
        ));
    }
}
