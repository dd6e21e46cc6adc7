//! A program in the guest, by pid or tag: its controls ([`ProcessHandle`]:
//! stdin, signals, terminal size) and what `Sandbox::list` says about it
//! ([`ProcessInfo`]).

use crate::lifecycle::channel::AgentChannel;
use airlock_proto::v1::process_client::ProcessClient;
use airlock_proto::v1::{
    process_selector, CloseStdinRequest, ProcessSelector, ResizeRequest, SendInputRequest,
    SendSignalRequest, StreamInputRequest,
};
use bytes::Bytes;
use futures::{Stream, StreamExt};

use super::signal::Signal;
use super::status::Exit;
use super::terminal::TerminalSize;
use airlock_proto::Feature;

use crate::error::{Error, Result};
use crate::features::AgentFeatures;
use crate::transport::CapMessages;

/// Names a program in the guest.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// By pid.
    Pid(u32),
    /// By the tag it was started with.
    Tag(String),
}

impl From<u32> for Target {
    fn from(pid: u32) -> Self {
        Target::Pid(pid)
    }
}

impl From<&str> for Target {
    fn from(tag: &str) -> Self {
        Target::Tag(tag.to_owned())
    }
}

impl From<String> for Target {
    fn from(tag: String) -> Self {
        Target::Tag(tag)
    }
}

impl Target {
    pub(crate) fn selector(&self) -> Option<ProcessSelector> {
        Some(ProcessSelector {
            selector: Some(match self {
                Target::Pid(pid) => process_selector::Selector::Pid(*pid),
                Target::Tag(tag) => process_selector::Selector::Tag(tag.clone()),
            }),
        })
    }
}

/// The controls of a program in the guest: its stdin, signals and terminal
/// size. Cheap to clone, usable from any task while another reads the
/// program's output.
#[derive(Debug, Clone)]
pub struct ProcessHandle {
    client: ProcessClient<AgentChannel>,
    target: Target,
    /// What the agent can do, for calls added after revision 2.
    features: AgentFeatures,
}

impl ProcessHandle {
    pub(crate) fn new(channel: AgentChannel, target: Target, features: AgentFeatures) -> Self {
        ProcessHandle {
            client: ProcessClient::new(channel).capped(),
            target,
            features,
        }
    }

    /// The program this handle controls.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Writes `data` to the program's stdin (it must have been started with
    /// `Stdin::Piped`). Returns once the bytes are in the pipe: a program
    /// that does not read makes this wait. Writes apply in call order.
    pub async fn write_stdin(&self, data: impl Into<Bytes>) -> Result<()> {
        self.client
            .clone()
            .send_input(SendInputRequest {
                process: self.target.selector(),
                data: data.into(),
            })
            .await
            .map_err(|status| Error::agent("Process.SendInput", status))?;
        Ok(())
    }

    /// Writes every chunk of `data` to the program's stdin, in order, over
    /// one stream. Stdin stays open afterwards; see [`close_stdin`].
    ///
    /// [`close_stdin`]: ProcessHandle::close_stdin
    pub async fn stream_stdin<S>(&self, data: S) -> Result<()>
    where
        S: Stream<Item = Bytes> + Send + 'static,
    {
        // The first message names the process (and carries no data), so an
        // unknown process fails at once and empty input is still a call.
        let first = StreamInputRequest {
            process: self.target.selector(),
            data: Bytes::new(),
        };
        let requests =
            futures::stream::once(async { first }).chain(data.map(|data| StreamInputRequest {
                process: None,
                data,
            }));
        self.client
            .clone()
            .stream_input(requests)
            .await
            .map_err(|status| Error::agent("Process.StreamInput", status))?;
        Ok(())
    }

    /// Closes the program's stdin after the input sent before; the program
    /// reads end-of-file. Closing twice is fine.
    pub async fn close_stdin(&self) -> Result<()> {
        self.client
            .clone()
            .close_stdin(CloseStdinRequest {
                process: self.target.selector(),
            })
            .await
            .map_err(|status| Error::agent("Process.CloseStdin", status))?;
        Ok(())
    }

    /// Sends `signal` to the program and everything it started (its cgroup
    /// in a VM). Fails with `FailedPrecondition` when nothing is left.
    pub async fn signal(&self, signal: Signal) -> Result<()> {
        self.send_signal(signal, false).await
    }

    /// Sends `signal` to the program alone, not to the processes it started.
    pub async fn signal_leader(&self, signal: Signal) -> Result<()> {
        self.send_signal(signal, true).await
    }

    /// Sets the window size of the program's terminal (it must have been
    /// started with `Command::pty`); the kernel sends SIGWINCH to the
    /// terminal's foreground job, as when a terminal window is resized.
    /// Fails with `FailedPrecondition` for a program without a terminal or
    /// one that has exited. Needs protocol revision 5.
    pub async fn resize(&self, size: TerminalSize) -> Result<()> {
        self.features.require(Feature::Pty)?;
        self.client
            .clone()
            .resize(ResizeRequest {
                process: self.target.selector(),
                rows: size.rows.into(),
                cols: size.cols.into(),
            })
            .await
            .map_err(|status| Error::agent("Process.Resize", status))?;
        Ok(())
    }

    /// Kills the program's whole tree (SIGKILL).
    pub async fn kill(&self) -> Result<()> {
        self.signal(Signal::KILL).await
    }

    async fn send_signal(&self, signal: Signal, leader_only: bool) -> Result<()> {
        self.client
            .clone()
            .send_signal(SendSignalRequest {
                process: self.target.selector(),
                signal: signal.number(),
                leader_only,
            })
            .await
            .map_err(|status| Error::agent("Process.SendSignal", status))?;
        Ok(())
    }
}

/// Where a listed program is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessState {
    /// Running, or its last output is still being collected.
    Running,
    /// Ended.
    Exited(Exit),
    /// Ended, but how is unknown.
    Unknown,
}

/// A program the agent knows: running, or recently finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessInfo {
    /// Its pid in the guest.
    pub pid: u32,
    /// The tag it was started with.
    pub tag: Option<String>,
    /// Its program and arguments.
    pub argv: Vec<String>,
    /// Running or how it ended.
    pub state: ProcessState,
    /// Whether a client is attached to its output.
    pub attached: bool,
    /// Bytes of output (stdout and stderr) it has written so far.
    pub output_bytes: u64,
    /// Offset of the oldest output byte the agent still holds for replay.
    pub held_from: u64,
}

impl ProcessInfo {
    pub(crate) fn from_proto(info: airlock_proto::v1::ProcessInfo) -> Result<ProcessInfo> {
        use airlock_proto::v1::ProcessState as P;
        let state = match (P::try_from(info.state), &info.exit) {
            (Ok(P::Running), _) => ProcessState::Running,
            (Ok(P::Exited), Some(exit)) => ProcessState::Exited(Exit::from_proto(exit)?),
            (Ok(P::Exited), None) => ProcessState::Unknown,
            (other, _) => {
                return Err(Error::Protocol(format!(
                    "process {} in unknown state {other:?}",
                    info.pid
                )))
            }
        };
        Ok(ProcessInfo {
            pid: info.pid,
            tag: (!info.tag.is_empty()).then_some(info.tag),
            argv: info.argv,
            state,
            attached: info.attached,
            output_bytes: info.output_bytes,
            held_from: info.held_from,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_from_pids_and_tags() {
        assert_eq!(Target::from(7), Target::Pid(7));
        assert_eq!(Target::from("web"), Target::Tag("web".into()));
        let selector = Target::from("web").selector().and_then(|s| s.selector);
        assert_eq!(
            selector,
            Some(process_selector::Selector::Tag("web".into()))
        );
    }
}
