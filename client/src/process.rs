//! [`ProcessStream`]: a program started through `Processes.Start`, its
//! events to read and its inputs to send.

use bytes::Bytes;
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

use airlock_api::limits::MAX_CHUNK_BYTES;
use airlock_api::v1::{
    process_event, process_input, ProcessEvent, ProcessInput, StartProcess, Started,
};

use crate::client::Client;
use crate::error::ClientError;

/// Inputs that may wait to go to the server.
const QUEUE: usize = 8;

/// A running program's events and inputs. Dropping it hangs up: the program
/// runs on, unless it was started with `kill_on_disconnect`.
#[derive(Debug)]
pub struct ProcessStream {
    started: Started,
    events: Streaming<ProcessEvent>,
    inputs: ProcessInputs,
}

impl Client {
    /// Starts a program and returns once it runs (or the server refused
    /// it).
    pub async fn start(&self, start: StartProcess) -> Result<ProcessStream, ClientError> {
        let (inputs, pending) = mpsc::channel(QUEUE);
        let first = ProcessInput {
            input: Some(process_input::Input::Start(start)),
        };
        inputs.send(first).await.map_err(|_| ClientError::Closed)?;
        let mut events = self
            .processes()
            .start(ReceiverStream::new(pending))
            .await?
            .into_inner();
        let started = match events.next().await {
            Some(Ok(ProcessEvent {
                event: Some(process_event::Event::Started(started)),
            })) => started,
            Some(Ok(_)) | None => return Err(ClientError::Closed),
            Some(Err(status)) => return Err(status.into()),
        };
        Ok(ProcessStream {
            started,
            events,
            inputs: ProcessInputs(inputs),
        })
    }
}

impl ProcessStream {
    /// The program's pid in the guest.
    pub fn pid(&self) -> u32 {
        self.started.pid
    }

    /// The program's next event (`None` after its exit). Cancel-safe.
    pub async fn next_event(&mut self) -> Result<Option<process_event::Event>, ClientError> {
        loop {
            match self.events.next().await {
                Some(Ok(ProcessEvent { event: Some(event) })) => return Ok(Some(event)),
                Some(Ok(ProcessEvent { event: None })) => continue,
                Some(Err(status)) => return Err(status.into()),
                None => return Ok(None),
            }
        }
    }

    /// Where to send the program's input.
    pub fn inputs(&self) -> ProcessInputs {
        self.inputs.clone()
    }
}

/// Sends a running program's input; sending fails once the call is over.
#[derive(Debug, Clone)]
pub struct ProcessInputs(mpsc::Sender<ProcessInput>);

impl ProcessInputs {
    async fn send(&self, input: process_input::Input) -> Result<(), ClientError> {
        let message = ProcessInput { input: Some(input) };
        self.0.send(message).await.map_err(|_| ClientError::Closed)
    }

    /// Bytes for stdin (sent in chunks the server takes).
    pub async fn stdin(&self, data: Bytes) -> Result<(), ClientError> {
        for chunk in data.chunks(MAX_CHUNK_BYTES / 4) {
            self.send(process_input::Input::Stdin(data.slice_ref(chunk)))
                .await?;
        }
        Ok(())
    }

    /// Closes stdin after what was sent.
    pub async fn close_stdin(&self) -> Result<(), ClientError> {
        self.send(process_input::Input::CloseStdin(true)).await
    }

    /// A signal for the program's tree.
    pub async fn signal(&self, number: i32) -> Result<(), ClientError> {
        self.send(process_input::Input::Signal(number)).await
    }

    /// A new terminal size.
    pub async fn resize(&self, rows: u32, cols: u32) -> Result<(), ClientError> {
        self.send(process_input::Input::Resize(
            airlock_api::v1::TerminalSize { rows, cols },
        ))
        .await
    }
}
