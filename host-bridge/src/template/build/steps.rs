//! One build step in a build VM: the base image under an overlay whose
//! writable layer is the step's disk (see `cache`), `RUN` with the step's
//! environment, directory and user, `COPY`/`ADD` through the agent's file
//! transfers. The VM is shut down (cleanly, so the disk is consistent)
//! whatever the step's outcome.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::exec::{Command, Event};
use crate::template::{CopyStep, Step, StepContext, StepKind};
use crate::{Sandbox, SandboxBuilder};
use airlock_gateway::NetworkOptions;

use super::cache::WorkDisk;
use super::{BuildError, BuildEvent, OutputStream};

/// How long a build VM gets to shut down.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);
/// Bytes of a failed step's output kept for its error.
const TAIL_BYTES: usize = 2048;

/// How build VMs are made.
pub struct StepVm {
    pub base: SandboxBuilder,
    pub network: Option<NetworkOptions>,
    pub context_dir: PathBuf,
}

impl StepVm {
    async fn boot(&self, disk: &WorkDisk, network: bool) -> Result<Sandbox, BuildError> {
        let mut builder = self.base.clone().workspace(disk.path());
        if let (true, Some(options)) = (network, &self.network) {
            builder = builder.network(options.clone());
        }
        let sandbox = builder.start().await?;
        // A sandbox's /tmp is a tmpfs; in a build it is part of the image,
        // as in Docker, so what a step leaves there reaches the next.
        let unmounted = sandbox
            .exec(&Command::new("umount").arg("/tmp").privileged(true))
            .await;
        let unmounted = match unmounted {
            Ok(execution) => execution.output().await,
            Err(error) => Err(error),
        };
        match unmounted {
            Ok(output) if output.status.success() => Ok(sandbox),
            Ok(output) => {
                let _ = sandbox.shutdown(SHUTDOWN_GRACE).await;
                Err(BuildError::Host(format!(
                    "umount /tmp in the build VM: {}",
                    String::from_utf8_lossy(&output.stderr).trim()
                )))
            }
            Err(error) => {
                let _ = sandbox.shutdown(SHUTDOWN_GRACE).await;
                Err(BuildError::tool("umount")(error))
            }
        }
    }

    /// Runs `step` (number `number`) with `context` on `disk`.
    pub async fn run(
        &self,
        number: usize,
        step: &Step,
        context: &StepContext,
        disk: &WorkDisk,
        progress: &mut (impl FnMut(BuildEvent) + Send),
    ) -> Result<(), BuildError> {
        let network = matches!(step.kind, StepKind::Run(_));
        let sandbox = self.boot(disk, network).await?;
        let result = self.in_vm(&sandbox, number, step, context, progress).await;
        let stopped = sandbox.shutdown(SHUTDOWN_GRACE).await;
        result?;
        Ok(stopped?)
    }

    async fn in_vm(
        &self,
        sandbox: &Sandbox,
        number: usize,
        step: &Step,
        context: &StepContext,
        progress: &mut (impl FnMut(BuildEvent) + Send),
    ) -> Result<(), BuildError> {
        if let Some(dir) = &context.workdir {
            root_command(sandbox, &["mkdir", "-p", dir]).await?;
        }
        match &step.kind {
            StepKind::Run(program) => {
                let argv = program.argv();
                let mut command = Command::new(&argv[0]).args(&argv[1..]);
                // ARG values reach RUN as variables; ENV wins over them.
                command = command.envs(step.args.clone()).envs(context.env.clone());
                if let Some(dir) = &context.workdir {
                    command = command.cwd(dir);
                }
                if let Some(user) = &context.user {
                    command = command.user(user);
                }
                run_streamed(sandbox, &command, number, step, progress).await
            }
            StepKind::Copy(copy) => self.copy(sandbox, copy, context).await,
            StepKind::Env(_) | StepKind::Workdir(_) | StepKind::User(_) => Ok(()),
        }
    }

    async fn copy(
        &self,
        sandbox: &Sandbox,
        copy: &CopyStep,
        context: &StepContext,
    ) -> Result<(), BuildError> {
        let dest = context.resolve(&copy.dest);
        let into_dir = copy.dest.ends_with('/') || copy.sources.len() > 1 || copy.dest == ".";
        let mut targets = Vec::new();
        for source in &copy.sources {
            let host = self.context_dir.join(source);
            let meta = std::fs::metadata(&host).map_err(|source| BuildError::Context {
                path: host.clone(),
                source,
            })?;
            if meta.is_dir() {
                // As Docker: a directory's contents go into the destination.
                sandbox.fs().upload_dir(&host, &dest).await?;
                targets.push(dest.clone());
            } else {
                let target = match (into_dir, Path::new(source).file_name()) {
                    (true, Some(name)) => {
                        format!("{}/{}", dest.trim_end_matches('/'), name.to_string_lossy())
                    }
                    _ => dest.clone(),
                };
                if let Some(parent) = Path::new(&target).parent() {
                    root_command(sandbox, &["mkdir", "-p", &parent.to_string_lossy()]).await?;
                }
                sandbox.fs().write_file(&target, &host).await?;
                targets.push(target);
            }
        }
        for target in &targets {
            if let Some(mode) = copy.chmod {
                root_command(sandbox, &["chmod", "-R", &format!("{mode:o}"), target]).await?;
            }
            if let Some(owner) = &copy.chown {
                root_command(sandbox, &["chown", "-R", owner, target]).await?;
            }
        }
        Ok(())
    }

    /// Packs `disk`'s filesystem into the root image `out`.
    pub async fn flatten(
        &self,
        disk: &WorkDisk,
        context: &StepContext,
        scratch: &Path,
        out: &Path,
    ) -> Result<(), BuildError> {
        let sandbox = self.boot(disk, false).await?;
        let result = async {
            if let Some(dir) = &context.workdir {
                root_command(&sandbox, &["mkdir", "-p", dir]).await?;
            }
            super::flatten::flatten(&sandbox, scratch, out).await
        }
        .await;
        let stopped = sandbox.shutdown(SHUTDOWN_GRACE).await;
        result?;
        Ok(stopped?)
    }
}

/// Runs a helper program as root; its failure is the build's.
async fn root_command(sandbox: &Sandbox, argv: &[&str]) -> Result<(), BuildError> {
    let output = sandbox
        .exec(
            &Command::new(argv[0])
                .args(argv[1..].iter().copied())
                .user("root"),
        )
        .await
        .map_err(BuildError::tool(argv[0]))?
        .output()
        .await?;
    if output.status.success() {
        Ok(())
    } else {
        Err(BuildError::Host(format!(
            "{}: {}",
            argv.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

/// Runs a `RUN` step's program, streaming its output as events.
async fn run_streamed(
    sandbox: &Sandbox,
    command: &Command,
    number: usize,
    step: &Step,
    progress: &mut (impl FnMut(BuildEvent) + Send),
) -> Result<(), BuildError> {
    let mut execution = sandbox.exec(command).await?;
    let mut tail: Vec<u8> = Vec::new();
    let mut keep = |data: &[u8]| {
        tail.extend_from_slice(data);
        if tail.len() > TAIL_BYTES {
            tail.drain(..tail.len() - TAIL_BYTES);
        }
    };
    while let Some(event) = execution.next_event().await? {
        match event {
            Event::Stdout(data) => {
                keep(&data);
                progress(BuildEvent::Output {
                    number,
                    stream: OutputStream::Stdout,
                    data,
                });
            }
            Event::Stderr(data) => {
                keep(&data);
                progress(BuildEvent::Output {
                    number,
                    stream: OutputStream::Stderr,
                    data,
                });
            }
            Event::Dropped(_) => {}
            Event::Exited(exit) => {
                if exit.status.success() {
                    return Ok(());
                }
                let status = match exit.status {
                    crate::ExitStatus::Code(code) => format!("exit code {code}"),
                    crate::ExitStatus::Signal(signal) => format!("signal {signal}"),
                };
                return Err(BuildError::StepFailed {
                    number,
                    line: step.line,
                    instruction: step.kind.describe(),
                    status,
                    tail: String::from_utf8_lossy(&tail).into_owned(),
                });
            }
        }
    }
    Err(BuildError::Host(format!(
        "step {number}: the program's events ended without its exit"
    )))
}
