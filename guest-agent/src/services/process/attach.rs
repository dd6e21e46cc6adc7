//! A client attached to a program's output: the response stream of `Start`
//! and `Connect`.
//!
//! The stream sends `started{pid}`, then whatever [`Entry::next_for`]
//! yields (a `dropped` marker, output chunks with their offsets, and finally
//! `exited`), pulling one item at a time as tonic asks for it, so HTTP/2
//! flow control reaches back to the program. Dropping the stream (the
//! client went away) detaches it; the program runs on, and what was in
//! flight stays in the output log for the next client.

use std::pin::Pin;
use std::sync::Arc;

use airlock_proto::v1::{process_event, OutputDropped, ProcessEvent, Started};
use futures::Stream;
use tonic::Status;

use super::buffer::{Chunk, Stream as Pipe};
use super::entry::{exited_message, End, Entry, Next};
use super::ProcessError;

/// The events of one attached client.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<ProcessEvent, Status>> + Send>>;

/// Attaches a new client to `entry`, reading from `from_offset`, and
/// returns its events.
pub fn events(entry: Arc<Entry>, from_offset: u64) -> EventStream {
    let id = entry.attach(from_offset);
    let attachment = Attachment {
        entry,
        id,
        started_sent: false,
        done: false,
    };
    Box::pin(futures::stream::unfold(attachment, |mut a| async move {
        let item = a.next().await?;
        Some((item, a))
    }))
}

/// One client's place on an entry; detaches when dropped.
#[derive(Debug)]
struct Attachment {
    entry: Arc<Entry>,
    id: u64,
    started_sent: bool,
    done: bool,
}

impl Attachment {
    async fn next(&mut self) -> Option<Result<ProcessEvent, Status>> {
        if self.done {
            return None;
        }
        let pid = self.entry.pid();
        if !self.started_sent {
            self.started_sent = true;
            let stamps = self.entry.stamps();
            let started = Started {
                pid,
                received_us: stamps.received_us,
                spawned_us: stamps.spawned_us,
            };
            return Some(Ok(event(process_event::Event::Started(started), 0)));
        }
        let item = match self.entry.next_for(self.id).await {
            Next::Dropped(bytes) => Ok(event(
                process_event::Event::Dropped(OutputDropped { bytes }),
                0,
            )),
            Next::Chunk(offset, Chunk { stream, data }) => Ok(event(
                match stream {
                    Pipe::Stdout => process_event::Event::Stdout(data),
                    Pipe::Stderr => process_event::Event::Stderr(data),
                },
                offset,
            )),
            Next::End(End::Exited(report)) => {
                self.done = true;
                Ok(event(
                    process_event::Event::Exited(exited_message(&report, self.entry.stamps())),
                    0,
                ))
            }
            Next::End(End::Lost) => {
                self.done = true;
                Err(ProcessError::Lost { pid }.into())
            }
            Next::Displaced => {
                self.done = true;
                Err(ProcessError::Displaced(pid).into())
            }
        };
        Some(item)
    }
}

impl Drop for Attachment {
    fn drop(&mut self) {
        self.entry.detach(self.id);
    }
}

fn event(event: process_event::Event, offset: u64) -> ProcessEvent {
    ProcessEvent {
        event: Some(event),
        offset,
    }
}
