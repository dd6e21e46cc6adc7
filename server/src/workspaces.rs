//! [`WorkspaceStore`]: the server's named workspaces, kept per key.
//!
//! A key's workspaces are files `NAME.ext4` in `workspaces/KEY/` of the data
//! directory (the owner's in `workspaces/_owner/`, a name no key may have).
//! Each is a sparse ext4 file of a fixed size, which is what the guest can
//! fill and what a key's quota counts: at most [`Quota::workspaces`] of
//! them, and at most [`Quota::workspace_bytes`] of sizes in all, whatever
//! they hold so far. Counting and making one is one step (under the
//! store's lock), so concurrent creates of a key cannot both slip under its
//! quota.
//!
//! A create that starts a sandbox on a workspace [`claim`](WorkspaceStore::claim)s
//! it first (making it if new): while the claim lives, the workspace cannot
//! be removed, and a second create on it is refused. Once the sandbox runs,
//! its record names the workspace and its lock (`flock`, held by the
//! library) keeps it; [`remove`](WorkspaceStore::remove) refuses a workspace
//! that is claimed, held by a live sandbox of the registry, or locked.
//!
//! The files are made by the library ([`SandboxBuilder::create_workspace`]),
//! given to the VMM's group (mode 0660) when the VMM runs as another user.
//! So that such a VMM reaches them, the directories above are searchable
//! by others (`0711`: not listable) when the server runs as root.

use std::collections::HashSet;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use tonic::Status;

use airlock::SandboxBuilder;
use airlock_api::limits::DEFAULT_WORKSPACE_MIB;
use airlock_api::reason::{self, invalid};
use airlock_api::v1::ErrorReason;

use crate::convert::unix_ms;
use crate::keys::{Quota, OWNER_NAME};
use crate::principal::Principal;
use crate::status::error_status;

/// The file name's ending after the workspace's name.
const SUFFIX: &str = ".ext4";

/// One workspace as found on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub name: String,
    /// What the guest can fill (the file's length).
    pub size_bytes: u64,
    /// What it takes on the host's disk (allocated blocks).
    pub used_bytes: u64,
    /// 0 where the filesystem does not record it.
    pub created_at_ms: u64,
}

/// The server's named workspaces.
#[derive(Debug)]
pub struct WorkspaceStore {
    data_dir: PathBuf,
    /// Held while a workspace is counted and made, or removed.
    changing: tokio::sync::Mutex<()>,
    /// Workspaces a create is starting a sandbox on.
    claimed: Mutex<HashSet<PathBuf>>,
}

/// A create's hold on a workspace, from before its sandbox starts until
/// the sandbox is in the registry (or failed to start).
#[derive(Debug)]
pub struct Claim<'a> {
    store: &'a WorkspaceStore,
    path: PathBuf,
    created: bool,
}

impl Claim<'_> {
    /// The workspace's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A sandbox did not start on it: a workspace this claim made goes
    /// again, so a failed create leaves nothing behind.
    pub fn discard(self) {
        if self.created {
            if let Err(error) = airlock::workspace::remove(&self.path) {
                tracing::warn!(error = %airlock::error_chain(&error), "cannot remove a workspace no sandbox started on");
            }
        }
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.store.claimed().remove(&self.path);
    }
}

impl WorkspaceStore {
    /// The workspaces under `data_dir`.
    pub fn new(data_dir: &Path) -> Self {
        WorkspaceStore {
            data_dir: data_dir.to_owned(),
            changing: tokio::sync::Mutex::new(()),
            claimed: Mutex::new(HashSet::new()),
        }
    }

    fn claimed(&self) -> MutexGuard<'_, HashSet<PathBuf>> {
        self.claimed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where `whose` workspaces live.
    pub fn dir(&self, whose: &Principal) -> PathBuf {
        self.data_dir
            .join("workspaces")
            .join(whose.key().unwrap_or(OWNER_NAME))
    }

    /// The file of `whose` workspace `name` (a checked name).
    pub fn path(&self, whose: &Principal, name: &str) -> PathBuf {
        self.dir(whose).join(format!("{name}{SUFFIX}"))
    }

    /// Whether a create is starting a sandbox on `path`.
    pub fn is_claimed(&self, path: &Path) -> bool {
        self.claimed().contains(path)
    }

    /// `whose` workspaces, by name.
    pub fn list(&self, whose: &Principal) -> Result<Vec<Found>, Status> {
        let dir = self.dir(whose);
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(internal("read", &dir, &e)),
        };
        let mut found = Vec::new();
        for entry in entries.flatten() {
            let file_name = entry.file_name();
            let Some(name) = file_name.to_str().and_then(|n| n.strip_suffix(SUFFIX)) else {
                continue;
            };
            // Only regular files the server made: a link is not followed.
            let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
                continue;
            };
            if !meta.is_file() || crate::validate::name("workspace", name).is_err() {
                continue;
            }
            found.push(Found {
                name: name.to_owned(),
                size_bytes: meta.len(),
                used_bytes: meta.blocks().saturating_mul(512),
                created_at_ms: meta.created().map(unix_ms).unwrap_or(0),
            });
        }
        found.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(found)
    }

    /// How many workspaces `whose` keeps, and the sum of their sizes.
    pub fn totals(&self, whose: &Principal) -> Result<(u32, u64), Status> {
        let found = self.list(whose)?;
        let count = u32::try_from(found.len()).unwrap_or(u32::MAX);
        Ok((count, found.iter().map(|w| w.size_bytes).sum()))
    }

    /// Claims `whose` workspace `name` for a sandbox about to start on it,
    /// making it first if it does not exist: `size_mib` big (none: the
    /// default), within `quota` (a key's; the owner has none), as `builder`
    /// makes workspaces. A workspace that exists keeps its size: asking
    /// for another is refused, naming `size_field`.
    pub async fn claim(
        &self,
        whose: &Principal,
        name: &str,
        size_mib: Option<u64>,
        size_field: &str,
        quota: Option<Quota>,
        builder: SandboxBuilder,
    ) -> Result<Claim<'_>, Status> {
        let _changing = self.changing.lock().await;
        let path = self.path(whose, name);
        if self.is_claimed(&path) {
            return Err(reason::status(
                ErrorReason::Unsupported,
                format!("workspace {name} is in use: a sandbox is starting on it"),
            ));
        }
        let created = match std::fs::symlink_metadata(&path) {
            Ok(meta) => {
                let mib = meta.len() >> 20;
                if size_mib.is_some_and(|asked| asked != mib) {
                    return Err(invalid(
                        size_field,
                        format!(
                            "workspace {name} exists with {mib} MiB; leave the size unset (0) or \
                             {mib} (a workspace keeps its size)"
                        ),
                    ));
                }
                false
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.make(whose, name, &path, size_mib, quota, builder)
                    .await?;
                true
            }
            Err(e) => return Err(internal("inspect", &path, &e)),
        };
        self.claimed().insert(path.clone());
        Ok(Claim {
            store: self,
            path,
            created,
        })
    }

    /// Makes `whose` workspace `name` (see [`claim`](Self::claim)), empty;
    /// `ALREADY_EXISTS` if there is one.
    pub async fn create(
        &self,
        whose: &Principal,
        name: &str,
        size_mib: Option<u64>,
        quota: Option<Quota>,
        builder: SandboxBuilder,
    ) -> Result<Found, Status> {
        let _changing = self.changing.lock().await;
        let path = self.path(whose, name);
        if std::fs::symlink_metadata(&path).is_ok() {
            return Err(reason::status(
                ErrorReason::AlreadyExists,
                format!("a workspace named {name} exists already"),
            ));
        }
        self.make(whose, name, &path, size_mib, quota, builder)
            .await?;
        self.list(whose)?
            .into_iter()
            .find(|found| found.name == name)
            .ok_or_else(|| {
                reason::status(
                    ErrorReason::Internal,
                    format!("workspace {name} went as it was made"),
                )
            })
    }

    /// Counts `whose` workspaces against `quota` and makes a new one at
    /// `path`. Called under the store's lock.
    async fn make(
        &self,
        whose: &Principal,
        name: &str,
        path: &Path,
        size_mib: Option<u64>,
        quota: Option<Quota>,
        builder: SandboxBuilder,
    ) -> Result<(), Status> {
        let size_mib = size_mib.unwrap_or(DEFAULT_WORKSPACE_MIB);
        if let Some(quota) = quota {
            let (count, bytes) = self.totals(whose)?;
            if count >= quota.workspaces() {
                return Err(reason::status(
                    ErrorReason::QuotaExceeded,
                    format!(
                        "{whose} may keep {} workspaces and keeps {count}; remove one first \
                         (airlock workspace rm NAME)",
                        quota.workspaces()
                    ),
                ));
            }
            let limit = quota.workspace_bytes();
            if bytes.saturating_add(size_mib << 20) > limit {
                return Err(reason::status(
                    ErrorReason::QuotaExceeded,
                    format!(
                        "{whose} may keep {} MiB of workspaces and keeps {} MiB; {size_mib} MiB \
                         more would pass it",
                        limit >> 20,
                        bytes >> 20
                    ),
                ));
            }
        }
        self.make_dirs(whose)?;
        let builder = builder.workspace(path).workspace_size(size_mib << 20);
        let made = tokio::task::spawn_blocking(move || builder.create_workspace())
            .await
            .map_err(|e| {
                reason::status(
                    ErrorReason::Internal,
                    format!("making workspace {name}: {e}"),
                )
            })?;
        made.map_err(|error| error_status(&error))?;
        tracing::info!(%whose, name, size_mib, "workspace made");
        Ok(())
    }

    /// Makes `whose` directory and the ones above it, each reachable by a
    /// VMM running as another user (searchable, not listable) when the
    /// server runs as root.
    fn make_dirs(&self, whose: &Principal) -> Result<(), Status> {
        let root = self.data_dir.join("workspaces");
        let dir = self.dir(whose);
        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
            .create(&dir)
            .map_err(|e| internal("make", &dir, &e))?;
        if !nix::unistd::geteuid().is_root() {
            return Ok(());
        }
        for dir in [&self.data_dir, &root, &dir] {
            let mode = std::fs::metadata(dir)
                .map_err(|e| internal("inspect", dir, &e))?
                .mode();
            if mode & 0o011 != 0o011 {
                let reachable = std::fs::Permissions::from_mode((mode | 0o011) & 0o7777);
                std::fs::set_permissions(dir, reachable)
                    .map_err(|e| internal("open up", dir, &e))?;
            }
        }
        Ok(())
    }

    /// Removes `whose` workspace `name` and returns the bytes it took on
    /// the host's disk. `holder` names the live sandbox that holds it, if
    /// any (asked under the store's lock). `NOT_FOUND` for a name `whose`
    /// has no workspace by (another key's included, in the same words).
    pub async fn remove(
        &self,
        whose: &Principal,
        name: &str,
        holder: impl FnOnce() -> Option<String>,
    ) -> Result<u64, Status> {
        let _changing = self.changing.lock().await;
        let path = self.path(whose, name);
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_file() => meta,
            Ok(_) => return Err(no_such(name)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(no_such(name)),
            Err(e) => return Err(internal("inspect", &path, &e)),
        };
        let busy = |by: String| {
            reason::status(
                ErrorReason::Unsupported,
                format!("workspace {name} is in use by {by}; kill it first"),
            )
        };
        if self.is_claimed(&path) {
            return Err(busy("a sandbox starting now".to_owned()));
        }
        if let Some(id) = holder() {
            return Err(busy(format!("sandbox {id}")));
        }
        match airlock::workspace::remove(&path) {
            Ok(()) => {}
            Err(airlock::WorkspaceError::Busy(_)) => return Err(busy("a sandbox".to_owned())),
            Err(airlock::WorkspaceError::Missing(_)) => return Err(no_such(name)),
            Err(error) => return Err(error_status(&airlock::Error::Workspace(error))),
        }
        tracing::info!(%whose, name, "workspace removed");
        Ok(meta.blocks().saturating_mul(512))
    }
}

fn no_such(name: &str) -> Status {
    reason::status(
        ErrorReason::NotFound,
        format!("no workspace named {name}; ListWorkspaces lists yours"),
    )
}

fn internal(action: &str, path: &Path, error: &std::io::Error) -> Status {
    reason::status(
        ErrorReason::Internal,
        format!("cannot {action} {}: {error}", path.display()),
    )
}
