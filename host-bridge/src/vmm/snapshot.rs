//! Saving a template's device state and restoring a clone from it, over
//! QMP, as Kata Containers' VM templating does with QEMU:
//!
//! - the template's RAM is a shared file (`memory-backend-file,share=on`);
//!   with the `x-ignore-shared` capability the migration stream leaves it
//!   out, so the state file holds only the devices and vCPUs (tens of KB,
//!   written in milliseconds);
//! - a clone maps the same file privately (`share=off`: copy on write),
//!   starts with `-incoming defer`, and loads the state file.
//!
//! The files travel as descriptors (`getfd`, then `fd:NAME` URIs): QEMU's
//! seccomp sandbox forbids `exec:` URIs, and a descriptor opened by the
//! host needs no permission of the VMM user.

use std::fs::File;
use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::qmp::{Qmp, QmpError};

/// How long saving or loading the state may take.
const MIGRATION_TIMEOUT: Duration = Duration::from_secs(60);
/// How long QEMU may take to create its QMP socket.
const QMP_SOCKET_TIMEOUT: Duration = Duration::from_secs(10);
/// How often migration progress is polled.
const POLL: Duration = Duration::from_millis(2);
/// The name the state file's descriptor gets in QEMU.
const FD_NAME: &str = "airlock-state";

/// Errors saving or restoring a VM's state.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("qmp")]
    Qmp(#[from] QmpError),
    #[error("QEMU did not create its monitor socket {0} in time")]
    NoMonitor(String),
    #[error("migration {status}: {detail}")]
    Failed { status: String, detail: String },
    #[error("migration did not finish within {0:?}")]
    Timeout(Duration),
}

/// Stops the VM and writes its device state to `state`, leaving its RAM in
/// the shared memory file. The VM stays stopped.
pub async fn save_template(qmp_socket: &Path, state: &File) -> Result<(), SnapshotError> {
    let mut qmp = connect(qmp_socket).await?;
    qmp.execute("stop", None).await?;
    ignore_shared(&mut qmp).await?;
    qmp.send_fd(FD_NAME, state.as_fd()).await?;
    qmp.execute("migrate", Some(json!({ "uri": format!("fd:{FD_NAME}") })))
        .await?;
    let begin = Instant::now();
    loop {
        let info = qmp.execute("query-migrate", None).await?;
        match info.get("status").and_then(Value::as_str).unwrap_or("") {
            "completed" => return Ok(()),
            status @ ("failed" | "cancelled") => {
                return Err(SnapshotError::Failed {
                    status: status.to_owned(),
                    detail: detail(&info),
                })
            }
            _ => {}
        }
        if begin.elapsed() > MIGRATION_TIMEOUT {
            return Err(SnapshotError::Timeout(MIGRATION_TIMEOUT));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Loads `state` into a VM started with `-incoming defer`, then runs it.
pub async fn restore(qmp_socket: &Path, state: &File) -> Result<(), SnapshotError> {
    let mut qmp = connect(qmp_socket).await?;
    ignore_shared(&mut qmp).await?;
    qmp.send_fd(FD_NAME, state.as_fd()).await?;
    qmp.execute(
        "migrate-incoming",
        Some(json!({ "uri": format!("fd:{FD_NAME}") })),
    )
    .await?;
    let begin = Instant::now();
    loop {
        let status = qmp.execute("query-status", None).await?;
        match status.get("status").and_then(Value::as_str).unwrap_or("") {
            "paused" | "postmigrate" => break,
            "running" => return Ok(()),
            "inmigrate" => {}
            other => {
                let info = qmp.execute("query-migrate", None).await.unwrap_or_default();
                return Err(SnapshotError::Failed {
                    status: other.to_owned(),
                    detail: detail(&info),
                });
            }
        }
        let info = qmp.execute("query-migrate", None).await?;
        if info.get("status").and_then(Value::as_str) == Some("failed") {
            return Err(SnapshotError::Failed {
                status: "failed".into(),
                detail: detail(&info),
            });
        }
        if begin.elapsed() > MIGRATION_TIMEOUT {
            return Err(SnapshotError::Timeout(MIGRATION_TIMEOUT));
        }
        tokio::time::sleep(POLL).await;
    }
    qmp.execute("cont", None).await?;
    Ok(())
}

async fn ignore_shared(qmp: &mut Qmp) -> Result<(), QmpError> {
    qmp.execute(
        "migrate-set-capabilities",
        Some(json!({ "capabilities": [{ "capability": "x-ignore-shared", "state": true }] })),
    )
    .await
    .map(drop)
}

/// Connects once QEMU has created its monitor socket.
async fn connect(socket: &Path) -> Result<Qmp, SnapshotError> {
    let begin = Instant::now();
    loop {
        match Qmp::connect(socket).await {
            Ok(qmp) => return Ok(qmp),
            Err(QmpError::Io(error))
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
                ) && begin.elapsed() < QMP_SOCKET_TIMEOUT =>
            {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Err(QmpError::Io(_)) if begin.elapsed() >= QMP_SOCKET_TIMEOUT => {
                return Err(SnapshotError::NoMonitor(socket.display().to_string()))
            }
            Err(error) => return Err(error.into()),
        }
    }
}

fn detail(info: &Value) -> String {
    info.get("error-desc")
        .and_then(Value::as_str)
        .unwrap_or("no detail from QEMU")
        .to_owned()
}
