//! envd's `process.Process` service over the Connect protocol, each call
//! translated into `airlock.api.v1.Processes` calls of the sandbox's
//! owner: Start and Connect (server streams), List, Update (a PTY's size),
//! SendInput, StreamInput (a client stream), SendSignal, CloseStdin.
//!
//! Processes are named by our pids, which E2B's SDKs use as envd's. A
//! process runs as the user the request names (`Authorization: Basic`),
//! else as E2B's `user` (home `/home/user`), or as root where the image
//! has no `user`; its directory defaults to its user's home.

mod calls;
mod events;
mod inputs;
mod start;
mod terminals;
mod user;

use http::{Request, Response};
use hyper::body::Incoming;

use crate::e2b::connect::{self, ConnectError};
use crate::e2b::reply::Body;
use crate::e2b::target::SandboxCall;

/// One call of the service.
pub(crate) async fn handle(call: SandboxCall, request: Request<Incoming>) -> Response<Body> {
    let path = request.uri().path().to_owned();
    let method = path.strip_prefix("/process.Process/").unwrap_or("");
    let headers = request.headers().clone();
    match method {
        "Start" => {
            connect::server_stream(request, |message| start::start(&call, &headers, message)).await
        }
        "Connect" => {
            connect::server_stream(request, |message| start::connect(&call, &headers, message))
                .await
        }
        "List" => connect::unary(request, |message| calls::list(&call, message)).await,
        "Update" => connect::unary(request, |message| calls::update(&call, message)).await,
        "SendInput" => connect::unary(request, |message| calls::send_input(&call, message)).await,
        "SendSignal" => connect::unary(request, |message| calls::send_signal(&call, message)).await,
        "CloseStdin" => connect::unary(request, |message| calls::close_stdin(&call, message)).await,
        "StreamInput" => {
            connect::client_stream(request, |messages| calls::stream_input(&call, messages)).await
        }
        _ => ConnectError::unimplemented(format!("{path}: no such method of process.Process"))
            .unary_response(),
    }
}
