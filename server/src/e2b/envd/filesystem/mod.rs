//! envd's `filesystem.Filesystem` service over the Connect protocol,
//! each call translated into our Files service: Stat, MakeDir, Move,
//! ListDir and Remove (`calls`), WatchDir (`watch`), and the polled
//! watchers (`watchers`). The user a call acts as (for relative paths) is
//! the one its `Authorization: Basic` header names.

mod calls;
mod entry;
mod events;
mod names;
mod watch;
mod watchers;

use http::{Request, Response};
use hyper::body::Incoming;

use airlock_e2b_wire::filesystem as fs;

use crate::e2b::connect::{self, ConnectError};
use crate::e2b::envd::files::user;
use crate::e2b::reply::Body;
use crate::e2b::target::SandboxCall;

/// One call of the service.
pub(crate) async fn handle(call: SandboxCall, request: Request<Incoming>) -> Response<Body> {
    let method = request
        .uri()
        .path()
        .trim_start_matches('/')
        .strip_prefix(fs::SERVICE)
        .and_then(|rest| rest.strip_prefix('/'))
        .unwrap_or_default()
        .to_owned();
    let username = match user::from_basic(request.headers()) {
        Ok(username) => username,
        Err(status) => return ConnectError::from(status).unary_response(),
    };
    let username = username.as_deref();
    let call = &call;
    match method.as_str() {
        "Stat" => {
            connect::unary(request, |req: fs::StatRequest| {
                calls::stat(call, username, req)
            })
            .await
        }
        "MakeDir" => {
            connect::unary(request, |req: fs::MakeDirRequest| {
                calls::make_dir(call, username, req)
            })
            .await
        }
        "Move" => {
            connect::unary(request, |req: fs::MoveRequest| {
                calls::r#move(call, username, req)
            })
            .await
        }
        "ListDir" => {
            connect::unary(request, |req: fs::ListDirRequest| {
                calls::list_dir(call, username, req)
            })
            .await
        }
        "Remove" => {
            connect::unary(request, |req: fs::RemoveRequest| {
                calls::remove(call, username, req)
            })
            .await
        }
        "WatchDir" => {
            let every = watch::keepalive(request.headers());
            connect::server_stream(request, |req: fs::WatchDirRequest| async move {
                let spec = watch::Spec {
                    path: req.path,
                    recursive: req.recursive,
                    include_entry: req.include_entry,
                };
                let opened = watch::Watch::open(call, username, spec).await?;
                Ok(watch::replies(opened, every))
            })
            .await
        }
        "CreateWatcher" => {
            connect::unary(request, |req: fs::CreateWatcherRequest| {
                watchers::create(call, username, req)
            })
            .await
        }
        "GetWatcherEvents" => {
            connect::unary(request, |req: fs::GetWatcherEventsRequest| async move {
                watchers::events(call, req)
            })
            .await
        }
        "RemoveWatcher" => {
            connect::unary(request, |req: fs::RemoveWatcherRequest| async move {
                watchers::remove(call, req)
            })
            .await
        }
        other => ConnectError::unimplemented(format!(
            "{}/{other}: no such method of the filesystem service",
            fs::SERVICE
        ))
        .unary_response(),
    }
}
