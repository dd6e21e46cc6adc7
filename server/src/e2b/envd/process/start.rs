//! Start and Connect: a process's events as a server stream, from our
//! Processes' Start (run as the request's user, E2B's `user` by default)
//! and Connect (live output from now, as envd's Connect gives it).

use futures::StreamExt;
use http::HeaderMap;

use airlock_api::v1::{self as api, processes_server::Processes};
use airlock_e2b_wire::process as e2b;

use super::calls::selector;
use super::events::{event, keepalive_interval, with_keepalives};
use super::{inputs, terminals, user};
use crate::e2b::connect::{ConnectError, Replies};
use crate::e2b::target::SandboxCall;

/// Our events as E2B's (a failure ends the stream with its error).
fn translated(
    events: impl futures::Stream<Item = Result<api::ProcessEvent, tonic::Status>> + Send + 'static,
    pty: bool,
    sandbox: &str,
    headers: &HeaderMap,
) -> impl futures::Stream<Item = Result<e2b::ProcessEvent, ConnectError>> + Send + Unpin + 'static {
    let interval = keepalive_interval(headers);
    let sandbox = sandbox.to_owned();
    let mut pid = None;
    let events = events.filter_map(move |item| {
        if pty {
            // Remember a terminal from its start to its end (Connect).
            match item.as_ref().ok().and_then(|ours| ours.event.as_ref()) {
                Some(api::process_event::Event::Started(started)) => {
                    pid = Some(started.pid);
                    terminals::started(&sandbox, started.pid);
                }
                Some(api::process_event::Event::Exited(_)) => {
                    if let Some(pid) = pid {
                        terminals::ended(&sandbox, pid);
                    }
                }
                _ => {}
            }
        }
        std::future::ready(match item {
            Ok(ours) => event(ours, pty).map(Ok),
            Err(status) => Some(Err(ConnectError::from(status))),
        })
    });
    Box::pin(with_keepalives(Box::pin(events), interval))
}

pub async fn start(
    call: &SandboxCall,
    headers: &HeaderMap,
    request: e2b::StartRequest,
) -> Result<Replies<e2b::StartResponse>, ConnectError> {
    let Some(process) = request.process else {
        return Err(ConnectError::invalid("process: the program to run"));
    };
    if process.cmd.is_empty() {
        return Err(ConnectError::invalid("process.cmd: no program to run"));
    }
    let named = user::named(headers)?;
    let pty = request.pty.as_ref().and_then(|pty| pty.size);
    let mut argv = vec![process.cmd];
    argv.extend(process.args);
    let mut start = api::StartProcess {
        sandbox_id: call.id.clone(),
        argv,
        envs: process.envs.into_iter().collect(),
        cwd: process.cwd.unwrap_or_default(),
        user: named
            .clone()
            .unwrap_or_else(|| user::DEFAULT_USER.to_owned()),
        stdin: request.stdin.unwrap_or(false),
        pty: pty.map(|size| api::TerminalSize {
            rows: size.rows,
            cols: size.cols,
        }),
        tag: request.tag.unwrap_or_default(),
        // E2B's processes outlive the stream that started them.
        kill_on_disconnect: false,
        ..Default::default()
    };
    let events = match open(call, &start).await {
        Err(status) if named.is_none() && user::is_unknown_user(&status) => {
            // The image has no `user`: run as root (docs/e2b.md says so).
            tracing::debug!(sandbox = %call.id, "e2b: no user `user` in the guest; running as root");
            start.user = String::new();
            open(call, &start).await?
        }
        opened => opened?,
    };
    let stream = translated(events, pty.is_some(), &call.id, headers)
        .map(|item| item.map(|event| e2b::StartResponse { event: Some(event) }));
    Ok(stream.boxed())
}

/// Our Start, its input side closed after the start (E2B sends input by
/// SendInput and StreamInput, which name the process).
async fn open(
    call: &SandboxCall,
    start: &api::StartProcess,
) -> Result<<crate::service::Services as Processes>::StartStream, tonic::Status> {
    let first = api::ProcessInput {
        input: Some(api::process_input::Input::Start(start.clone())),
    };
    let (inputs, sender) = inputs::stream(&first);
    drop(sender);
    let opened = call.services().start(call.request(inputs)).await?;
    Ok(opened.into_inner())
}

pub async fn connect(
    call: &SandboxCall,
    headers: &HeaderMap,
    request: e2b::ConnectRequest,
) -> Result<Replies<e2b::ConnectResponse>, ConnectError> {
    let process = selector("process", request.process.as_ref())?;
    // Live output from now on: start after what it has written so far.
    let listed = call
        .services()
        .list(call.request(api::ListProcessesRequest {
            sandbox_id: call.id.clone(),
        }))
        .await?
        .into_inner();
    let found = listed
        .processes
        .iter()
        .find(|info| match &process.selector {
            Some(api::process_selector::Selector::Pid(pid)) => info.pid == *pid,
            Some(api::process_selector::Selector::Tag(tag)) => &info.tag == tag,
            None => false,
        })
        .map(|info| (info.pid, info.output_bytes))
        .ok_or_else(|| ConnectError::not_found("process: no such process in this sandbox"))?;
    let (pid, offset) = found;
    let pty = terminals::has(&call.id, pid);
    let events = call
        .services()
        .connect(call.request(api::ConnectProcessRequest {
            sandbox_id: call.id.clone(),
            process: Some(process),
            offset,
        }))
        .await?
        .into_inner();
    let stream = translated(events, pty, &call.id, headers)
        .map(|item| item.map(|event| e2b::ConnectResponse { event: Some(event) }));
    Ok(stream.boxed())
}
