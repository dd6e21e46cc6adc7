//! Starting the local server on demand: a client that finds nobody on the
//! local socket runs `airlock --verbose serve --socket SOCKET --ingress local` in the
//! background (its own process group, its output appended to
//! [`LOG_NAME`] beside the socket) and waits for it to answer `Ping`.

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::endpoint::Endpoint;
use crate::error::ClientError;

/// The local server's socket, in the state directories' parent.
pub const SOCKET_NAME: &str = "daemon.sock";
/// The log of a server started on demand, beside its socket.
pub const LOG_NAME: &str = "daemon.log";
/// How long a client waits for a server it started.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);

impl Client {
    /// Connects to the server on `socket`, starting one first when nobody
    /// answers there: `program --verbose serve --socket SOCKET`.
    pub async fn connect_or_start(socket: &Path, program: &Path) -> Result<Client, ClientError> {
        let endpoint = Endpoint::Local {
            socket: socket.to_owned(),
        };
        match endpoint.connect().await {
            Ok(client) => return Ok(client),
            Err(ClientError::Connect { source, .. })
                if matches!(
                    source.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
                ) => {}
            Err(error) => return Err(error),
        }
        let log = socket.with_file_name(LOG_NAME);
        let mut child = spawn_server(socket, program, &log)?;
        tracing::info!(pid = child.id(), socket = %socket.display(), "started the local server");
        let began = Instant::now();
        let mut pause = Duration::from_millis(10);
        loop {
            if let Ok(client) = answering(&endpoint).await {
                return Ok(client);
            }
            // A server that exited at once (it lost a race with another)
            // gets one more look, then its log is the answer.
            let exited = matches!(child.try_wait(), Ok(Some(_)));
            if exited || began.elapsed() >= START_TIMEOUT {
                tokio::time::sleep(pause).await;
                return answering(&endpoint)
                    .await
                    .map_err(|_| ClientError::NotStarted {
                        socket: socket.to_owned(),
                        log,
                        waited: began.elapsed(),
                    });
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }
}

/// A client of a server that answers `Ping`.
async fn answering(endpoint: &Endpoint) -> Result<Client, ClientError> {
    let client = endpoint.connect().await?;
    client.ping().await?;
    Ok(client)
}

fn spawn_server(
    socket: &Path,
    program: &Path,
    log: &Path,
) -> Result<std::process::Child, ClientError> {
    let failed = |source| ClientError::Spawn {
        program: program.to_owned(),
        source,
    };
    if let Some(parent) = log.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(failed)?;
    }
    let log_file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(log)
        .map_err(failed)?;
    let log_err = log_file.try_clone().map_err(failed)?;
    std::process::Command::new(program)
        .arg("--verbose")
        .arg("serve")
        .arg("--socket")
        .arg(socket)
        // HTTP ingress into sandboxes on a loopback port of its own.
        .arg("--ingress")
        .arg("local")
        // The owner's alone (no TCP listener, no keys): its sandboxes may
        // reach the host as `airlock run`'s do.
        .arg("--host-access")
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(log_file)
        .stderr(log_err)
        .spawn()
        .map_err(failed)
}
