//! `airlock.agent.v1.Process`: running programs in the guest.
//!
//! Every program is an [`Entry`] in the [`ProcessTable`]
//! (`table`), which outlives the call that started it. The files, in the
//! order a `Start` flows through them:
//!
//! - [`command`] validates the request (with [`user`] resolving who runs
//!   it) and spawns the child through the [`Reaper`], in its own process
//!   group (or, on a pseudo-terminal from [`pty`], its own session) and,
//!   where the agent has them, its own cgroup ([`cgroup`]), which it is
//!   born in (`crate::spawn`, whose `ChildSetup` also sets rlimits, drops
//!   capabilities and switches the user).
//! - [`entry`] holds one program's state: undelivered output ([`buffer`]),
//!   the attached client, the end, its stdin ([`stdin`]: a pipe or the
//!   terminal), its terminal for `Resize`, and its process tree
//!   ([`signal`]).
//! - [`output`] reads the pipes (or the terminal) into the entry, enforces
//!   the deadline and records the exit.
//! - [`attach`] is a client's event stream: `Start` attaches the caller,
//!   `Connect` re-attaches anyone later.
//!
//! [`ProcessError`] (in `error.rs`) names every failure; statuses are made
//! in `crate::error`.

pub mod attach;
pub mod buffer;
pub mod cgroup;
pub mod command;
pub mod entry;
pub mod error;
mod housekeeping;
pub mod output;
pub mod pty;
pub mod signal;
pub mod stdin;
pub mod table;
pub mod user;

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Instant;

use airlock_proto::v1::{
    process_server, CloseStdinRequest, CloseStdinResponse, ConnectRequest, ListRequest,
    ListResponse, ResizeRequest, ResizeResponse, SendInputRequest, SendInputResponse,
    SendSignalRequest, SendSignalResponse, StartRequest, StreamInputRequest, StreamInputResponse,
};
use tokio::net::unix::pipe::{Receiver, Sender};
use tonic::{Request, Response, Status, Streaming};

pub use error::ProcessError;

use crate::reaper::Reaper;
use attach::EventStream;
use cgroup::Cgroups;
use command::{Pipes, Spawned, Spec};
use entry::{Entry, Identity};
use output::Outputs;
use pty::{Master, WindowSize};
use stdin::StdinPipe;
use table::ProcessTable;

/// The Process service.
#[derive(Debug, Clone)]
pub struct ProcessService {
    reaper: Reaper,
    table: Arc<ProcessTable>,
    cgroups: Option<Arc<Cgroups>>,
}

impl ProcessService {
    /// A service spawning through `reaper`, with a cgroup per program when
    /// the agent can create them.
    pub fn new(reaper: Reaper) -> Self {
        Self {
            reaper,
            table: Arc::default(),
            cgroups: Cgroups::detect().map(Arc::new),
        }
    }

    /// The parent cgroup of every program, when the agent has cgroups.
    pub fn cgroup_parent(&self) -> Option<std::path::PathBuf> {
        self.cgroups.as_ref().map(|c| c.parent().to_owned())
    }

    /// The agent's cgroups, when it has them (the code service puts its
    /// interpreters in cgroups of their own beside the programs').
    pub fn cgroups(&self) -> Option<Arc<Cgroups>> {
        self.cgroups.clone()
    }

    /// Spawns `spec`, enters it in the table and attaches the caller.
    async fn start(&self, spec: Spec) -> Result<EventStream, ProcessError> {
        let received_us = crate::clock::boottime_us();
        let claim = self.table.reserve_tag(spec.tag().map(str::to_owned))?;
        let cgroup = self.cgroups.as_ref().and_then(|c| match c.create() {
            Ok(cgroup) => Some(cgroup),
            Err(e) => {
                tracing::warn!(error = %e, "cannot create a cgroup; using the process group");
                None
            }
        });
        match &cgroup {
            Some(cgroup) => {
                if let Err(e) = cgroup.apply(spec.limits()) {
                    let _ = cgroup.remove();
                    return Err(ProcessError::Limits(e));
                }
            }
            None if spec.needs_cgroup() => return Err(ProcessError::LimitsUnavailable),
            None => {}
        }
        let reaper = self.reaper.clone();
        let program = spec.program().to_owned();
        let (spec, cgroup, spawned) = tokio::task::spawn_blocking(move || {
            let spawned = spec.spawn(&reaper, cgroup.as_ref());
            (spec, cgroup, spawned)
        })
        .await
        .map_err(|e| ProcessError::Spawn {
            program: program.clone(),
            source: std::io::Error::other(e.to_string()),
        })?;
        let started = Instant::now();
        let spawned_us = crate::clock::boottime_us();
        let Spawned {
            pid,
            pipes: child_pipes,
            exit: exit_rx,
            pty_master,
        } = match spawned {
            Ok(spawned) => spawned,
            Err(e) => {
                if let Some(cgroup) = cgroup {
                    let _ = cgroup.remove();
                }
                tracing::info!(program, error = %airlock_report::chain(&e), "start failed");
                return Err(e);
            }
        };
        let tree = signal::Tree::new(pid, self.reaper.clone(), cgroup);
        let followed = match pty_master {
            Some(master) => terminal(pid, master),
            None => pipes(pid, child_pipes),
        };
        let io = match followed {
            Ok(io) => io,
            Err(e) => {
                tracing::error!(pid, error = %airlock_report::chain(&e), "cannot follow process; killing it");
                tree.kill();
                if let Some(cgroup) = tree.take_cgroup() {
                    self.table.linger(cgroup);
                }
                return Err(e);
            }
        };
        // Per program at debug: each line on the console (an emulated UART
        // under TCG) cost about half a millisecond of the exec.
        tracing::debug!(
            pid,
            program,
            tag = spec.tag(),
            cgroup = tree.has_cgroup(),
            pty = spec.has_pty(),
            "process started"
        );
        let entry = Arc::new(Entry::new(
            Identity {
                pid,
                tag: spec.tag().map(str::to_owned),
                argv: spec.argv().to_vec(),
                started,
                received_us,
                spawned_us,
            },
            io.stdin,
            io.terminal,
            tree,
        ));
        self.table.insert(Arc::clone(&entry), claim);
        // The caller attaches before the reader starts, so nothing the
        // program writes goes through the (lossy) replay buffer.
        let events = attach::events(Arc::clone(&entry), 0);
        tokio::spawn(output::follow(
            Arc::clone(&self.table),
            entry,
            io.outputs,
            exit_rx,
            output::Policy {
                timeout: spec.timeout(),
                transient: spec.transient(),
            },
            self.cgroups.clone(),
        ));
        Ok(events)
    }
}

#[tonic::async_trait]
impl process_server::Process for ProcessService {
    type StartStream = EventStream;
    type ConnectStream = EventStream;

    async fn start(
        &self,
        request: Request<StartRequest>,
    ) -> Result<Response<Self::StartStream>, Status> {
        let spec = Spec::from_request(request.into_inner())?;
        Ok(Response::new(ProcessService::start(self, spec).await?))
    }

    async fn connect(
        &self,
        request: Request<ConnectRequest>,
    ) -> Result<Response<Self::ConnectStream>, Status> {
        let request = request.into_inner();
        let entry = self.table.find(request.process.as_ref())?;
        tracing::debug!(
            pid = entry.pid(),
            from_offset = request.from_offset,
            "client connecting"
        );
        Ok(Response::new(attach::events(entry, request.from_offset)))
    }

    async fn list(&self, _request: Request<ListRequest>) -> Result<Response<ListResponse>, Status> {
        let processes = self.table.list().iter().map(|e| e.info()).collect();
        Ok(Response::new(ListResponse { processes }))
    }

    async fn send_input(
        &self,
        request: Request<SendInputRequest>,
    ) -> Result<Response<SendInputResponse>, Status> {
        let request = request.into_inner();
        let entry = self.table.find(request.process.as_ref())?;
        entry.stdin()?.write(&request.data).await?;
        Ok(Response::new(SendInputResponse {}))
    }

    async fn stream_input(
        &self,
        request: Request<Streaming<StreamInputRequest>>,
    ) -> Result<Response<StreamInputResponse>, Status> {
        let mut messages = request.into_inner();
        let Some(first) = messages.message().await? else {
            return Err(ProcessError::NoSelector.into());
        };
        let entry = self.table.find(first.process.as_ref())?;
        let stdin = entry.stdin()?;
        stdin.write(&first.data).await?;
        while let Some(message) = messages.message().await? {
            stdin.write(&message.data).await?;
        }
        Ok(Response::new(StreamInputResponse {}))
    }

    async fn close_stdin(
        &self,
        request: Request<CloseStdinRequest>,
    ) -> Result<Response<CloseStdinResponse>, Status> {
        let entry = self.table.find(request.get_ref().process.as_ref())?;
        entry.stdin()?.close().await?;
        Ok(Response::new(CloseStdinResponse {}))
    }

    async fn send_signal(
        &self,
        request: Request<SendSignalRequest>,
    ) -> Result<Response<SendSignalResponse>, Status> {
        let request = request.into_inner();
        let signal = signal::parse(request.signal)?;
        let entry = self.table.find(request.process.as_ref())?;
        tracing::info!(
            pid = entry.pid(),
            ?signal,
            leader_only = request.leader_only,
            "signal"
        );
        entry.tree().signal(signal, request.leader_only)?;
        Ok(Response::new(SendSignalResponse {}))
    }

    async fn resize(
        &self,
        request: Request<ResizeRequest>,
    ) -> Result<Response<ResizeResponse>, Status> {
        let request = request.into_inner();
        let size = WindowSize::from_request(request.rows, request.cols)?;
        let entry = self.table.find(request.process.as_ref())?;
        tracing::debug!(pid = entry.pid(), ?size, "resize");
        entry.resize(size)?;
        Ok(Response::new(ResizeResponse {}))
    }
}

/// The child's input and output as the runtime drives them.
#[derive(Debug)]
struct ChildIo {
    stdin: Option<StdinPipe>,
    terminal: Option<Master>,
    outputs: Outputs,
}

/// The child's terminal: input, output and size all go through `master`.
fn terminal(pid: u32, master: OwnedFd) -> Result<ChildIo, ProcessError> {
    let master = Master::new(master).map_err(|source| ProcessError::Pipe { pid, source })?;
    Ok(ChildIo {
        stdin: Some(StdinPipe::terminal(pid, master.writer())),
        terminal: Some(master.clone()),
        outputs: Outputs::Terminal(master),
    })
}

/// Takes the child's pipes for tokio.
fn pipes(pid: u32, child: Pipes) -> Result<ChildIo, ProcessError> {
    let Pipes {
        stdin,
        stdout,
        stderr,
    } = child;
    let pipe_err = |source| ProcessError::Pipe { pid, source };
    let output = |fd: Option<OwnedFd>| {
        let fd = fd.ok_or_else(|| std::io::Error::other("output not piped"))?;
        Receiver::from_owned_fd(fd)
    };
    let stdout = output(stdout).map_err(pipe_err)?;
    let stderr = output(stderr).map_err(pipe_err)?;
    let stdin = stdin
        .map(Sender::from_owned_fd)
        .transpose()
        .map_err(pipe_err)?;
    Ok(ChildIo {
        stdin: stdin.map(|w| StdinPipe::new(pid, w)),
        terminal: None,
        outputs: Outputs::Pipes { stdout, stderr },
    })
}
