//! The process service's unary calls and its client stream, each one call
//! of our Processes service.

use airlock_api::v1::{self as api, processes_server::Processes};
use airlock_e2b_wire::process::{
    self as e2b, process_input, process_selector, stream_input_request,
};

use crate::e2b::connect::{Code, ConnectError, Messages, RequestBody};
use crate::e2b::target::SandboxCall;

/// The error of a call naming a process: envd has ended processes
/// forgotten, so one that has exited is `not_found` (the SDKs' `kill`
/// then answers `False`); anything else as every call maps it.
pub fn about_process(status: tonic::Status) -> ConnectError {
    let error = ConnectError::from(status);
    if error.code == Code::FailedPrecondition && error.message.contains("has exited") {
        return ConnectError::not_found(error.message);
    }
    error
}

/// Our selector for E2B's (`field` names it in a refusal).
pub fn selector(
    field: &str,
    selector: Option<&e2b::ProcessSelector>,
) -> Result<api::ProcessSelector, ConnectError> {
    use api::process_selector::Selector;
    let selector = match selector.and_then(|s| s.selector.as_ref()) {
        Some(process_selector::Selector::Pid(pid)) => Selector::Pid(*pid),
        Some(process_selector::Selector::Tag(tag)) => Selector::Tag(tag.clone()),
        None => {
            return Err(ConnectError::invalid(format!(
                "{field}: name the process by pid or tag"
            )))
        }
    };
    Ok(api::ProcessSelector {
        selector: Some(selector),
    })
}

pub async fn list(
    call: &SandboxCall,
    _request: e2b::ListRequest,
) -> Result<e2b::ListResponse, ConnectError> {
    let listed = call
        .services()
        .list(call.request(api::ListProcessesRequest {
            sandbox_id: call.id.clone(),
        }))
        .await?
        .into_inner();
    let processes = listed
        .processes
        .into_iter()
        .filter(|process| process.running)
        .map(|process| {
            let mut argv = process.argv.into_iter();
            e2b::ProcessInfo {
                config: Some(e2b::ProcessConfig {
                    cmd: argv.next().unwrap_or_default(),
                    args: argv.collect(),
                    ..Default::default()
                }),
                pid: process.pid,
                tag: (!process.tag.is_empty()).then_some(process.tag),
            }
        })
        .collect();
    Ok(e2b::ListResponse { processes })
}

pub async fn update(
    call: &SandboxCall,
    request: e2b::UpdateRequest,
) -> Result<e2b::UpdateResponse, ConnectError> {
    let process = selector("process", request.process.as_ref())?;
    let Some(size) = request.pty.and_then(|pty| pty.size) else {
        // Nothing to change.
        return Ok(e2b::UpdateResponse {});
    };
    call.services()
        .resize(call.request(api::ResizeRequest {
            sandbox_id: call.id.clone(),
            process: Some(process),
            size: Some(api::TerminalSize {
                rows: size.rows,
                cols: size.cols,
            }),
        }))
        .await
        .map_err(about_process)?;
    Ok(e2b::UpdateResponse {})
}

/// Bytes for a process's stdin or its terminal (both are its input).
async fn write(
    call: &SandboxCall,
    process: api::ProcessSelector,
    input: Option<e2b::ProcessInput>,
) -> Result<(), ConnectError> {
    let data = match input.and_then(|input| input.input) {
        Some(process_input::Input::Stdin(data)) | Some(process_input::Input::Pty(data)) => data,
        None => return Ok(()),
    };
    call.services()
        .send_stdin(call.request(api::SendStdinRequest {
            sandbox_id: call.id.clone(),
            process: Some(process),
            data: data.into(),
            close: false,
        }))
        .await
        .map_err(about_process)?;
    Ok(())
}

pub async fn send_input(
    call: &SandboxCall,
    request: e2b::SendInputRequest,
) -> Result<e2b::SendInputResponse, ConnectError> {
    let process = selector("process", request.process.as_ref())?;
    write(call, process, request.input).await?;
    Ok(e2b::SendInputResponse {})
}

pub async fn close_stdin(
    call: &SandboxCall,
    request: e2b::CloseStdinRequest,
) -> Result<e2b::CloseStdinResponse, ConnectError> {
    let process = selector("process", request.process.as_ref())?;
    call.services()
        .send_stdin(call.request(api::SendStdinRequest {
            sandbox_id: call.id.clone(),
            process: Some(process),
            data: Default::default(),
            close: true,
        }))
        .await
        .map_err(about_process)?;
    Ok(e2b::CloseStdinResponse {})
}

pub async fn send_signal(
    call: &SandboxCall,
    request: e2b::SendSignalRequest,
) -> Result<e2b::SendSignalResponse, ConnectError> {
    let process = selector("process", request.process.as_ref())?;
    let signal = match e2b::Signal::try_from(request.signal) {
        Ok(e2b::Signal::Sigkill) => 9,
        Ok(e2b::Signal::Sigterm) => 15,
        _ => {
            return Err(ConnectError::invalid(format!(
                "signal: {} is not SIGNAL_SIGTERM or SIGNAL_SIGKILL",
                request.signal
            )))
        }
    };
    call.services()
        .send_signal(call.request(api::SendSignalRequest {
            sandbox_id: call.id.clone(),
            process: Some(process),
            signal,
        }))
        .await
        .map_err(about_process)?;
    Ok(e2b::SendSignalResponse {})
}

/// A client stream: its start names the process, then each data message
/// is written in order.
pub async fn stream_input<B: RequestBody>(
    call: &SandboxCall,
    mut messages: Messages<e2b::StreamInputRequest, B>,
) -> Result<e2b::StreamInputResponse, ConnectError> {
    use stream_input_request::Event;
    let mut process = None;
    while let Some(message) = messages.next().await {
        match message?.event {
            Some(Event::Start(start)) => {
                process = Some(selector("start.process", start.process.as_ref())?);
            }
            Some(Event::Data(data)) => {
                let Some(process) = process.clone() else {
                    return Err(ConnectError::invalid(
                        "data before start: the stream's first message names the process",
                    ));
                };
                write(call, process, data.input).await?;
            }
            Some(Event::Keepalive(_)) | None => {}
        }
    }
    Ok(e2b::StreamInputResponse {})
}
