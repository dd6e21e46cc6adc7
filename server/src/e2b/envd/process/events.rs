//! Our process events in E2B's words: `started` is `start`, output is
//! `data` (stdout, stderr, or `pty` for a terminal's), the exit is `end`
//! with the code, whether the program exited by itself, and the status
//! text envd gives (`exit status N`, `signal: killed`); keepalives every
//! `Keepalive-Ping-Interval` seconds while a stream is quiet.

use std::time::Duration;

use futures::{Stream, StreamExt};

use airlock_api::v1::{self as api, process_event as ours};
use airlock_e2b_wire::process::{process_event as theirs, ProcessEvent};

use crate::e2b::connect::ConnectError;

/// The header in which the SDKs ask for keepalives (seconds).
pub const KEEPALIVE_HEADER: &str = "keepalive-ping-interval";

/// E2B's event for one of ours; `None` for what E2B has no word for (a
/// count of output lost while no client was attached).
pub fn event(event: api::ProcessEvent, pty: bool) -> Option<ProcessEvent> {
    use theirs::data_event::Output;
    let event = match event.event? {
        ours::Event::Started(started) => {
            theirs::Event::Start(theirs::StartEvent { pid: started.pid })
        }
        ours::Event::Stdout(output) if pty => data(Output::Pty(output.data.to_vec())),
        ours::Event::Stdout(output) => data(Output::Stdout(output.data.to_vec())),
        ours::Event::Stderr(output) => data(Output::Stderr(output.data.to_vec())),
        ours::Event::Dropped(_) => return None,
        ours::Event::Exited(exit) => theirs::Event::End(end(&exit)),
    };
    Some(ProcessEvent { event: Some(event) })
}

fn data(output: theirs::data_event::Output) -> theirs::Event {
    theirs::Event::Data(theirs::DataEvent {
        output: Some(output),
    })
}

/// E2B's end of a program: a signal's end is exit code -1, not exited,
/// `signal: NAME`; a failing exit carries its status as the error.
pub fn end(exit: &api::ProcessExit) -> theirs::EndEvent {
    if exit.signal != 0 || exit.oom_killed {
        let name = match exit.signal {
            9 => "killed".to_owned(),
            15 => "terminated".to_owned(),
            2 => "interrupt".to_owned(),
            1 => "hangup".to_owned(),
            0 => "killed".to_owned(),
            n => format!("signal {n}"),
        };
        let status = format!("signal: {name}");
        let error = if exit.oom_killed {
            format!("{status} (out of memory)")
        } else if exit.timed_out {
            format!("{status} (past its timeout)")
        } else {
            status.clone()
        };
        return theirs::EndEvent {
            exit_code: -1,
            exited: false,
            status,
            error: Some(error),
        };
    }
    let status = format!("exit status {}", exit.exit_code);
    theirs::EndEvent {
        exit_code: exit.exit_code,
        exited: true,
        error: (exit.exit_code != 0).then(|| status.clone()),
        status,
    }
}

/// The keepalive interval a request asks for, if any (at least a second).
pub fn keepalive_interval(headers: &http::HeaderMap) -> Option<Duration> {
    let secs = headers
        .get(KEEPALIVE_HEADER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()?;
    (secs > 0).then(|| Duration::from_secs(secs))
}

/// `events`, with a keepalive after every `interval` without one; ends
/// when `events` ends.
pub fn with_keepalives<S>(
    events: S,
    interval: Option<Duration>,
) -> impl Stream<Item = Result<ProcessEvent, ConnectError>> + Send + 'static
where
    S: Stream<Item = Result<ProcessEvent, ConnectError>> + Send + Unpin + 'static,
{
    futures::stream::unfold(events, move |mut events| async move {
        let next = match interval {
            None => events.next().await,
            Some(interval) => match tokio::time::timeout(interval, events.next()).await {
                Ok(next) => next,
                Err(_) => Some(Ok(ProcessEvent {
                    event: Some(theirs::Event::Keepalive(theirs::KeepAlive {})),
                })),
            },
        };
        next.map(|item| (item, events))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exits_read_as_envd_reports_them() {
        let ok = end(&api::ProcessExit::default());
        assert_eq!(
            (ok.exit_code, ok.exited, ok.error.as_deref()),
            (0, true, None)
        );
        assert_eq!(ok.status, "exit status 0");
        let failed = end(&api::ProcessExit {
            exit_code: 3,
            ..Default::default()
        });
        assert_eq!(failed.error.as_deref(), Some("exit status 3"));
        let killed = end(&api::ProcessExit {
            signal: 9,
            ..Default::default()
        });
        assert_eq!((killed.exit_code, killed.exited), (-1, false));
        assert_eq!(killed.status, "signal: killed");
    }

    #[test]
    fn a_terminals_output_is_pty_data() {
        let stdout = api::ProcessEvent {
            event: Some(ours::Event::Stdout(api::Output {
                data: bytes::Bytes::from_static(b"$ "),
                offset: 0,
            })),
        };
        let got = event(stdout, true).expect("an event");
        assert!(matches!(
            got.event,
            Some(theirs::Event::Data(theirs::DataEvent {
                output: Some(theirs::data_event::Output::Pty(_))
            }))
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_stream_gets_keepalives() {
        let (sender, receiver) = tokio::sync::mpsc::channel(1);
        let events = tokio_stream::wrappers::ReceiverStream::new(receiver);
        let mut stream = Box::pin(with_keepalives(events, Some(Duration::from_secs(5))));
        let first = stream.next().await.expect("a keepalive").expect("ok");
        assert!(matches!(first.event, Some(theirs::Event::Keepalive(_))));
        drop(sender);
        assert!(stream.next().await.is_none());
    }
}
