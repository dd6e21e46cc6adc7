//! One cell: what to run ([`Cell`]), and its events as they come
//! ([`CellExecution`], [`CellEvent`]) or collected ([`CellOutput`]).

use std::sync::Arc;
use std::time::Duration;

use airlock_proto::v1::{code_event, CodeEvent, RunCodeRequest};
use bytes::Bytes;
use tonic::Streaming;

use super::context::Language;
use super::output::{CellDone, CellError, CellOutput, MimeBundle};
use crate::error::{Error, Result};
use crate::lifecycle::vm::VmShared;

/// Code to run in a context. `"1 + 1".into()` is a Python cell in the
/// default Python context.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cell {
    pub(crate) code: String,
    pub(crate) language: Option<Language>,
    pub(crate) context: Option<String>,
    pub(crate) timeout: Option<Duration>,
}

impl Cell {
    /// Python code for the default Python context.
    pub fn new(code: impl Into<String>) -> Self {
        Cell {
            code: code.into(),
            ..Cell::default()
        }
    }

    /// Runs in the default context of `language` (unless [`context`] names
    /// one; then it must be that context's language).
    ///
    /// [`context`]: Cell::context
    pub fn language(mut self, language: Language) -> Self {
        self.language = Some(language);
        self
    }

    /// Runs in the context with this id.
    pub fn context(mut self, id: impl Into<String>) -> Self {
        self.context = Some(id.into());
        self
    }

    /// A deadline: the cell is interrupted then (variables kept), and its
    /// interpreter killed if it has not stopped a few seconds later.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    pub(crate) fn to_request(&self) -> RunCodeRequest {
        RunCodeRequest {
            context_id: self.context.clone().unwrap_or_default(),
            language: self
                .language
                .map(|l| l.as_str().to_owned())
                .unwrap_or_default(),
            code: self.code.clone(),
            timeout_ms: self.timeout.map_or(0, |t| {
                u64::try_from(t.as_millis()).unwrap_or(u64::MAX).max(1)
            }),
        }
    }
}

impl From<&str> for Cell {
    fn from(code: &str) -> Cell {
        Cell::new(code)
    }
}

impl From<String> for Cell {
    fn from(code: String) -> Cell {
        Cell::new(code)
    }
}

/// Something a running cell produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CellEvent {
    /// Bytes written to stdout (by the cell or a program it started).
    Stdout(Bytes),
    /// Bytes written to stderr.
    Stderr(Bytes),
    /// The value of the last expression.
    Result(MimeBundle),
    /// A rich output (display(), a plot).
    Display(MimeBundle),
    /// What the cell raised.
    Error(CellError),
    /// The end; nothing follows.
    Done(CellDone),
}

impl CellEvent {
    /// The event a protocol message carries.
    pub fn from_proto(event: CodeEvent) -> Result<CellEvent> {
        Ok(match event.event {
            Some(code_event::Event::Stdout(data)) => CellEvent::Stdout(data),
            Some(code_event::Event::Stderr(data)) => CellEvent::Stderr(data),
            Some(code_event::Event::Result(output)) => {
                CellEvent::Result(MimeBundle::from_proto(output))
            }
            Some(code_event::Event::Display(output)) => {
                CellEvent::Display(MimeBundle::from_proto(output))
            }
            Some(code_event::Event::Error(error)) => CellEvent::Error(CellError {
                name: error.name,
                value: error.value,
                traceback: error.traceback,
            }),
            Some(code_event::Event::Done(done)) => CellEvent::Done(CellDone::from_proto(&done)),
            None => return Err(Error::Protocol("an empty code event".into())),
        })
    }
}

/// A running cell, as this client sees it. Dropping it before its end
/// interrupts the cell (the context stays).
#[derive(Debug)]
pub struct CellExecution {
    events: Streaming<CodeEvent>,
    done: bool,
    vm: Arc<VmShared>,
}

/// How long a broken stream waits for the VM's end to be noticed before
/// blaming the connection instead.
const VM_EXIT_GRACE: Duration = Duration::from_secs(3);

impl CellExecution {
    pub(crate) fn new(events: Streaming<CodeEvent>, vm: Arc<VmShared>) -> Self {
        CellExecution {
            events,
            done: false,
            vm,
        }
    }

    /// The next event, or `None` after [`CellEvent::Done`].
    pub async fn next_event(&mut self) -> Result<Option<CellEvent>> {
        if self.done {
            return Ok(None);
        }
        let message = match self.events.message().await {
            Ok(Some(message)) => message,
            Ok(None) => {
                return Err(Error::Protocol(
                    "the cell's stream ended before it was done".into(),
                ))
            }
            Err(status) => {
                if let Some(reason) = self.vm.ended_within(VM_EXIT_GRACE).await {
                    return Err(Error::VmGone {
                        call: "Code.RunCode",
                        reason,
                    });
                }
                return Err(Error::agent("Code.RunCode", status));
            }
        };
        let event = CellEvent::from_proto(message)?;
        self.done = matches!(event, CellEvent::Done(_));
        Ok(Some(event))
    }

    /// Collects everything to the cell's end.
    pub async fn output(mut self) -> Result<CellOutput> {
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        let mut result = None;
        let mut displays = Vec::new();
        let mut error = None;
        while let Some(event) = self.next_event().await? {
            match event {
                CellEvent::Stdout(data) => stdout.extend_from_slice(&data),
                CellEvent::Stderr(data) => stderr.extend_from_slice(&data),
                CellEvent::Result(bundle) => result = Some(bundle),
                CellEvent::Display(bundle) => displays.push(bundle),
                CellEvent::Error(raised) => error = Some(raised),
                CellEvent::Done(done) => {
                    return Ok(CellOutput {
                        stdout,
                        stderr,
                        result,
                        displays,
                        error,
                        done,
                    })
                }
            }
        }
        Err(Error::Protocol("the cell had already ended".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_becomes_its_request() {
        let request = Cell::new("x")
            .context("ctx")
            .timeout(Duration::from_micros(10))
            .to_request();
        assert_eq!(request.context_id, "ctx");
        assert_eq!(request.language, "");
        assert_eq!(
            request.timeout_ms, 1,
            "a deadline under 1 ms is 1 ms, not none"
        );
        let request = Cell::from("echo").language(Language::Bash).to_request();
        assert_eq!(request.language, "bash");
        assert_eq!(request.timeout_ms, 0);
    }
}
