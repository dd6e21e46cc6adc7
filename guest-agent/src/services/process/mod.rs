//! `airlock.agent.v1.Process`: running programs in the guest.
//!
//! `Start` flows through three files: [`command`] validates the request and
//! spawns the child through the [`Reaper`] (on a blocking thread, as
//! `fork`/`exec` block); this module wraps the child's pipes for tokio and
//! sends `started`; [`output`] then streams the output and the exit into a
//! bounded channel that tonic turns into the response stream.
//! [`ProcessError`] (in `error.rs`) names every failure.

pub mod command;
mod error;
pub mod output;

use std::os::fd::OwnedFd;
use std::process::Child;

use airlock_proto::v1::{process_event, process_server, ProcessEvent, StartRequest, Started};
use tokio::net::unix::pipe::Receiver;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

pub use error::ProcessError;

use crate::reaper::Reaper;
use command::Spec;

/// Events buffered per process before the reader waits for the client:
/// at most this many chunks of [`output::CHUNK`] bytes.
const EVENT_QUEUE: usize = 16;

/// The Process service.
#[derive(Debug, Clone)]
pub struct ProcessService {
    reaper: Reaper,
}

impl ProcessService {
    /// A service spawning through `reaper`.
    pub fn new(reaper: Reaper) -> Self {
        Self { reaper }
    }
}

#[tonic::async_trait]
impl process_server::Process for ProcessService {
    type StartStream = ReceiverStream<Result<ProcessEvent, Status>>;

    async fn start(
        &self,
        request: Request<StartRequest>,
    ) -> Result<Response<Self::StartStream>, Status> {
        let spec = Spec::from_request(request.into_inner())?;
        let reaper = self.reaper.clone();
        let program = spec.program().to_owned();
        let spawned = tokio::task::spawn_blocking(move || spec.spawn(&reaper))
            .await
            .map_err(|e| ProcessError::Spawn {
                program: program.clone(),
                source: std::io::Error::other(e.to_string()),
            })?;
        let (mut child, exit_rx) = match spawned {
            Ok(spawned) => spawned,
            Err(e) => {
                tracing::info!(program, error = %crate::error::chain(&e), "start failed");
                return Err(e.into());
            }
        };
        let pid = child.id();
        tracing::info!(pid, program, "process started");

        let (stdout, stderr) = match output_pipes(&mut child) {
            Ok(pipes) => pipes,
            Err(e) => {
                // The child runs on and the reaper still reaps it.
                tracing::error!(pid, error = %crate::error::chain(&e), "cannot follow process");
                return Err(e.into());
            }
        };

        let (tx, rx) = mpsc::channel(EVENT_QUEUE);
        let started = ProcessEvent {
            event: Some(process_event::Event::Started(Started { pid })),
        };
        // The queue is empty and `rx` is alive: this cannot fail.
        let _ = tx.try_send(Ok(started));
        tokio::spawn(output::pump(pid, stdout, stderr, exit_rx, tx));
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// Takes the child's stdout and stderr pipes as non-blocking tokio pipes.
fn output_pipes(child: &mut Child) -> Result<(Receiver, Receiver), ProcessError> {
    let pid = child.id();
    let wrap = |fd: Option<OwnedFd>| {
        let fd = fd.ok_or_else(|| std::io::Error::other("output not piped"))?;
        Receiver::from_owned_fd(fd)
    };
    let stdout = wrap(child.stdout.take().map(OwnedFd::from));
    let stderr = wrap(child.stderr.take().map(OwnedFd::from));
    match (stdout, stderr) {
        (Ok(stdout), Ok(stderr)) => Ok((stdout, stderr)),
        (Err(source), _) | (_, Err(source)) => Err(ProcessError::Pipe { pid, source }),
    }
}
