//! A builder's workspace made ahead of its start
//! ([`SandboxBuilder::create_workspace`]), and the group a workspace file
//! the library creates goes to: the VMM's, when the VMM runs as another
//! user, so that an unprivileged QEMU can use the disk.

use super::builder::SandboxBuilder;
use super::error::ConfigError;
use crate::error::Result;
use crate::vmm::BackendKind;
use crate::workspace::Workspace;
use crate::Accel;

impl SandboxBuilder {
    /// The group a workspace this builder creates is given to (`None`: it
    /// stays the caller's alone, mode 0600).
    pub(super) fn workspace_group(&self, accel: Accel) -> Option<u32> {
        match self.backend {
            BackendKind::Qemu => self.vmm_user.group(accel == Accel::Kvm),
            BackendKind::Process { .. } => None,
        }
    }

    /// Creates and formats this builder's workspace now, as its start
    /// would on first use: sparse, [`workspace_size`](Self::workspace_size)
    /// bytes, and ready for its VMM user (given to the VMM's group, mode
    /// 0660, when the VMM runs as another user). Returns whether it made
    /// the file; a workspace that is there already is checked to hold ext4
    /// and left as it is. Nothing stays locked afterwards. Fails with
    /// [`ConfigError::NoWorkspace`] when the builder has no workspace, and
    /// [`WorkspaceError::Busy`](crate::WorkspaceError::Busy) while a sandbox
    /// holds it.
    pub fn create_workspace(&self) -> Result<bool> {
        let Some(path) = &self.workspace else {
            return Err(ConfigError::NoWorkspace.into());
        };
        let accel = self.accel.resolve().map_err(ConfigError::from)?;
        let workspace = Workspace::open(path, self.workspace_bytes, self.workspace_group(accel))?;
        Ok(workspace.created())
    }
}
