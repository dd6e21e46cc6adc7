//! Starting a sandbox from a template (see [`crate::template`]): find the
//! template of this configuration, or make it (once, under its key's lock),
//! then start a clone of it.
//!
//! Making a template boots the guest with its RAM in a shared file, waits
//! for the agent, disconnects, and saves the device state (`vmm::snapshot`);
//! that VM is then ended, unused. A clone starts QEMU with the same command
//! line except that it maps the file copy on write and waits for the state
//! (`-incoming defer`), loads it and runs: its agent is serving already.
//!
//! Every failure here is reported to `boot`, which boots cold instead: a
//! template only ever makes a start faster.

use std::time::{Duration, Instant};

use airlock_proto::v1::process_client::ProcessClient;
use airlock_proto::v1::StartRequest;
use tonic::transport::Channel;

use crate::error::Error;
use crate::template::{
    FileId, Template, TemplateError, TemplateInputs, TemplateStore, TEMPLATE_FORMAT,
};
use crate::transport::CapMessages;
use crate::vmm::{self, Backend, Disk, GuestMemory, SnapshotError, VmmError};
use crate::Accel;

use super::builder::SandboxBuilder;
use super::connect::{connect_agent, Deadline};
use super::launched::Launched;

/// How long a clone's agent may take to answer before the start falls
/// back to a cold boot.
const CLONE_READY_TIMEOUT: Duration = Duration::from_secs(15);
/// How long the template VM gets, after the host disconnected, to see the
/// connection end before it is stopped (a clone copes either way; this
/// saves it the repeat of the opening).
const DISCONNECT_SETTLE: Duration = Duration::from_millis(100);

/// The program run in a template before it is saved (see [`warm_up`]):
/// a shell, and Python where the image has it (most of what agents run).
/// A pool runs it again in each member (`manager::warm_up`).
pub(crate) const WARM_UP: &[&str] = &[
    "sh",
    "-c",
    "echo warm >/dev/null; if command -v python3 >/dev/null; then python3 -c pass; fi",
];
/// How long the warm-up may take.
const WARM_UP_TIMEOUT: Duration = Duration::from_secs(20);

/// Why a start could not use a template.
#[derive(Debug, thiserror::Error)]
pub(super) enum CloneError {
    #[error("template inputs: cannot read {path}")]
    Inputs {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Template(#[from] TemplateError),
    #[error("saving or loading the VM state")]
    Snapshot(#[from] SnapshotError),
    #[error(transparent)]
    Vmm(#[from] VmmError),
    #[error("making the template")]
    Build(#[source] Box<Error>),
    #[error("starting the clone")]
    Start(#[source] Box<Error>),
    #[error(
        "its snapshot does not fit this start (the kernel, agent, QEMU or its image changed, \
         or the memory or vCPUs differ); rebuild it with `airlock template build`"
    )]
    NamedMissing,
}

impl SandboxBuilder {
    /// Starts a clone of this configuration's template, making the template
    /// first if there is none. Returns the key and whether it was made now.
    pub(super) async fn launch_clone(
        &self,
        accel: Accel,
        disks: &[Disk],
        deadline: Deadline,
    ) -> Result<(Launched, String, bool), CloneError> {
        let inputs = self.template_inputs(accel)?;
        let key = inputs.key();
        let store = TemplateStore::new(&self.template_dir);
        let (template, built) = match find(&store, &key)? {
            Some(template) => (template, false),
            // A named template's snapshot is made by its build, never here.
            None if self.named_template.is_some() => return Err(CloneError::NamedMissing),
            None => {
                let lock = store
                    .lock(&key, deadline.at.saturating_duration_since(Instant::now()))
                    .await?;
                // Another start may have made it while this one waited.
                match find(&store, &key)? {
                    Some(template) => (template, false),
                    None => {
                        let building = store.begin(&key, self.memory_bytes(), &lock)?;
                        let agent_version = self
                            .save_template(accel, disks, &building, deadline)
                            .await?;
                        tracing::info!(key, "template made");
                        (building.commit(inputs, agent_version)?, true)
                    }
                }
            }
        };
        let launched = self.start_clone(accel, disks, &template).await?;
        Ok((launched, key, built))
    }

    fn memory_bytes(&self) -> u64 {
        u64::from(self.memory_mib) << 20
    }

    /// Everything this configuration's template depends on.
    pub(super) fn template_inputs(&self, accel: Accel) -> Result<TemplateInputs, CloneError> {
        let file = |path: &std::path::Path| {
            FileId::of(path).map_err(|source| CloneError::Inputs {
                path: path.to_owned(),
                source,
            })
        };
        let qemu = vmm::locate_qemu()?;
        Ok(TemplateInputs {
            format: TEMPLATE_FORMAT,
            airlock_version: env!("CARGO_PKG_VERSION").to_owned(),
            qemu: file(&qemu)?,
            kernel: file(&self.kernel)?,
            initramfs: file(&self.initramfs)?,
            image: self.image.as_deref().map(file).transpose()?,
            memory_mib: self.memory_mib,
            vcpus: self.vcpus,
            accel: accel.qemu_name().to_owned(),
            cpu: vmm::cpu_model(accel).to_owned(),
            kernel_cmdline: self.kernel_cmdline(accel),
            serial_ports: self.serial_ports.iter().map(|p| p.name.clone()).collect(),
        })
    }

    /// Boots the template VM, waits for its agent, disconnects and saves
    /// its state into `building`. Returns the agent's version.
    #[tracing::instrument(name = "make_template", skip_all)]
    async fn save_template(
        &self,
        accel: Accel,
        disks: &[Disk],
        building: &crate::template::Building,
        deadline: Deadline,
    ) -> Result<String, CloneError> {
        let memory = GuestMemory::File {
            path: building.memory_path(),
            shared: true,
        };
        let (_dir, mut vmm) = self
            .launch(accel, disks.to_vec(), memory, false)
            .await
            .map_err(|e| CloneError::Build(Box::new(e)))?;
        let reached = connect_agent(&mut vmm, deadline)
            .await
            .map_err(|e| CloneError::Build(Box::new(e)))?;
        let health = reached.health;
        warm_up(&reached.channel).await;
        disconnect(reached.channel).await;
        let state = building.create_state()?;
        let Backend::Qemu(vm) = &mut vmm else {
            return Err(CloneError::Vmm(VmmError::Exited));
        };
        vmm::snapshot::save_template(vm.qmp_socket(), &state).await?;
        vmm.kill();
        Ok(health.agent_version)
    }

    /// Starts a clone of `template` and waits for its agent.
    async fn start_clone(
        &self,
        accel: Accel,
        disks: &[Disk],
        template: &Template,
    ) -> Result<Launched, CloneError> {
        let memory = GuestMemory::File {
            path: template.memory_path(),
            shared: false,
        };
        let state = template.open_state()?;
        let (dir, vmm) = self
            .launch(accel, disks.to_vec(), memory, true)
            .await
            .map_err(|e| CloneError::Start(Box::new(e)))?;
        let vmm_started = Instant::now();
        if let Backend::Qemu(vm) = &vmm {
            if let Err(error) = vmm::snapshot::restore(vm.qmp_socket(), &state).await {
                tracing::debug!(console = %vmm.diagnostics(2048), "the clone did not restore");
                return Err(error.into());
            }
        }
        let deadline = Deadline {
            at: Instant::now() + CLONE_READY_TIMEOUT,
            timeout: CLONE_READY_TIMEOUT,
        };
        Launched::connect(dir, vmm, vmm_started, deadline)
            .await
            .map_err(|e| CloneError::Start(Box::new(e)))
    }
}

/// The template for `key`, if there is one. A corrupt one is removed (the
/// next start makes it again) and is this start's error: it boots cold.
fn find(store: &TemplateStore, key: &str) -> Result<Option<Template>, CloneError> {
    store.find(key).map_err(|error| {
        if let Err(error) = store.remove(key) {
            tracing::warn!(%error, "cannot remove the corrupt template");
        }
        error.into()
    })
}

/// Runs short programs in the template before it is saved, so that every
/// clone finds the shell, the C library, the dynamic loader and Python's
/// start-up files in the guest's page cache rather than reading them from
/// its disk on its first exec. A failure costs clones that speed, nothing
/// else.
pub(super) async fn warm_up(channel: &Channel) {
    let run = async {
        let mut events = ProcessClient::new(channel.clone())
            .capped()
            .start(StartRequest {
                argv: WARM_UP.iter().map(|&arg| arg.to_owned()).collect(),
                // Not listed in the clones (an older agent ignores it).
                transient: true,
                ..Default::default()
            })
            .await?
            .into_inner();
        while events.message().await?.is_some() {}
        Ok::<(), tonic::Status>(())
    };
    match tokio::time::timeout(WARM_UP_TIMEOUT, run).await {
        Ok(Ok(())) => {}
        Ok(Err(status)) => tracing::warn!(%status, "the template's warm-up exec failed"),
        Err(_) => tracing::warn!("the template's warm-up exec did not end in time"),
    }
}

/// Drops the host's connection and gives the guest a moment to see it go.
pub(super) async fn disconnect(channel: Channel) {
    drop(channel);
    tokio::time::sleep(DISCONNECT_SETTLE).await;
}
