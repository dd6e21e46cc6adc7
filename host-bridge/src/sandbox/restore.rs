//! Bringing back a sandbox saved to disk whose handle is gone (dropped, or
//! its process ended: a daemon that was killed, a host that rebooted): a
//! new state directory under the sandbox's own id, a new QEMU loading the
//! newest good snapshot generation, and the agent reached as on any start.

use std::time::Instant;

use tokio::sync::OwnedSemaphorePermit;

use crate::error::{Error, Result};
use crate::saved::SavedStore;
use crate::state_dir;
use crate::workspace::Workspace;
use crate::Accel;

use super::boot::{Assembly, Machine};
use super::builder::SandboxBuilder;
use super::started::Origin;
use super::Sandbox;

impl SandboxBuilder {
    /// Restores the sandbox `id` that was saved to disk
    /// ([`Sandbox::pause_to_disk`]) in [`saved_dir`](SandboxBuilder::saved_dir),
    /// with this builder's policies (lifetime, idle, paused calls, limits,
    /// state directory); the machine itself (kernel, image, memory, disks)
    /// is the saved one. Its programs go on where they were, and its id,
    /// files and usage so far are kept (time on disk counts as paused).
    ///
    /// A snapshot that fails its checks (truncated, another QEMU or format)
    /// is refused and the one before it is used; [`Sandbox::last_restore`]
    /// says which and why.
    pub async fn restore(self, id: &str) -> Result<Sandbox> {
        self.restore_in_slot(id, None).await
    }

    /// [`restore`](SandboxBuilder::restore), holding a manager's slot.
    #[tracing::instrument(name = "sandbox_restore", skip(self, slot))]
    pub(crate) async fn restore_in_slot(
        self,
        id: &str,
        slot: Option<OwnedSemaphorePermit>,
    ) -> Result<Sandbox> {
        let begin = Instant::now();
        let store = SavedStore::new(&self.saved_dir);
        let record = store.record(id)?;
        let accel: Accel = record
            .vm
            .accel
            .parse()
            .map_err(|e: crate::ParseAccelError| Error::Config(e.to_string()))?;
        let workspace = match &record.workspace {
            Some(path) if !path.exists() => {
                return Err(Error::Config(format!(
                    "saved sandbox {id}: its workspace {} is gone",
                    path.display()
                )))
            }
            // It exists, so no group is given.
            Some(path) => Some(Workspace::open(path, self.workspace_bytes, None)?),
            None => None,
        };
        let snapshot = store.open_newest(&record, &crate::vmm::qemu_version()?)?;
        // The process that held it may have died without cleaning up (a
        // daemon killed with SIGKILL): its state directory goes first.
        if self.state_dir_base.join(id).exists() {
            crate::gc::collect_before_start(self.state_dir_base.clone()).await;
        }
        let dir = state_dir::create_named(&self.state_dir_base, id)?;
        let (launched, restored) = self.relaunch_in(dir, &record.vm, snapshot).await?;
        let origin = Origin::Restored {
            generation: restored.generation,
        };
        let sandbox = self
            .assemble(Assembly {
                launched,
                origin,
                accel,
                workspace,
                slot,
                begin,
                machine: Some(Machine::Saved(Box::new(record))),
            })
            .await?;
        sandbox.vm.set_last_restore(restored);
        Ok(sandbox)
    }
}
