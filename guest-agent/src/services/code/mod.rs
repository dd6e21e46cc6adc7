//! `airlock.agent.v1.Code`: running code in persistent interpreter
//! contexts, as a notebook does (protocol revision 7).
//!
//! A context is a driver process (`driver.py`, embedded here, run by the
//! guest's `python3`) that keeps one Python namespace, or one bash process,
//! between cells; `charts.py`, embedded beside it, turns a matplotlib
//! figure into chart data. The files, in the order a `RunCode` flows through them:
//!
//! - [`contexts`]: the contexts by id; the default context of a language is
//!   created on first use.
//! - [`context`]: one context; cells queue on its driver, `interrupt`,
//!   `restart` and `delete` act on it while a cell runs.
//! - [`driver`]: starting a driver (as an exec would: user, environment,
//!   cgroup) with a socket for its messages and pipes for its output.
//! - [`cell`]: one cell: the driver's output and messages become
//!   `CodeEvent`s; the deadline interrupts, then kills.
//! - [`wire`]: the driver's length-prefixed JSON messages and MIME bundles.
//! - [`CodeError`] (in `error.rs`) names every failure; statuses are made in
//!   `crate::error`.
//!
//! Why a driver and not a Jupyter kernel: see docs/architecture.md.

pub mod cell;
pub mod context;
pub mod contexts;
pub mod driver;
pub mod error;
pub mod wire;

use std::sync::Arc;
use std::time::Duration;

use airlock_proto::v1::{
    code_server, CodeEvent, ContextInfo, ContextRequest, CreateContextRequest,
    DeleteContextResponse, ListContextsRequest, ListContextsResponse, RunCodeRequest,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

pub use error::CodeError;

use crate::reaper::Reaper;
use crate::services::process::cgroup::Cgroups;
use context::Spawner;
use contexts::Contexts;

/// Events that may wait for a slow client.
const QUEUE: usize = 4;

/// The Code service.
#[derive(Debug, Clone)]
pub struct CodeService {
    contexts: Arc<Contexts>,
}

impl CodeService {
    /// A service whose interpreters start through `reaper`, each in its own
    /// cgroup when `cgroups` is there.
    pub fn new(reaper: Reaper, cgroups: Option<Arc<Cgroups>>) -> Self {
        CodeService {
            contexts: Arc::new(Contexts::new(Spawner { reaper, cgroups })),
        }
    }
}

#[tonic::async_trait]
impl code_server::Code for CodeService {
    type RunCodeStream = ReceiverStream<Result<CodeEvent, Status>>;

    async fn create_context(
        &self,
        request: Request<CreateContextRequest>,
    ) -> Result<Response<ContextInfo>, Status> {
        let context = self.contexts.create(request.into_inner()).await?;
        Ok(Response::new(context.info()))
    }

    async fn run_code(
        &self,
        request: Request<RunCodeRequest>,
    ) -> Result<Response<Self::RunCodeStream>, Status> {
        let request = request.into_inner();
        let context = if request.context_id.is_empty() {
            let language = contexts::language(&request.language)?;
            self.contexts.default_for(language).await?
        } else {
            let context = self.contexts.get(&request.context_id)?;
            if !request.language.is_empty()
                && contexts::language(&request.language)? != context.language()
            {
                return Err(CodeError::LanguageMismatch {
                    id: context.id().to_owned(),
                    language: context.language().to_owned(),
                    asked: request.language,
                }
                .into());
            }
            context
        };
        let timeout = (request.timeout_ms > 0).then(|| Duration::from_millis(request.timeout_ms));
        tracing::debug!(id = context.id(), bytes = request.code.len(), "cell");
        let (events, stream) = mpsc::channel(QUEUE);
        tokio::spawn(context.run(request.code, timeout, events));
        Ok(Response::new(ReceiverStream::new(stream)))
    }

    async fn interrupt_context(
        &self,
        request: Request<ContextRequest>,
    ) -> Result<Response<ContextInfo>, Status> {
        let context = self.contexts.get(&request.into_inner().id)?;
        Ok(Response::new(context.interrupt()))
    }

    async fn restart_context(
        &self,
        request: Request<ContextRequest>,
    ) -> Result<Response<ContextInfo>, Status> {
        let context = self.contexts.get(&request.into_inner().id)?;
        Ok(Response::new(context.restart().await?))
    }

    async fn delete_context(
        &self,
        request: Request<ContextRequest>,
    ) -> Result<Response<DeleteContextResponse>, Status> {
        self.contexts.delete(&request.into_inner().id).await?;
        Ok(Response::new(DeleteContextResponse {}))
    }

    async fn list_contexts(
        &self,
        _request: Request<ListContextsRequest>,
    ) -> Result<Response<ListContextsResponse>, Status> {
        let contexts = self.contexts.list().iter().map(|c| c.info()).collect();
        Ok(Response::new(ListContextsResponse { contexts }))
    }
}
