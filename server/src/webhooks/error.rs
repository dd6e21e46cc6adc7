//! The webhooks' errors: [`WebhooksError`] wrapping [`HooksError`] (the
//! list of webhooks) and [`OutboxError`] (a webhook's deliveries on disk).

use std::path::PathBuf;

/// Errors of the webhooks' store.
#[derive(Debug, thiserror::Error)]
pub enum WebhooksError {
    #[error(transparent)]
    Hooks(#[from] HooksError),
    #[error(transparent)]
    Outbox(#[from] OutboxError),
    #[error("cannot {action} {}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Errors reading or writing the webhooks.
#[derive(Debug, thiserror::Error)]
pub enum HooksError {
    #[error("cannot {action} {}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not a list of webhooks", path.display())]
    Corrupt {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot make a secret")]
    Secret(#[source] std::io::Error),
}

/// Errors reading or writing the outbox.
#[derive(Debug, thiserror::Error)]
pub enum OutboxError {
    #[error("cannot {action} {}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not a delivery", path.display())]
    Corrupt {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}
