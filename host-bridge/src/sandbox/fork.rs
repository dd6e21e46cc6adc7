//! [`Sandbox::fork`]: new sandboxes that start as copies of a running one.
//!
//! The parent is stopped for as long as its state takes to write (a
//! snapshot, as for a save to disk, in a temporary file beside the saved
//! sandboxes), then runs on. Each child is a new QEMU process loading that
//! file into its own private memory, and gets its own id, hostname,
//! entropy and clock before anything runs in it, as a clone does: from
//! then on parent and children diverge.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::error::{Error, Result};
use crate::saved::{self, GoodSnapshot, SavedStore, SavedVm};
use crate::state_dir;
use crate::Accel;

use super::boot::{Assembly, Machine};
use super::builder::SandboxBuilder;
use super::started::Origin;
use super::Sandbox;

/// Tells apart the fork files of one process.
static FORKS: AtomicU64 = AtomicU64::new(0);

impl Sandbox {
    /// Makes `n` new sandboxes with this one's memory, programs and files
    /// as they are now, each with fresh entropy and its own id and
    /// hostname; this sandbox keeps running. The children have this
    /// sandbox's policies (lifetime, idle, limits) and are not tracked by
    /// any manager (see [`Sandboxes::fork`](crate::Sandboxes::fork)).
    ///
    /// A sandbox with a workspace cannot be forked (its children would
    /// share one writable disk); neither can one on the vsock channel.
    ///
    /// The snapshot ends this sandbox's agent connection between two
    /// messages, so that no child gets a half-sent one: a call open on
    /// this sandbox at that moment fails with
    /// [`Error::ForkedDuringCall`](crate::Error::ForkedDuringCall) and can
    /// be made again; output streams of programs re-attach by themselves.
    pub async fn fork(&self, n: usize) -> Result<Vec<Sandbox>> {
        if n == 0 {
            return Ok(Vec::new());
        }
        if self.builder.workspace.is_some() {
            return Err(Error::CannotSave {
                reason: "a sandbox with a workspace cannot be forked: its children would \
                         share one writable disk"
                    .into(),
            });
        }
        let machine = self.vm.saved_vm()?;
        let store = SavedStore::new(&self.builder.saved_dir);
        store.ensure()?;
        let source = TempFile(store.dir().join(format!(
            ".fork-{}-{}-{}",
            self.id,
            std::process::id(),
            FORKS.fetch_add(1, Ordering::Relaxed)
        )));
        let began = Instant::now();
        self.vm.save_copy(&source.0).await?;
        tracing::info!(parent = self.id, n, saved_in = ?began.elapsed(), "forking");
        let starts = (0..n).map(|_| {
            self.builder
                .clone()
                .start_fork(&machine, &source.0, self.accel, &self.id)
        });
        let mut children = Vec::with_capacity(n);
        let mut failure = None;
        for started in futures::future::join_all(starts).await {
            match started {
                Ok(child) => children.push(child),
                Err(error) => failure = failure.or(Some(error)),
            }
        }
        // One failed child fails the fork; the others are dropped (killed).
        match failure {
            Some(error) => Err(error),
            None => Ok(children),
        }
    }
}

impl SandboxBuilder {
    /// Starts one child of a fork from the parent's state in `source`.
    #[tracing::instrument(name = "fork_child", skip_all, fields(parent = parent))]
    async fn start_fork(
        self,
        machine: &SavedVm,
        source: &Path,
        accel: Accel,
        parent: &str,
    ) -> Result<Sandbox> {
        let begin = Instant::now();
        let (file, header) = saved::open_snapshot(source)?;
        let snapshot = GoodSnapshot {
            file,
            header,
            generation: 0,
            skipped: Vec::new(),
        };
        let dir = state_dir::create(&self.state_dir_base)?;
        let (launched, _) = self.relaunch_in(dir, machine, snapshot).await?;
        self.assemble(Assembly {
            launched,
            origin: Origin::Fork {
                parent: parent.to_owned(),
            },
            accel,
            workspace: None,
            slot: None,
            begin,
            machine: Some(Machine::New(machine.clone())),
        })
        .await
    }
}

/// A file removed when dropped.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Err(error) = std::fs::remove_file(&self.0) {
            if error.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(path = %self.0.display(), %error, "cannot remove a fork's snapshot");
            }
        }
    }
}
