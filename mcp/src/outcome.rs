//! [`Stop`]: why a tool ended early, and how the host hears it. As MCP
//! 2025-11-25 asks (SEP-1303), arguments a tool cannot take (out of bounds,
//! a relative path, a network rule the server refuses) are error results
//! (`isError`) the model reads and corrects, just as rmcp answers arguments
//! that do not fit the schema; so are failures of the sandbox, the program
//! or the server, with what to do. Protocol errors are for calls that
//! cannot be served at all: an unknown tool or a malformed request (rmcp
//! answers those), or an HTTP session used with another key.

use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::ErrorData;
use tonic::Code;

use airlock_client::api::ErrorReason;
use airlock_client::ClientError;
use airlock_report::chain;

/// A tool's answer, or a protocol error.
pub type Reply = Result<CallToolResult, ErrorData>;

/// Why a tool stopped before its answer.
#[derive(Debug)]
pub enum Stop {
    /// Arguments the tool cannot take: an error result saying which.
    Invalid(String),
    /// Not the caller's doing and not a bad call (`-32600` and the like).
    Protocol(ErrorData),
    /// A result with `isError`, for the model to read.
    Failed(String),
}

impl Stop {
    /// A failed call to the Airlock server while doing `what`.
    pub fn call(what: &str, error: ClientError) -> Stop {
        // The server's message, or the causes of a connection that failed.
        let message = chain(&error);
        if error.code() == Some(Code::InvalidArgument) {
            return Stop::Invalid(format!("{what}: {message}"));
        }
        let hint = match error.reason() {
            Some(ErrorReason::SandboxNotFound) => {
                " (list_sandboxes shows the sandboxes you can use; leave sandbox_id out to use \
                 this session's own sandbox)"
            }
            Some(ErrorReason::SandboxEnded) => " (create_sandbox makes a new one)",
            Some(ErrorReason::NoNetwork) => {
                " (this sandbox was created without network access: create_sandbox with \
                 allow_net makes one that has it)"
            }
            Some(ErrorReason::QuotaExceeded | ErrorReason::SandboxLimit) => {
                " (kill_sandbox the sandboxes you no longer need, then try again)"
            }
            Some(ErrorReason::Unauthenticated) => {
                " (the API key was refused: it may have been removed; reconnect with a valid key)"
            }
            _ => match &error {
                ClientError::Connect { .. } | ClientError::Transport { .. } => {
                    " (is the Airlock server running? `airlock serve` starts one)"
                }
                _ => "",
            },
        };
        Stop::Failed(format!("{what}: {message}{hint}"))
    }

    /// The answer the host gets.
    pub fn reply(self) -> Reply {
        match self {
            Stop::Invalid(message) => Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "invalid arguments: {message}"
            ))])),
            Stop::Protocol(error) => Err(error),
            Stop::Failed(message) => Ok(CallToolResult::error(vec![ContentBlock::text(message)])),
        }
    }
}

/// Runs a tool's body and turns its early stop into the answer.
pub fn finish(result: Result<CallToolResult, Stop>) -> Reply {
    result.or_else(Stop::reply)
}
