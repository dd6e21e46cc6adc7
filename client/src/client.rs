//! [`Client`]: one connection to a server, and its service clients.

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::Channel;
use tonic::{Request, Status};

use airlock_api::auth;
use airlock_api::limits::MAX_MESSAGE_BYTES;
use airlock_api::v1::{
    code_client::CodeClient, events_client::EventsClient, files_client::FilesClient,
    ingress_client::IngressClient, keys_client::KeysClient, network_client::NetworkClient,
    processes_client::ProcessesClient, sandboxes_client::SandboxesClient,
    templates_client::TemplatesClient, usage_client::UsageClient,
    workspaces_client::WorkspacesClient, PingRequest, PingResponse,
};

use crate::error::ClientError;

/// Adds `authorization: Bearer KEY` to every call (nothing without a key).
#[derive(Clone)]
pub struct Bearer(Option<MetadataValue<Ascii>>);

impl std::fmt::Debug for Bearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Bearer(<key>)"
        } else {
            "Bearer(none)"
        })
    }
}

impl Interceptor for Bearer {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(value) = &self.0 {
            request.metadata_mut().insert(auth::HEADER, value.clone());
        }
        Ok(request)
    }
}

/// The channel every service client of a [`Client`] uses.
pub type Authed = InterceptedService<Channel, Bearer>;

/// A connection to an Airlock server. Cheap to clone: clones share the
/// connection.
#[derive(Debug, Clone)]
pub struct Client {
    channel: Channel,
    bearer: Bearer,
    /// Where it is connected, for messages.
    endpoint: String,
}

macro_rules! service {
    ($(#[$doc:meta])* $name:ident, $client:ident) => {
        $(#[$doc])*
        pub fn $name(&self) -> $client<Authed> {
            $client::with_interceptor(self.channel.clone(), self.bearer.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES)
        }
    };
}

impl Client {
    pub(crate) fn new(
        channel: Channel,
        key: Option<&str>,
        endpoint: String,
    ) -> Result<Client, ClientError> {
        let bearer = match key {
            None => Bearer(None),
            Some(key) => Bearer(Some(format!("{}{key}", auth::SCHEME).parse().map_err(
                |_| {
                    ClientError::Endpoint("the API key has characters a header cannot carry".into())
                },
            )?)),
        };
        Ok(Client {
            channel,
            bearer,
            endpoint,
        })
    }

    /// Where this client is connected (a socket path or a URL).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    service!(
        /// Lifecycle: create, list, pause, fork, kill ...
        sandboxes,
        SandboxesClient
    );
    service!(
        /// Programs.
        processes,
        ProcessesClient
    );
    service!(
        /// Files.
        files,
        FilesClient
    );
    service!(
        /// Cells of code and their contexts.
        code,
        CodeClient
    );
    service!(
        /// Network rules and audit.
        network,
        NetworkClient
    );
    service!(
        /// Ingress: a guest port's address and token, forwarded
        /// connections.
        ingress,
        IngressClient
    );
    service!(
        /// API keys (the owner's, on the Unix socket).
        keys,
        KeysClient
    );
    service!(
        /// Named workspaces: make, list, remove.
        workspaces,
        WorkspacesClient
    );
    service!(
        /// Templates built through the API, and their deletion
        /// ([`Client::build_template`] sends a build).
        templates,
        TemplatesClient
    );
    service!(
        /// Lifecycle events (watched from a sequence number on) and
        /// webhooks.
        events,
        EventsClient
    );
    service!(
        /// The usage ledger: what sandboxes used, by sandbox, key or day.
        usage,
        UsageClient
    );

    /// The server's version, API revision and features, and who this
    /// client is to it.
    pub async fn ping(&self) -> Result<PingResponse, ClientError> {
        Ok(self.sandboxes().ping(PingRequest {}).await?.into_inner())
    }
}
