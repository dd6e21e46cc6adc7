//! [`AirlockTools`]: the MCP server handler of one session, and its tools,
//! one file per group:
//!
//! - `lifecycle`: `create_sandbox`, `list_sandboxes`, `kill_sandbox`,
//!   `pause_sandbox`, `resume_sandbox`;
//! - `command`: `run_command` (foreground, cut output; or background);
//! - `code`: `run_code` (printed output, the value, images, the error);
//! - `files`: `read_file`, `write_file`, `list_files`, `changed_files`;
//! - `network`: `network_log`;
//! - `ports`: `expose_port`;
//! - `snapshots`: `snapshot_sandbox`, `list_snapshots`, `delete_snapshot`
//!   (`create_sandbox` starts from one).
//!
//! Every tool that acts on a sandbox takes an optional `sandbox_id`; without
//! it the session's own sandbox is used, made on first need.

mod code;
mod command;
mod files;
mod lifecycle;
mod network;
mod ports;
mod schema;
mod snapshots;

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::{
    Implementation, InitializeRequestParams, InitializeResult, ProtocolVersion, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{tool_handler, ErrorData, RoleServer, ServerHandler};

use crate::session::Session;

pub use command::MAX_TIMEOUT_SECS;

/// What a host shows the model about this server.
const INSTRUCTIONS: &str = "\
Airlock runs code in disposable microVM sandboxes (Debian with Python 3 by default). \
Calls that name no sandbox_id use this session's own sandbox, started on first need and kept \
until the session ends: files, installed packages and Python variables persist between calls. \
run_code runs Python (or bash) in a persistent interpreter and returns the printed output, the \
value of the last expression, images (matplotlib plots) and errors with their traceback; \
run_command runs a shell command line. Long output is cut, and the whole of it is saved to a \
file in the sandbox that read_file can page through. The sandbox has no network unless it was \
created with allow_net. create_sandbox makes more sandboxes (another image, more memory, \
network access). expose_port gives the URL of a server a program listens on in a sandbox (start \
it with run_command and background true), for the user to open. snapshot_sandbox saves a \
sandbox's whole state under a name; create_sandbox with that snapshot starts copies of it.";

/// Which protocol revisions a session speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Every revision: the process is the session.
    Stdio,
    /// The revisions with an `initialize` handshake and a session (the
    /// session owns a sandbox, so the stateless revision, which has no
    /// session, is not offered; its clients fall back to the handshake).
    Http,
}

/// One session's MCP handler.
#[derive(Debug, Clone)]
pub struct AirlockTools {
    session: Arc<Session>,
    transport: Transport,
    tool_router: ToolRouter<AirlockTools>,
}

impl AirlockTools {
    pub fn new(session: Session, transport: Transport) -> AirlockTools {
        AirlockTools {
            session: Arc::new(session),
            transport,
            tool_router: Self::lifecycle_router()
                + Self::command_router()
                + Self::code_router()
                + Self::files_router()
                + Self::network_router()
                + Self::ports_router()
                + Self::snapshots_router(),
        }
    }

    /// The session (to close it when the transport ends).
    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for AirlockTools {
    fn get_info(&self) -> ServerConfig {
        let config = ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("airlock", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS);
        match self.transport {
            Transport::Stdio => config,
            Transport::Http => config.with_protocol_version(ProtocolVersion::V_2025_11_25),
        }
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        match self.transport {
            Transport::Stdio => Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS),
            Transport::Http => {
                Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
            }
        }
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        // Over HTTP the key that opens the session owns it.
        if let Err(stop) = self.session.admit(&context) {
            return Err(match stop.reply() {
                Err(error) => error,
                Ok(_) => ErrorData::invalid_request("the session cannot be opened", None),
            });
        }
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }
}
