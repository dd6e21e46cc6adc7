//! Named templates (`airlock template build`): starting a sandbox from one,
//! and making one's snapshot with a program already running in it.
//!
//! A named template's snapshot lives in its own template store (see
//! [`crate::template::NamedTemplate`]): a start from it clones that
//! snapshot or fails. It never boots cold and never makes a plain template
//! instead, because either would be a sandbox without the template's
//! `START` program running.

use std::future::Future;
use std::time::{Duration, Instant};

use tonic::transport::Channel;

use crate::error::{Error, Result};
use crate::lifecycle::SnapshotProblem;
use crate::template::{NamedTemplate, Template, TemplateStore};
use crate::vmm::{self, Backend, GuestMemory};

use super::builder::SandboxBuilder;
use super::clone::{disconnect, warm_up};
use super::connect::{connect_agent, Deadline};
use super::error::ConfigError;

/// How long a build waits for another build of the same snapshot.
const LOCK_TIMEOUT: Duration = Duration::from_secs(600);

impl SandboxBuilder {
    /// Starts from the named template `template` (`airlock template build`):
    /// its root image, memory and vCPUs, its `ENV` as the default
    /// environment, its `USER` as the default user and its `WORKDIR` as the
    /// default directory, and a clone of its
    /// snapshot, in which its `START` program is already running. Change
    /// none of these afterwards: the snapshot fits only the configuration
    /// it was made with, and a start that does not fit is an error.
    pub fn template(mut self, template: &NamedTemplate) -> Self {
        let meta = template.meta();
        self.image = Some(template.rootfs_path());
        self.memory_mib = meta.memory_mib;
        self.vcpus = meta.vcpus;
        self.template_dir = template.snapshot_dir();
        self.from_template = true;
        self.named_template = Some(meta.name.clone());
        for (key, value) in &meta.env {
            self.env.retain(|(k, _)| k != key);
            self.env.push((key.clone(), value.clone()));
        }
        if let Some(user) = &meta.user {
            self.default_user = Some(user.clone());
        }
        if let Some(dir) = &meta.workdir {
            self.default_cwd = Some(dir.clone());
        }
        self
    }

    /// Boots this configuration with its RAM in a new template file, runs
    /// `prepare` on the agent's channel, and saves the running guest as
    /// the template of this configuration in `template_dir`. Nothing is
    /// left behind when `prepare` or the save fails; `prepare`'s own
    /// failure is the inner error.
    pub(crate) async fn snapshot_prepared<T, E, F, Fut>(
        &self,
        prepare: F,
    ) -> Result<std::result::Result<(Template, T), E>>
    where
        F: FnOnce(Channel) -> Fut,
        Fut: Future<Output = std::result::Result<T, E>>,
    {
        self.validate()?;
        let accel = self.accel.resolve().map_err(ConfigError::from)?;
        let failed = |source: Box<dyn std::error::Error + Send + Sync>| {
            Error::snapshot("making the template's snapshot", source)
        };
        let inputs = self.template_inputs(accel).map_err(|e| failed(e.into()))?;
        let key = inputs.key();
        let store = TemplateStore::new(&self.template_dir);
        let lock = store
            .lock(&key, LOCK_TIMEOUT)
            .await
            .map_err(|e| failed(e.into()))?;
        let building = store
            .begin(&key, u64::from(self.memory_mib) << 20, &lock)
            .map_err(|e| failed(e.into()))?;
        let memory = GuestMemory::File {
            path: building.memory_path(),
            shared: true,
        };
        let (_dir, mut vmm) = self.launch(accel, self.disks(), memory, false).await?;
        let deadline = Deadline {
            at: Instant::now() + self.boot_timeout,
            timeout: self.boot_timeout,
        };
        let reached = match connect_agent(&mut vmm, deadline).await {
            Ok(reached) => reached,
            Err(error) => {
                vmm.kill();
                return Err(error);
            }
        };
        let prepared = match prepare(reached.channel.clone()).await {
            Ok(prepared) => prepared,
            Err(error) => {
                vmm.kill();
                return Ok(Err(error));
            }
        };
        warm_up(&reached.channel).await;
        disconnect(reached.channel).await;
        let saved = async {
            let state = building.create_state().map_err(|e| failed(e.into()))?;
            let Backend::Qemu(vm) = &mut vmm else {
                return Err(failed(SnapshotProblem::NoVm.into()));
            };
            vmm::snapshot::save_template(vm.qmp_socket(), &state)
                .await
                .map_err(|e| failed(e.into()))
        }
        .await;
        vmm.kill();
        saved?;
        let template = building
            .commit(inputs, reached.health.agent_version)
            .map_err(|e| failed(e.into()))?;
        Ok(Ok((template, prepared)))
    }
}
