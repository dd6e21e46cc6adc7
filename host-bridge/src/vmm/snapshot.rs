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
//! A whole sandbox saved to disk (pause to disk, fork) is the other use:
//! its RAM is private, so the stream carries all of it
//! ([`save_whole`], [`restore_whole`]); zero pages take a few bytes each.
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
/// Migration bandwidth with no practical limit (bytes per second).
const UNTHROTTLED: u64 = 1 << 40;
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
    #[error("the snapshot was written by QEMU {written_by}; this host runs QEMU {here}")]
    OtherQemu { written_by: String, here: String },
}

/// Stops the VM and writes its device state to `state`, leaving its RAM in
/// the shared memory file. The VM stays stopped.
pub async fn save_template(qmp_socket: &Path, state: &File) -> Result<(), SnapshotError> {
    let mut qmp = connect(qmp_socket).await?;
    qmp.execute("stop", None).await?;
    ignore_shared(&mut qmp).await?;
    migrate_out(&mut qmp, state).await
}

/// Stops the VM and writes all of it (devices, vCPUs and RAM) to `file`
/// from its current offset on. Returns the QEMU version that wrote it. The
/// VM stays stopped: [`cont`] runs it again.
pub async fn save_whole(qmp_socket: &Path, file: &File) -> Result<String, SnapshotError> {
    let mut qmp = connect(qmp_socket).await?;
    let version = version(&mut qmp).await?;
    qmp.execute("stop", None).await?;
    // A clone restored its state with `x-ignore-shared` on; its RAM is
    // private now and must go into the stream.
    set_ignore_shared(&mut qmp, false).await?;
    migrate_out(&mut qmp, file).await?;
    Ok(version)
}

/// Runs a VM stopped by [`save_whole`] again.
pub async fn cont(qmp_socket: &Path) -> Result<(), SnapshotError> {
    let mut qmp = connect(qmp_socket).await?;
    qmp.execute("cont", None).await?;
    Ok(())
}

/// Loads a whole VM written by [`save_whole`] from `file` (at its current
/// offset) into a VM started with `-incoming defer`, then runs it. Refuses
/// a stream another QEMU version wrote.
#[tracing::instrument(name = "restore_saved", skip_all)]
pub async fn restore_whole(
    qmp_socket: &Path,
    file: &File,
    written_by: &str,
) -> Result<(), SnapshotError> {
    let mut qmp = connect(qmp_socket).await?;
    same_qemu(&mut qmp, written_by).await?;
    migrate_in(&mut qmp, file, Then::Run).await
}

/// Turns a whole VM written by [`save_whole`] into a template: loads it
/// from `file` into a VM started with `-incoming defer` whose RAM is a
/// shared file, and, without running it, writes its device state to
/// `state` as [`save_template`] does. The RAM stays in the memory file,
/// so clones restore it with [`restore`].
pub async fn whole_to_template(
    qmp_socket: &Path,
    file: &File,
    written_by: &str,
    state: &File,
) -> Result<(), SnapshotError> {
    let mut qmp = connect(qmp_socket).await?;
    same_qemu(&mut qmp, written_by).await?;
    migrate_in(&mut qmp, file, Then::Stay).await?;
    qmp.execute("stop", None).await?;
    ignore_shared(&mut qmp).await?;
    migrate_out(&mut qmp, state).await
}

/// Refuses a stream that QEMU `written_by` wrote where another runs.
async fn same_qemu(qmp: &mut Qmp, written_by: &str) -> Result<(), SnapshotError> {
    let here = version(qmp).await?;
    if here != written_by {
        return Err(SnapshotError::OtherQemu {
            written_by: written_by.to_owned(),
            here,
        });
    }
    Ok(())
}

/// What a loaded VM does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    Run,
    Stay,
}

async fn version(qmp: &mut Qmp) -> Result<String, SnapshotError> {
    let answer = qmp.execute("query-version", None).await?;
    let part = |name: &str| {
        answer
            .pointer(&format!("/qemu/{name}"))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    Ok(format!(
        "{}.{}.{}",
        part("major"),
        part("minor"),
        part("micro")
    ))
}

/// Migrates the stopped VM to `file` and waits for the end.
async fn migrate_out(qmp: &mut Qmp, file: &File) -> Result<(), SnapshotError> {
    // The VM is stopped: no reason to throttle the stream to a file.
    qmp.execute(
        "migrate-set-parameters",
        Some(json!({ "max-bandwidth": UNTHROTTLED })),
    )
    .await?;
    qmp.send_fd(FD_NAME, file.as_fd()).await?;
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
#[tracing::instrument(name = "restore_template", skip_all)]
pub async fn restore(qmp_socket: &Path, state: &File) -> Result<(), SnapshotError> {
    let mut qmp = connect(qmp_socket).await?;
    ignore_shared(&mut qmp).await?;
    migrate_in(&mut qmp, state, Then::Run).await
}

/// Loads the stream in `file` into a VM waiting for it, then runs it or
/// leaves it stopped.
async fn migrate_in(qmp: &mut Qmp, file: &File, then: Then) -> Result<(), SnapshotError> {
    qmp.send_fd(FD_NAME, file.as_fd()).await?;
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
            // Started by itself: a stream taken from a running VM. One to
            // stay stopped is stopped at once (it ran for microseconds).
            "running" if then == Then::Stay => {
                qmp.execute("stop", None).await?;
                return Ok(());
            }
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
    if then == Then::Run {
        qmp.execute("cont", None).await?;
    }
    Ok(())
}

async fn ignore_shared(qmp: &mut Qmp) -> Result<(), QmpError> {
    set_ignore_shared(qmp, true).await
}

async fn set_ignore_shared(qmp: &mut Qmp, on: bool) -> Result<(), QmpError> {
    qmp.execute(
        "migrate-set-capabilities",
        Some(json!({ "capabilities": [{ "capability": "x-ignore-shared", "state": on }] })),
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
