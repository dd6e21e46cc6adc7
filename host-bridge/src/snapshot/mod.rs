//! Snapshots: a sandbox's whole machine (its memory, programs and files),
//! kept under the hash of what was saved, for new sandboxes to start from
//! as clones ([`SandboxBuilder::snapshot`](crate::SandboxBuilder::snapshot);
//! [`Sandbox::snapshot`](crate::Sandbox::snapshot) takes one).
//!
//! ```text
//! <dir>/<id>/meta.json        SnapshotMeta: the machine, the defaults,
//!                             where it came from, how long it took
//! <dir>/<id>/machine          the saved VM: a `saved` snapshot file (a
//!                             checked header, then QEMU's stream)
//! <dir>/<id>/root.ext4        its root image, pinned: a hard link to the
//!                             image the sandbox ran on (a copy across
//!                             filesystems), so removing that image or
//!                             template leaves the snapshot whole
//! <dir>/<id>/clones/          a template store: the machine loaded into a
//!                             memory file and its device state, per QEMU
//!                             binary; made once, mapped copy on write by
//!                             every sandbox started from the snapshot
//! <dir>/.taking-<pid>-<n>/    a snapshot being taken: renamed to <id> when
//!                             complete, so a crash leaves none half made
//! ```
//!
//! The id is the SHA-256 of the saved stream, so the same content has one
//! name everywhere (a fleet moves snapshots by it, and checks them with it).
//! A snapshot holds the whole machine: one taken of a sandbox that itself
//! started from a snapshot is complete in itself, so there are no chains to
//! follow or to break.
//!
//! - `error`: [`SnapshotStoreError`].
//! - `store`: [`SnapshotStore`], [`Snapshot`], [`SnapshotMeta`], and
//!   [`Taking`], a snapshot on its way in.

mod error;
mod store;

pub use error::SnapshotStoreError;
pub use store::{Snapshot, SnapshotMeta, SnapshotStore, Taking, SNAPSHOT_META_FORMAT};
