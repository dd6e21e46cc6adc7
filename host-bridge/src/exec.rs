//! Running programs in a sandbox: [`Command`] describes one, [`Execution`]
//! follows it as it runs, and [`Output`] collects everything at the end.
//!
//! An execution is the agent's `Process.Start` stream: one `started`, output
//! chunks in arrival order, one `exited`. The protocol guarantees that every
//! byte the program wrote arrives before `exited`.

use std::collections::BTreeMap;
use std::fmt;

use airlock_proto::v1::{exited, process_event, ProcessEvent, StartRequest};
use bytes::Bytes;
use tonic::Streaming;

use crate::error::{Error, Result};

/// A program to run in a sandbox, built like `std::process::Command`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    argv: Vec<String>,
    env: BTreeMap<String, String>,
    cwd: Option<String>,
}

impl Command {
    /// A command running `program`, looked up in the guest's `PATH` when it
    /// has no `/`.
    pub fn new(program: impl Into<String>) -> Self {
        Command {
            argv: vec![program.into()],
            env: BTreeMap::new(),
            cwd: None,
        }
    }

    /// Appends one argument.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.argv.push(arg.into());
        self
    }

    /// Appends arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.argv.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets an environment variable (on top of the guest's default ones).
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// Sets the working directory in the guest.
    pub fn cwd(mut self, dir: impl Into<String>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// The program and its arguments.
    pub fn argv(&self) -> &[String] {
        &self.argv
    }

    pub(crate) fn to_request(&self) -> StartRequest {
        StartRequest {
            argv: self.argv.clone(),
            env: self.env.clone().into_iter().collect(),
            cwd: self.cwd.clone().unwrap_or_default(),
            ..StartRequest::default()
        }
    }
}

/// How a program ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// It called `exit(code)`.
    Code(i32),
    /// A signal killed it.
    Signal(i32),
}

impl ExitStatus {
    /// True for exit code 0.
    pub fn success(self) -> bool {
        self == ExitStatus::Code(0)
    }

    /// The exit code, if it exited normally.
    pub fn code(self) -> Option<i32> {
        match self {
            ExitStatus::Code(code) => Some(code),
            ExitStatus::Signal(_) => None,
        }
    }

    /// The code a shell would report: the exit code, or 128 + the signal.
    pub fn shell_code(self) -> i32 {
        match self {
            ExitStatus::Code(code) => code,
            ExitStatus::Signal(signal) => 128 + signal,
        }
    }
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitStatus::Code(code) => write!(f, "exit code {code}"),
            ExitStatus::Signal(signal) => write!(f, "killed by signal {signal}"),
        }
    }
}

/// Something a running program produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A chunk of standard output.
    Stdout(Bytes),
    /// A chunk of standard error.
    Stderr(Bytes),
    /// The program ended; no event follows.
    Exited(ExitStatus),
}

/// Everything a finished program produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// A program running in the guest.
#[derive(Debug)]
pub struct Execution {
    pid: u32,
    events: Streaming<ProcessEvent>,
    status: Option<ExitStatus>,
}

impl Execution {
    /// Reads the mandatory `started` event.
    pub(crate) async fn begin(mut events: Streaming<ProcessEvent>) -> Result<Self> {
        match next_proto_event(&mut events).await? {
            Some(process_event::Event::Started(started)) => Ok(Execution {
                pid: started.pid,
                events,
                status: None,
            }),
            other => Err(Error::Protocol(format!(
                "expected a started event, got {other:?}"
            ))),
        }
    }

    /// The program's pid in the guest.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The next event, or `None` after [`Event::Exited`] was returned.
    pub async fn next_event(&mut self) -> Result<Option<Event>> {
        if self.status.is_some() {
            return Ok(None);
        }
        let event = match next_proto_event(&mut self.events).await? {
            Some(process_event::Event::Stdout(data)) => Event::Stdout(data),
            Some(process_event::Event::Stderr(data)) => Event::Stderr(data),
            Some(process_event::Event::Exited(exited)) => {
                let status = match exited.status {
                    Some(exited::Status::Code(code)) => ExitStatus::Code(code),
                    Some(exited::Status::Signal(signal)) => ExitStatus::Signal(signal),
                    None => return Err(Error::Protocol("exited event without a status".into())),
                };
                self.status = Some(status);
                Event::Exited(status)
            }
            Some(process_event::Event::Started(_)) => {
                return Err(Error::Protocol("a second started event".into()))
            }
            Some(process_event::Event::Dropped(_)) => {
                return Err(Error::Protocol("unexpected dropped event".into()))
            }
            None => {
                return Err(Error::Protocol(
                    "the output stream ended without an exit status".into(),
                ))
            }
        };
        Ok(Some(event))
    }

    /// Collects all remaining output and the exit status.
    pub async fn output(mut self) -> Result<Output> {
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        while let Some(event) = self.next_event().await? {
            match event {
                Event::Stdout(data) => stdout.extend_from_slice(&data),
                Event::Stderr(data) => stderr.extend_from_slice(&data),
                Event::Exited(status) => {
                    return Ok(Output {
                        status,
                        stdout,
                        stderr,
                    })
                }
            }
        }
        Err(Error::Protocol("execution already finished".into()))
    }

    /// Discards remaining output and returns the exit status.
    pub async fn wait(mut self) -> Result<ExitStatus> {
        loop {
            match self.next_event().await? {
                Some(Event::Exited(status)) => return Ok(status),
                Some(_) => {}
                None => {
                    return self
                        .status
                        .ok_or_else(|| Error::Protocol("execution already finished".into()))
                }
            }
        }
    }
}

async fn next_proto_event(
    events: &mut Streaming<ProcessEvent>,
) -> Result<Option<process_event::Event>> {
    match events.message().await {
        Ok(Some(ProcessEvent {
            event: Some(event), ..
        })) => Ok(Some(event)),
        Ok(Some(ProcessEvent { event: None, .. })) => {
            Err(Error::Protocol("empty process event".into()))
        }
        Ok(None) => Ok(None),
        Err(status) => Err(Error::agent("Process.Start", status)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_builds_the_request() {
        let request = Command::new("python3")
            .arg("-c")
            .args(["print(1)"])
            .env("A", "1")
            .cwd("/tmp")
            .to_request();
        assert_eq!(request.argv, ["python3", "-c", "print(1)"]);
        assert_eq!(request.env.get("A").map(String::as_str), Some("1"));
        assert_eq!(request.cwd, "/tmp");
    }

    #[test]
    fn shell_codes() {
        assert_eq!(ExitStatus::Code(3).shell_code(), 3);
        assert_eq!(ExitStatus::Signal(9).shell_code(), 137);
        assert!(ExitStatus::Code(0).success());
        assert!(!ExitStatus::Signal(9).success());
    }
}
