//! [`UsageError`]: why the usage ledger could not be opened, read or
//! written.

use std::path::PathBuf;

/// Errors of the ledger.
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    #[error("cannot open the usage ledger {}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("cannot create the usage ledger {}", path.display())]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the usage ledger {} has schema version {found} and this server knows {known} at most; \
         run the newer server that wrote it",
        path.display()
    )]
    TooNew {
        path: PathBuf,
        found: u32,
        known: u32,
    },
    #[error("usage ledger")]
    Sql(#[from] rusqlite::Error),
}
