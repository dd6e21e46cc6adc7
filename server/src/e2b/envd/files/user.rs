//! Users as E2B has them: a request names one (`username` on `/files`,
//! `Authorization: Basic base64("NAME:")` on the Connect calls), `user` by
//! default, and a relative path resolves against that user's home.
//!
//! The user's home comes from the guest's `/etc/passwd`, read through the
//! Files service. An image without E2B's `user` (Airlock's own images)
//! acts as `root`, home `/root`: E2B code then still runs, as root.

use base64::Engine;
use futures::StreamExt;
use http::HeaderMap;
use tonic::Status;

use airlock_api::reason::invalid;
use airlock_api::v1::{self as api, files_server::Files};

use crate::e2b::target::SandboxCall;

/// E2B's default user.
pub const DEFAULT_USER: &str = "user";

/// The guest's user database.
const PASSWD: &str = "/etc/passwd";

/// At most this much of `/etc/passwd` is read.
const MAX_PASSWD_BYTES: usize = 1 << 20;

/// Who an envd request acts as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// The name as the guest knows it.
    pub name: String,
    /// Its home directory, where relative paths resolve.
    pub home: String,
}

impl User {
    /// The guest's root.
    pub fn root() -> Self {
        User {
            name: "root".into(),
            home: "/root".into(),
        }
    }

    /// The owner to give a write: empty for root (the agent itself).
    pub fn write_owner(&self) -> String {
        match self.name.as_str() {
            "root" => String::new(),
            name => name.to_owned(),
        }
    }
}

/// The user a Connect call names in `Authorization: Basic base64("NAME:")`,
/// if any; `Err` names what is malformed.
pub fn from_basic(headers: &HeaderMap) -> Result<Option<String>, Status> {
    let Some(value) = headers.get(http::header::AUTHORIZATION) else {
        return Ok(None);
    };
    let text = value
        .to_str()
        .map_err(|_| invalid("authorization", "not text"))?;
    let Some(encoded) = text.strip_prefix("Basic ") else {
        return Err(invalid(
            "authorization",
            "expected `Basic base64(USER:)`, E2B's user header",
        ));
    };
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .map_err(|_| invalid("authorization", "the Basic value is not base64"))?;
    let decoded = String::from_utf8(decoded)
        .map_err(|_| invalid("authorization", "the user is not UTF-8"))?;
    let name = decoded.split(':').next().unwrap_or_default();
    Ok((!name.is_empty()).then(|| name.to_owned()))
}

/// The user `name` names (E2B's default user when `None`) in the sandbox
/// of `call`.
pub async fn resolve(call: &SandboxCall, name: Option<&str>) -> Result<User, Status> {
    let name = name.unwrap_or(DEFAULT_USER);
    if name == "root" {
        return Ok(User::root());
    }
    crate::validate::user("username", name)?;
    let passwd = read_small(call, PASSWD).await?;
    match home_in(&passwd, name) {
        Some(home) => Ok(User {
            name: name.to_owned(),
            home,
        }),
        None if name == DEFAULT_USER => {
            tracing::debug!(sandbox = %call.id, "e2b: no `user` in the image; acting as root");
            Ok(User::root())
        }
        None => Err(invalid(
            "username",
            format!("no user {name:?} in the sandbox (E2B's users are `user` and `root`)"),
        )),
    }
}

/// A small text file of the guest (its first [`MAX_PASSWD_BYTES`]),
/// empty when it has none.
pub async fn read_small(call: &SandboxCall, path: &str) -> Result<String, Status> {
    let request = call.request(api::ReadFileRequest {
        sandbox_id: call.id.clone(),
        path: path.into(),
        offset: 0,
        length: MAX_PASSWD_BYTES as u64,
    });
    let mut stream = match call.services().read(request).await {
        Ok(stream) => stream.into_inner(),
        Err(status) if status.code() == tonic::Code::NotFound => return Ok(String::new()),
        Err(status) => return Err(status),
    };
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(chunk) => bytes.extend_from_slice(&chunk.data),
            Err(status) if status.code() == tonic::Code::NotFound => return Ok(String::new()),
            Err(status) => return Err(status),
        }
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The home of `name` in the text of a passwd file.
fn home_in(passwd: &str, name: &str) -> Option<String> {
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.len() >= 6 && fields[0] == name && !fields[5].is_empty())
            .then(|| fields[5].to_owned())
    })
}

/// `path` as an absolute guest path for `user`: a relative one (and `~`,
/// `~/...`) resolves against the user's home, as envd does. `..` is left
/// for the guest to resolve; the Files service then checks the result as
/// it checks every path. `field` names the path in an error.
pub fn absolute(field: &str, path: &str, user: &User) -> Result<String, Status> {
    let resolved = if path.is_empty() {
        return Err(invalid(field, "missing"));
    } else if path.starts_with('/') {
        path.to_owned()
    } else if path == "~" {
        user.home.clone()
    } else if let Some(rest) = path.strip_prefix("~/") {
        join(&user.home, rest)
    } else {
        join(&user.home, path)
    };
    crate::validate::guest_path(field, &resolved)?;
    Ok(resolved)
}

fn join(home: &str, rest: &str) -> String {
    format!("{}/{}", home.trim_end_matches('/'), rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user() -> User {
        User {
            name: "user".into(),
            home: "/home/user".into(),
        }
    }

    #[test]
    fn relative_paths_resolve_against_the_home() {
        assert_eq!(
            absolute("path", "a.txt", &user()).unwrap(),
            "/home/user/a.txt"
        );
        assert_eq!(
            absolute("path", "~/d/a", &user()).unwrap(),
            "/home/user/d/a"
        );
        assert_eq!(absolute("path", "~", &user()).unwrap(), "/home/user");
        assert_eq!(absolute("path", "/tmp/x", &user()).unwrap(), "/tmp/x");
        assert_eq!(
            absolute("path", "../../etc/passwd", &user()).unwrap(),
            "/home/user/../../etc/passwd"
        );
    }

    #[test]
    fn bad_paths_name_the_field() {
        let missing = absolute("path", "", &user()).unwrap_err();
        assert!(
            missing.message().starts_with("path:"),
            "{}",
            missing.message()
        );
        let nul = absolute("path", "a\0b", &user()).unwrap_err();
        assert_eq!(nul.code(), tonic::Code::InvalidArgument);
    }

    #[test]
    fn homes_come_from_passwd() {
        let passwd = "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/bash\n";
        assert_eq!(home_in(passwd, "user").as_deref(), Some("/home/user"));
        assert_eq!(home_in(passwd, "nobody"), None);
    }

    #[test]
    fn the_basic_header_names_the_user() {
        let mut headers = HeaderMap::new();
        assert_eq!(from_basic(&headers).unwrap(), None);
        // base64("root:")
        headers.insert(
            http::header::AUTHORIZATION,
            "Basic cm9vdDo=".parse().unwrap(),
        );
        assert_eq!(from_basic(&headers).unwrap().as_deref(), Some("root"));
        headers.insert(http::header::AUTHORIZATION, "Bearer x".parse().unwrap());
        assert!(from_basic(&headers).is_err());
    }
}
