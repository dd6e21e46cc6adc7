//! One interpreter process: `driver.py` under `python3` (with `charts.py`,
//! the chart data of matplotlib figures, on its command line), started
//! like any program (`process::command::Spec`: the user, environment, working
//! directory, capabilities and no_new_privs of an exec; its own cgroup
//! where the agent has them), with one end of a Unix socket pair as its
//! stdin for the wire format (`wire`) and pipes as its stdout and stderr,
//! which the cell loop (`cell`) reads.
//!
//! [`Driver::start`] spawns it and waits for its `ready`. A [`Driver`]
//! dropped kills its tree; a task then waits for the exit and removes the
//! cgroup.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use airlock_proto::contract::code::{CHART_MIME_TYPE, MAX_OUTPUT_BYTES};
use airlock_proto::v1::StartRequest;
use nix::sys::signal::Signal;
use tokio::net::unix::pipe::Receiver;
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::{mpsc, watch};

use super::wire::{self, DriverMessage, DriverRequest};
use super::CodeError;
use crate::reaper::{Exit, Reaper};
use crate::services::process::cgroup::Cgroups;
use crate::services::process::command::{Spawned, Spec};
use crate::services::process::signal::Tree;
use crate::services::process::ProcessError;

/// The driver's source, run with `python3 -c`.
pub const SOURCE: &str = include_str!("driver.py");

/// The source of the driver's chart extraction, passed as its last
/// argument; the driver loads it when it first shows a figure.
pub const CHARTS_SOURCE: &str = include_str!("charts.py");

/// How long a driver may take to say it is ready (python3 under TCG on a
/// busy host takes seconds).
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Messages from the driver that may wait for the cell loop.
const QUEUE: usize = 4;

/// How long a killed driver's cgroup is retried for removal.
const CGROUP_RELEASE: Duration = Duration::from_secs(10);

/// What a context's interpreter is started with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// `python` or `bash`.
    pub language: &'static str,
    /// Its working directory (absolute).
    pub cwd: String,
    /// Variables over the default environment.
    pub env: HashMap<String, String>,
    /// Who runs it ("" for root).
    pub user: String,
}

impl Launch {
    /// The exec request that starts the driver.
    fn request(&self) -> StartRequest {
        StartRequest {
            argv: vec![
                "python3".into(),
                "-c".into(),
                SOURCE.into(),
                self.language.into(),
                MAX_OUTPUT_BYTES.to_string(),
                CHART_MIME_TYPE.into(),
                CHARTS_SOURCE.into(),
            ],
            env: self.env.clone(),
            cwd: self.cwd.clone(),
            user: self.user.clone(),
            ..Default::default()
        }
    }
}

/// What the frame reader hands the cell loop.
pub type Incoming = Result<DriverMessage, CodeError>;

/// A running interpreter.
#[derive(Debug)]
pub struct Driver {
    pid: u32,
    language_version: String,
    tree: Arc<Tree>,
    exited: watch::Receiver<Option<Exit>>,
    requests: OwnedWriteHalf,
    /// The driver's messages, read by a task; closed when its socket is.
    pub messages: mpsc::Receiver<Incoming>,
    /// Its stdout; `None` once at end of file.
    pub stdout: Option<Receiver>,
    /// Its stderr; `None` once at end of file.
    pub stderr: Option<Receiver>,
}

impl Driver {
    /// Starts a driver and waits until it is ready.
    pub async fn start(
        launch: &Launch,
        reaper: &Reaper,
        cgroups: Option<&Arc<Cgroups>>,
    ) -> Result<Driver, CodeError> {
        let spec = Spec::from_request(launch.request()).map_err(CodeError::Start)?;
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().map_err(CodeError::DriverIo)?;
        ours.set_nonblocking(true).map_err(CodeError::DriverIo)?;
        let socket = tokio::net::UnixStream::from_std(ours).map_err(CodeError::DriverIo)?;
        let cgroup = cgroups.and_then(|c| match c.create() {
            Ok(cgroup) => Some(cgroup),
            Err(e) => {
                tracing::warn!(error = %e, "cannot create a cgroup for an interpreter");
                None
            }
        });
        let reaper_for_spawn = reaper.clone();
        let (cgroup, spawned) = tokio::task::spawn_blocking(move || {
            let spawned =
                spec.spawn_with_stdin(&reaper_for_spawn, cgroup.as_ref(), OwnedFd::from(theirs));
            (cgroup, spawned)
        })
        .await
        .map_err(|e| CodeError::DriverIo(std::io::Error::other(e.to_string())))?;
        let Spawned {
            pid, pipes, exit, ..
        } = match spawned {
            Ok(spawned) => spawned,
            Err(e) => {
                if let Some(cgroup) = cgroup {
                    let _ = cgroup.remove();
                }
                return Err(match e {
                    ProcessError::ProgramNotFound(program) => CodeError::InterpreterMissing {
                        program,
                        language: launch.language.to_owned(),
                    },
                    other => CodeError::Start(other),
                });
            }
        };
        let tree = Arc::new(Tree::new(pid, reaper.clone(), cgroup));
        let pipe = |fd: Option<OwnedFd>| -> Result<Receiver, CodeError> {
            let fd = fd.ok_or_else(|| CodeError::Driver("no output pipe".into()))?;
            Receiver::from_owned_fd(fd).map_err(CodeError::DriverIo)
        };
        let pipes = pipe(pipes.stdout).and_then(|out| Ok((out, pipe(pipes.stderr)?)));
        let (exit_tx, exited) = watch::channel(None);
        tokio::spawn(async move {
            if let Ok(exit) = exit.await {
                let _ = exit_tx.send(Some(exit));
            }
        });
        let (stdout, stderr) = match pipes {
            Ok(pipes) => pipes,
            Err(e) => {
                release(Arc::clone(&tree), exited);
                return Err(e);
            }
        };
        let (reader, requests) = socket.into_split();
        let (tx, messages) = mpsc::channel(QUEUE);
        tokio::spawn(read_messages(reader, tx));
        let mut driver = Driver {
            pid,
            language_version: String::new(),
            tree,
            exited,
            requests,
            messages,
            stdout: Some(stdout),
            stderr: Some(stderr),
        };
        tracing::info!(pid, language = launch.language, "interpreter started");
        match tokio::time::timeout(READY_TIMEOUT, driver.ready()).await {
            Ok(Ok(version)) => driver.language_version = version,
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(CodeError::StartTimeout(READY_TIMEOUT)),
        }
        Ok(driver)
    }

    /// Waits for `ready`; an exit first is an error with the driver's
    /// stderr.
    async fn ready(&mut self) -> Result<String, CodeError> {
        loop {
            match self.messages.recv().await {
                Some(Ok(DriverMessage::Ready {
                    language_version, ..
                })) => return Ok(language_version),
                Some(Ok(DriverMessage::Unavailable { message })) => {
                    return Err(CodeError::Unavailable(message))
                }
                Some(Ok(other)) => {
                    tracing::debug!(?other, "message before ready; ignored");
                }
                Some(Err(e)) => return Err(e),
                None => break,
            }
        }
        // The socket closed: the driver is gone or going.
        let status = match tokio::time::timeout(Duration::from_secs(5), self.wait_exit()).await {
            Ok(exit) => describe(exit),
            Err(_) => "still running".to_owned(),
        };
        let stderr = self.stderr_tail().await;
        Err(CodeError::StartExited { status, stderr })
    }

    /// What the driver wrote to stderr so far (at most 4 KiB).
    async fn stderr_tail(&mut self) -> String {
        let mut text = Vec::new();
        if let Some(stderr) = &self.stderr {
            let mut buf = [0u8; 4096];
            while text.len() < buf.len() {
                match stderr.try_read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => text.extend_from_slice(&buf[..n]),
                }
            }
        }
        String::from_utf8_lossy(&text).trim().to_owned()
    }

    /// The interpreter's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The interpreter's version, from its `ready`.
    pub fn language_version(&self) -> &str {
        &self.language_version
    }

    /// The interpreter's process tree, for signals from other tasks.
    pub fn tree(&self) -> Arc<Tree> {
        Arc::clone(&self.tree)
    }

    /// A watch on the driver's exit.
    pub fn exited(&self) -> watch::Receiver<Option<Exit>> {
        self.exited.clone()
    }

    /// Whether the driver has exited.
    pub fn has_exited(&self) -> bool {
        self.exited.borrow().is_some()
    }

    /// Waits for the driver's exit.
    pub async fn wait_exit(&mut self) -> Option<Exit> {
        let mut exited = self.exited.clone();
        let exit = match exited.wait_for(Option::is_some).await {
            Ok(exit) => *exit,
            Err(_) => None,
        };
        exit
    }

    /// Sends a cell to run.
    pub async fn execute(&mut self, code: String) -> Result<(), CodeError> {
        wire::write_frame(&mut self.requests, &DriverRequest::ExecuteRequest { code }).await
    }

    /// SIGINT to the interpreter and everything it started.
    pub fn interrupt(tree: &Tree) {
        if let Err(e) = tree.signal(Signal::SIGINT, false) {
            tracing::debug!(error = %airlock_report::chain(&e), "interrupt not delivered");
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        tracing::debug!(pid = self.pid, "interpreter dropped; killing it");
        release(Arc::clone(&self.tree), self.exited.clone());
    }
}

/// Kills `tree`, then (in a task) waits for the exit and removes its cgroup.
fn release(tree: Arc<Tree>, mut exited: watch::Receiver<Option<Exit>>) {
    tree.kill();
    if tokio::runtime::Handle::try_current().is_err() {
        return;
    }
    tokio::spawn(async move {
        let _ = tokio::time::timeout(CGROUP_RELEASE, exited.wait_for(Option::is_some)).await;
        let deadline = tokio::time::Instant::now() + CGROUP_RELEASE;
        while tree.has_cgroup() && tokio::time::Instant::now() < deadline {
            tree.kill();
            tree.try_release_cgroup();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}

/// How a driver ended, for messages.
pub fn describe(exit: Option<Exit>) -> String {
    match exit {
        Some(Exit::Code(code)) => format!("exit status {code}"),
        Some(Exit::Signal(signal)) => match Signal::try_from(signal) {
            Ok(signal) => format!("killed by {signal}"),
            Err(_) => format!("killed by signal {signal}"),
        },
        None => "exit unknown".to_owned(),
    }
}

/// Reads frames until the socket closes or breaks.
async fn read_messages(mut reader: tokio::net::unix::OwnedReadHalf, tx: mpsc::Sender<Incoming>) {
    loop {
        match wire::read_frame(&mut reader).await {
            Ok(Some(message)) => {
                if tx.send(Ok(message)).await.is_err() {
                    return;
                }
            }
            Ok(None) => return,
            Err(e) => {
                let _ = tx.send(Err(e)).await;
                return;
            }
        }
    }
}
