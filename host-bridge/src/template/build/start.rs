//! `START` and `READY` in the VM that becomes the snapshot: the program is
//! started as an agent process tagged [`START_TAG`] (listed and signalled
//! like any other in every sandbox), the host detaches from it, and the
//! check runs until it passes. Both speak to the agent directly: this VM
//! is not a `Sandbox`, it becomes the template.

use std::time::{Duration, Instant};

use airlock_proto::v1::process_client::ProcessClient;
use airlock_proto::v1::process_event::Event as ProtoEvent;
use airlock_proto::v1::{exited, ListRequest, ProcessState, StartRequest};
use tonic::transport::Channel;

use crate::error::Error;
use crate::template::{Program, Ready, StepContext};
use crate::transport::CapMessages;

use super::BuildError;

/// The tag of the `START` process in every sandbox of a template.
pub const START_TAG: &str = "start";
/// Pause between two tries of the check.
const RETRY: Duration = Duration::from_millis(200);

/// What was started: its pid and start time (clock ticks since boot).
#[derive(Debug, Clone, Copy)]
pub struct Started {
    pub pid: u32,
    pub ticks: Option<u64>,
}

fn agent(call: &'static str) -> impl FnOnce(tonic::Status) -> BuildError {
    move |status| BuildError::Sandbox(Box::new(Error::agent(call, status)))
}

/// Starts `program` with `context` and waits for `ready`.
pub async fn start_and_wait(
    channel: Channel,
    program: &Program,
    context: &StepContext,
    ready: Option<&Ready>,
) -> Result<Started, BuildError> {
    let mut client = ProcessClient::new(channel.clone()).capped();
    let mut events = client
        .start(StartRequest {
            argv: program.argv(),
            env: context.env.iter().cloned().collect(),
            cwd: context.workdir.clone().unwrap_or_default(),
            user: context.user.clone().unwrap_or_default(),
            tag: START_TAG.to_owned(),
            ..Default::default()
        })
        .await
        .map_err(agent("Process.Start"))?
        .into_inner();
    let pid = match events.message().await.map_err(agent("Process.Start"))? {
        Some(event) => match event.event {
            Some(ProtoEvent::Started(started)) => started.pid,
            other => {
                return Err(BuildError::Start(format!(
                    "the agent answered START with {other:?}"
                )))
            }
        },
        None => return Err(BuildError::Start("the agent ended START's stream".into())),
    };
    // The program runs on without a client; its output waits for one.
    drop(events);
    if let Some(ready) = ready {
        wait_ready(&channel, pid, ready).await?;
    }
    let ticks = start_ticks(&channel, pid).await;
    Ok(Started { pid, ticks })
}

async fn wait_ready(channel: &Channel, pid: u32, ready: &Ready) -> Result<(), BuildError> {
    let began = Instant::now();
    let probe = ready.probe_argv();
    loop {
        if let Some(code) = run(channel, &probe).await?.0 {
            if code == 0 {
                return Ok(());
            }
        }
        if let Some(status) = exited(channel, pid).await? {
            return Err(BuildError::Start(format!(
                "START exited ({status}) before {} passed",
                ready.describe()
            )));
        }
        if began.elapsed() >= ready.timeout {
            return Err(BuildError::Start(format!(
                "{} did not pass within {:?}; START (pid {pid}) is still running",
                ready.describe(),
                ready.timeout
            )));
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// How `pid` ended, if it did.
async fn exited(channel: &Channel, pid: u32) -> Result<Option<String>, BuildError> {
    let list = ProcessClient::new(channel.clone())
        .capped()
        .list(ListRequest {})
        .await
        .map_err(agent("Process.List"))?
        .into_inner();
    Ok(list
        .processes
        .into_iter()
        .find(|p| p.pid == pid && p.state == ProcessState::Exited as i32)
        .map(|p| match p.exit.and_then(|e| e.status) {
            Some(exited::Status::Code(code)) => format!("exit code {code}"),
            Some(exited::Status::Signal(signal)) => format!("signal {signal}"),
            None => "unknown status".to_owned(),
        }))
}

/// Runs `argv` to its end: its exit code (`None` if a signal ended it)
/// and its standard output.
async fn run(channel: &Channel, argv: &[String]) -> Result<(Option<i32>, Vec<u8>), BuildError> {
    let mut events = ProcessClient::new(channel.clone())
        .capped()
        .start(StartRequest {
            argv: argv.to_vec(),
            transient: true,
            ..Default::default()
        })
        .await
        .map_err(agent("Process.Start"))?
        .into_inner();
    let mut stdout = Vec::new();
    while let Some(event) = events.message().await.map_err(agent("Process.Start"))? {
        match event.event {
            Some(ProtoEvent::Stdout(data)) => stdout.extend_from_slice(&data),
            Some(ProtoEvent::Exited(exit)) => {
                let code = match exit.status {
                    Some(exited::Status::Code(code)) => Some(code),
                    _ => None,
                };
                return Ok((code, stdout));
            }
            _ => {}
        }
    }
    Ok((None, stdout))
}

/// `/proc/PID/stat`'s start time (field 22), read in the guest.
async fn start_ticks(channel: &Channel, pid: u32) -> Option<u64> {
    let argv = ["cat".to_owned(), format!("/proc/{pid}/stat")];
    let (_, stdout) = run(channel, &argv).await.ok()?;
    parse_start_ticks(&String::from_utf8_lossy(&stdout))
}

/// Field 22 of a `/proc/PID/stat` line (the command may hold spaces and
/// parentheses, so fields are counted after the last `)`).
pub fn parse_start_ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    // After ")": field 3 (state) is the first.
    rest.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_is_field_22() {
        let stat = "412 (python3 (x)) S 1 412 412 0 -1 4194560 2519 0 0 0 28 9 0 0 20 0 1 0 1234 31358976 2427";
        assert_eq!(parse_start_ticks(stat), Some(1234));
        assert_eq!(parse_start_ticks("garbage"), None);
    }
}
