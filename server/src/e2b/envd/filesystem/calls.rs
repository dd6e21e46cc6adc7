//! envd's unary filesystem calls, each one or two calls of our Files
//! service: Stat, MakeDir, Move, ListDir (with depth), Remove. Paths
//! resolve as `/files` resolves them (relative: against the user's home).

use tonic::Status;

use airlock_api::reason;
use airlock_api::v1::{self as api, files_server::Files, ErrorReason};
use airlock_e2b_wire::filesystem as fs;

use super::entry::entry;
use super::names::Names;
use crate::e2b::connect::{Code, ConnectError};
use crate::e2b::envd::files::{user, write};
use crate::e2b::target::SandboxCall;

/// The one mapping of our Files service's statuses to envd's Connect
/// errors: the guest refusing (not a directory, not empty, permission)
/// is `invalid_argument` as envd answers it; the rest keep their code.
pub fn connect_error(status: Status) -> ConnectError {
    match reason::reason_of(&status) {
        Some(ErrorReason::GuestRefused) => {
            ConnectError::new(Code::InvalidArgument, status.message())
        }
        _ => ConnectError::from(status),
    }
}

/// `raw` as an absolute guest path for the user the call names
/// (`field` names it in an error). Only a relative path needs the user.
pub async fn path(
    call: &SandboxCall,
    username: Option<&str>,
    field: &str,
    raw: &str,
) -> Result<String, Status> {
    if raw.starts_with('/') {
        crate::validate::guest_path(field, raw)?;
        return Ok(raw.to_owned());
    }
    let user = user::resolve(call, username).await?;
    user::absolute(field, raw, &user)
}

/// The metadata of `path` (a symlink not followed).
async fn stat_info(call: &SandboxCall, path: String) -> Result<api::FileInfo, Status> {
    let request = call.request(api::StatRequest {
        sandbox_id: call.id.clone(),
        path,
    });
    Ok(call.services().stat(request).await?.into_inner())
}

/// `info` as an entry, owner names resolved.
async fn described(call: &SandboxCall, info: &api::FileInfo) -> Result<fs::EntryInfo, Status> {
    let names = Names::for_ids(call, std::iter::once((info.uid, info.gid))).await?;
    Ok(entry(info, &names))
}

pub async fn stat(
    call: &SandboxCall,
    username: Option<&str>,
    request: fs::StatRequest,
) -> Result<fs::StatResponse, ConnectError> {
    let run = async {
        let path = path(call, username, "path", &request.path).await?;
        let info = stat_info(call, path).await?;
        described(call, &info).await
    };
    let entry = run.await.map_err(connect_error)?;
    Ok(fs::StatResponse { entry: Some(entry) })
}

pub async fn make_dir(
    call: &SandboxCall,
    username: Option<&str>,
    request: fs::MakeDirRequest,
) -> Result<fs::MakeDirResponse, ConnectError> {
    let user = user::resolve(call, username).await.map_err(connect_error)?;
    let path = user::absolute("path", &request.path, &user).map_err(connect_error)?;
    let created = match user.write_owner().is_empty() {
        true => {
            call.services()
                .make_dir(call.request(api::MakeDirRequest {
                    sandbox_id: call.id.clone(),
                    path: path.clone(),
                }))
                .await
                .map_err(connect_error)?
                .into_inner()
                .created
        }
        false => make_dir_as(call, &user, &path)
            .await
            .map_err(connect_error)?,
    };
    if !created {
        // What the SDKs read as "it existed" (make_dir answers false).
        return Err(ConnectError::new(
            Code::AlreadyExists,
            format!("directory {path} already exists"),
        ));
    }
    let run = async {
        let info = stat_info(call, path).await?;
        described(call, &info).await
    };
    let entry = run.await.map_err(connect_error)?;
    Ok(fs::MakeDirResponse { entry: Some(entry) })
}

/// Makes `path` (and its parents) owned by `user`, as envd does: our
/// MakeDir has no user, so an empty placeholder is written in it as the
/// user (a write makes its missing parents, the user's), then removed
/// (watches never report it: its name is one of our temporaries').
/// `Ok(false)` when the directory existed.
async fn make_dir_as(call: &SandboxCall, user: &user::User, path: &str) -> Result<bool, Status> {
    match stat_info(call, path.to_owned()).await {
        Ok(info) if info.r#type == i32::from(api::FileType::Directory) => return Ok(false),
        Ok(_) => {
            return Err(reason::status(
                ErrorReason::GuestRefused,
                format!("{path} exists and is not a directory"),
            ))
        }
        Err(status) if status.code() == tonic::Code::NotFound => {}
        Err(status) => return Err(status),
    }
    let nonce = airlock::random::hex::<8>().map_err(|error| Status::internal(error.to_string()))?;
    let placeholder = format!("{}/.airlock-mkdir-{nonce}.tmp", path.trim_end_matches('/'));
    let nothing = futures::stream::empty::<Result<bytes::Bytes, std::convert::Infallible>>();
    write::write(call, placeholder.clone(), user.write_owner(), nothing).await?;
    call.services()
        .remove(call.request(api::RemoveRequest {
            sandbox_id: call.id.clone(),
            path: placeholder,
        }))
        .await?;
    Ok(true)
}

pub async fn r#move(
    call: &SandboxCall,
    username: Option<&str>,
    request: fs::MoveRequest,
) -> Result<fs::MoveResponse, ConnectError> {
    let run = async {
        let from = path(call, username, "source", &request.source).await?;
        let to = path(call, username, "destination", &request.destination).await?;
        let info = call
            .services()
            .rename(call.request(api::RenameRequest {
                sandbox_id: call.id.clone(),
                from,
                to,
            }))
            .await?
            .into_inner();
        described(call, &info).await
    };
    let entry = run.await.map_err(connect_error)?;
    Ok(fs::MoveResponse { entry: Some(entry) })
}

pub async fn list_dir(
    call: &SandboxCall,
    username: Option<&str>,
    request: fs::ListDirRequest,
) -> Result<fs::ListDirResponse, ConnectError> {
    let run = async {
        let path = path(call, username, "path", &request.path).await?;
        let listed = call
            .services()
            .list(call.request(api::ListFilesRequest {
                sandbox_id: call.id.clone(),
                path,
                depth: request.depth.max(1),
            }))
            .await?
            .into_inner();
        let names = Names::for_ids(call, listed.entries.iter().map(|e| (e.uid, e.gid))).await?;
        Ok::<_, Status>(
            listed
                .entries
                .iter()
                .map(|info| entry(info, &names))
                .collect(),
        )
    };
    let entries = run.await.map_err(connect_error)?;
    Ok(fs::ListDirResponse { entries })
}

pub async fn remove(
    call: &SandboxCall,
    username: Option<&str>,
    request: fs::RemoveRequest,
) -> Result<fs::RemoveResponse, ConnectError> {
    let run = async {
        let path = path(call, username, "path", &request.path).await?;
        // Our service refuses "/" as written; "/tmp/.." is the same root.
        if lexical(&path) == "/" {
            return Err(airlock_api::reason::invalid(
                "path",
                format!("{path} is the guest's root: refusing to remove it"),
            ));
        }
        call.services()
            .remove(call.request(api::RemoveRequest {
                sandbox_id: call.id.clone(),
                path,
            }))
            .await?;
        Ok::<_, Status>(())
    };
    run.await.map_err(connect_error)?;
    Ok(fs::RemoveResponse {})
}

/// `path` with `.` and `..` resolved as written (no links followed).
fn lexical(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            part => parts.push(part),
        }
    }
    format!("/{}", parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dots_resolve_as_written() {
        assert_eq!(lexical("/tmp/.."), "/");
        assert_eq!(lexical("/a/./b/../c/"), "/a/c");
        assert_eq!(lexical("/../.."), "/");
    }

    #[test]
    fn a_refusal_is_invalid_argument() {
        let refused = reason::status(ErrorReason::GuestRefused, "not a directory");
        assert_eq!(connect_error(refused).code, Code::InvalidArgument);
        let missing = reason::status(ErrorReason::GuestNotFound, "missing");
        assert_eq!(connect_error(missing).code, Code::NotFound);
    }
}
