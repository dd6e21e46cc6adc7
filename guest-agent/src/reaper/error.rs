//! What can stop the child reaper from starting.

/// The reaper could not start.
#[derive(Debug, thiserror::Error)]
pub enum ReaperError {
    /// The `SIGCHLD` handler could not be installed.
    #[error("cannot watch SIGCHLD")]
    Signal(#[source] std::io::Error),
}
