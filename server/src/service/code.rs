//! `airlock.api.v1.Code`: cells in persistent interpreter contexts.

use std::collections::BTreeMap;
use std::pin::Pin;

use futures::Stream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code as GrpcCode, Request, Response, Status};

use airlock::{Cell, CellExecution, ContextOptions, Language, Sandbox};
use airlock_api::limits;
use airlock_api::reason::invalid;
use airlock_api::v1::{self as api, code_server};

use super::call::Call;
use super::Services;
use crate::convert;
use crate::status::error_status;
use crate::validate;

/// Events that may wait for a slow client.
const QUEUE: usize = 8;

type Events = Pin<Box<dyn Stream<Item = Result<api::CodeEvent, Status>> + Send>>;

fn language(field: &str, name: &str) -> Result<Language, Status> {
    match name {
        "" => Ok(Language::default()),
        name => name
            .parse()
            .map_err(|_| invalid(field, format!("{name:?} is not a language: python or bash"))),
    }
}

fn context_id(field: &str, id: &str) -> Result<(), Status> {
    validate::name(field, id)
}

/// Makes the context `id` of `language` with the sandbox's environment,
/// unless it exists.
async fn ensure_context(
    sandbox: &Sandbox,
    id: &str,
    language: Language,
    envs: &BTreeMap<String, String>,
) -> Result<(), Status> {
    let options = envs
        .iter()
        .fold(ContextOptions::new(language).id(id), |options, (k, v)| {
            options.env(k.clone(), v.clone())
        });
    match sandbox.contexts().create(&options).await {
        Ok(info) => {
            tracing::debug!(id = info.id, %language, "context created");
            Ok(())
        }
        Err(error) if error.agent_code() == Some(GrpcCode::AlreadyExists) => Ok(()),
        Err(error) => Err(error_status(&error)),
    }
}

/// Forwards a cell's events until it is done or the client goes (which
/// drops the execution: the cell is interrupted).
async fn pump(
    mut execution: CellExecution,
    events: mpsc::Sender<Result<api::CodeEvent, Status>>,
    _call: Call,
) {
    loop {
        let next = tokio::select! {
            next = execution.next_event() => next,
            () = events.closed() => return,
        };
        let message = match next {
            Ok(Some(event)) => Ok(convert::cell_event(event)),
            Ok(None) => return,
            Err(error) => Err(error_status(&error)),
        };
        let last = message.is_err();
        if events.send(message).await.is_err() || last {
            return;
        }
    }
}

#[tonic::async_trait]
impl code_server::Code for Services {
    type RunCodeStream = Events;

    async fn run_code(
        &self,
        request: Request<api::RunCodeRequest>,
    ) -> Result<Response<Self::RunCodeStream>, Status> {
        let call = self.admit(&request)?;
        let request = request.into_inner();
        if request.code.len() > limits::MAX_CODE_BYTES {
            return Err(invalid(
                "code",
                format!("more than {} bytes", limits::MAX_CODE_BYTES),
            ));
        }
        let language = language("language", &request.language)?;
        if !request.context_id.is_empty() {
            context_id("context_id", &request.context_id)?;
        }
        let timeout = request
            .timeout_secs
            .map(|secs| validate::seconds("timeout_secs", secs, limits::MAX_TIMEOUT_SECS))
            .transpose()?;
        let (entry, handle) = call.sandbox(&request.sandbox_id).await?;
        let mut cell = Cell::new(request.code).language(language);
        // A named context, or the language's own when the sandbox has an
        // environment to give it, is made with that environment first.
        let context = match request.context_id.as_str() {
            "" if entry.record.envs.is_empty() => None,
            "" => Some(language.as_str().to_owned()),
            id => Some(id.to_owned()),
        };
        if let Some(context) = context {
            ensure_context(&handle, &context, language, &entry.record.envs).await?;
            cell = cell.context(context);
        }
        if let Some(timeout) = timeout {
            cell = cell.timeout(timeout);
        }
        let execution = handle
            .run_code(cell)
            .await
            .map_err(|error| error_status(&error))?;
        let (events, stream) = mpsc::channel(QUEUE);
        self.state.spawn(pump(execution, events, call));
        Ok(Response::new(Box::pin(ReceiverStream::new(stream))))
    }

    async fn create_context(
        &self,
        request: Request<api::CreateContextRequest>,
    ) -> Result<Response<api::CodeContext>, Status> {
        let call = self.admit(&request)?;
        let request = request.into_inner();
        let language = language("language", &request.language)?;
        let own = validate::envs("envs", &request.envs)?;
        let (entry, handle) = call.sandbox(&request.sandbox_id).await?;
        let mut options = ContextOptions::new(language);
        if !request.context_id.is_empty() {
            context_id("context_id", &request.context_id)?;
            options = options.id(request.context_id.clone());
        }
        if !request.cwd.is_empty() {
            validate::guest_path("cwd", &request.cwd)?;
            options = options.cwd(request.cwd.clone());
        }
        if !request.user.is_empty() {
            options = options.user(request.user.clone());
        }
        for (key, value) in entry.record.envs.iter().chain(own.iter()) {
            options = options.env(key.clone(), value.clone());
        }
        let info = handle
            .contexts()
            .create(&options)
            .await
            .map_err(|error| error_status(&error))?;
        Ok(Response::new(convert::context(&info)))
    }

    async fn list_contexts(
        &self,
        request: Request<api::ListContextsRequest>,
    ) -> Result<Response<api::ListContextsResponse>, Status> {
        let call = self.admit(&request)?;
        let (_, handle) = call.sandbox(&request.get_ref().sandbox_id).await?;
        let contexts = handle
            .contexts()
            .list()
            .await
            .map_err(|error| error_status(&error))?
            .iter()
            .map(convert::context)
            .collect();
        Ok(Response::new(api::ListContextsResponse { contexts }))
    }

    async fn interrupt_context(
        &self,
        request: Request<api::ContextRequest>,
    ) -> Result<Response<api::CodeContext>, Status> {
        let call = self.admit(&request)?;
        let request = request.into_inner();
        context_id("context_id", &request.context_id)?;
        let (_, handle) = call.sandbox(&request.sandbox_id).await?;
        let info = handle
            .contexts()
            .interrupt(&request.context_id)
            .await
            .map_err(|error| error_status(&error))?;
        Ok(Response::new(convert::context(&info)))
    }

    async fn restart_context(
        &self,
        request: Request<api::ContextRequest>,
    ) -> Result<Response<api::CodeContext>, Status> {
        let call = self.admit(&request)?;
        let request = request.into_inner();
        context_id("context_id", &request.context_id)?;
        let (_, handle) = call.sandbox(&request.sandbox_id).await?;
        let info = handle
            .contexts()
            .restart(&request.context_id)
            .await
            .map_err(|error| error_status(&error))?;
        Ok(Response::new(convert::context(&info)))
    }

    async fn remove_context(
        &self,
        request: Request<api::ContextRequest>,
    ) -> Result<Response<api::RemoveContextResponse>, Status> {
        let call = self.admit(&request)?;
        let request = request.into_inner();
        context_id("context_id", &request.context_id)?;
        let (_, handle) = call.sandbox(&request.sandbox_id).await?;
        handle
            .contexts()
            .delete(&request.context_id)
            .await
            .map_err(|error| error_status(&error))?;
        Ok(Response::new(api::RemoveContextResponse {}))
    }
}
