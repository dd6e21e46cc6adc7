//! What can go wrong in the `Code` service, and the gRPC code each error
//! deserves (used by `crate::error`, the one place statuses are made).

use tonic::Code;

use crate::services::process::ProcessError;

/// An error from a context or a cell.
#[derive(Debug, thiserror::Error)]
pub enum CodeError {
    /// The request names a language the agent does not run.
    #[error("unknown language {0:?}; use python or bash")]
    UnknownLanguage(String),
    /// A context id that is not a name.
    #[error("bad context id {0:?}: use 1 to 64 characters of A-Z, a-z, 0-9, '.', '_' and '-'")]
    BadId(String),
    /// A cell names a language its context is not.
    #[error("context {id} runs {language}, not {asked}")]
    LanguageMismatch {
        /// The context.
        id: String,
        /// Its language.
        language: String,
        /// What the request said.
        asked: String,
    },
    /// No context by that id.
    #[error("no context {0}")]
    NoSuchContext(String),
    /// The id is taken.
    #[error("context {0} already exists")]
    Exists(String),
    /// The agent holds its most contexts.
    #[error("{0} contexts exist, the most the agent keeps; delete one first")]
    TooMany(usize),
    /// The interpreter is not in the guest.
    #[error("{program} not found in the guest; running {language} code needs an image with it (the default image has python3 and bash)")]
    InterpreterMissing {
        /// What is missing.
        program: String,
        /// The language that needs it.
        language: String,
    },
    /// The driver said the language cannot run here.
    #[error("{0}")]
    Unavailable(String),
    /// The driver could not be started (bad cwd, user, env...).
    #[error("cannot start the interpreter")]
    Start(#[source] ProcessError),
    /// The driver did not say it was ready in time.
    #[error("the interpreter did not start within {0:?}")]
    StartTimeout(std::time::Duration),
    /// The driver exited before it was ready.
    #[error("the interpreter exited at start ({status}): {stderr}")]
    StartExited {
        /// How it ended.
        status: String,
        /// What it wrote to stderr.
        stderr: String,
    },
    /// The socket or a pipe to the driver failed.
    #[error("the interpreter's channel failed")]
    DriverIo(#[source] std::io::Error),
    /// The driver sent something the wire format does not allow.
    #[error("the interpreter sent {0}")]
    Driver(String),
}

impl CodeError {
    /// The gRPC code for this error.
    pub fn code(&self) -> Code {
        match self {
            CodeError::UnknownLanguage(_)
            | CodeError::BadId(_)
            | CodeError::LanguageMismatch { .. } => Code::InvalidArgument,
            CodeError::NoSuchContext(_)
            | CodeError::InterpreterMissing { .. }
            | CodeError::Unavailable(_) => Code::NotFound,
            CodeError::Exists(_) => Code::AlreadyExists,
            CodeError::TooMany(_) => Code::ResourceExhausted,
            CodeError::StartTimeout(_) => Code::DeadlineExceeded,
            CodeError::Start(_)
            | CodeError::StartExited { .. }
            | CodeError::DriverIo(_)
            | CodeError::Driver(_) => Code::Internal,
        }
    }
}
