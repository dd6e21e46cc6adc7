//! `POST /files`: one or more files written, in the two forms the SDKs
//! send: `multipart/form-data` with one part named `file` per file (its
//! filename the file's path; `?path=` names the destination when one file
//! is sent), or `application/octet-stream`, the body the one file named
//! by `?path=` (gzip-encoded with the SDKs' `gzip`). Each file streams
//! into our Files service as it arrives.
//! The answer is E2B's: a JSON list of `{"name", "type": "file", "path"}`.

use bytes::Bytes;
use futures::{Stream, TryStreamExt};
use http::{header, HeaderMap, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde::Serialize;
use tonic::Status;

use airlock_api::reason::invalid;

use super::gunzip::gunzip;
use super::query::Query;
use super::user::{self, User};
use super::write;
use crate::e2b::reply::{self, Body};
use crate::e2b::target::SandboxCall;

/// One written file as E2B's `/files` answers it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Written {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub path: String,
}

/// The body's form.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Form {
    Multipart {
        boundary: String,
    },
    /// The one file; `gzip` when it comes compressed.
    Raw {
        gzip: bool,
    },
}

/// The answer to an upload, or the status that refuses it.
pub async fn upload(
    call: &SandboxCall,
    query: &Query,
    request: Request<Incoming>,
) -> Result<Response<Body>, Status> {
    let form = form(request.headers())?;
    refuse_metadata(request.headers())?;
    let user = user::resolve(call, query.username.as_deref()).await?;
    let body = request
        .into_body()
        .into_data_stream()
        .map_err(|error| error.to_string());
    let written = match form {
        Form::Raw { gzip } => {
            let raw = query.path.as_deref().ok_or_else(|| {
                invalid(
                    "path",
                    "missing: an octet-stream upload names its file with ?path=",
                )
            })?;
            match gzip {
                true => vec![one(call, &user, raw, gunzip(body)).await?],
                false => vec![one(call, &user, raw, body).await?],
            }
        }
        Form::Multipart { boundary } => multipart(call, &user, query, boundary, body).await?,
    };
    Ok(reply::json(StatusCode::OK, &written))
}

/// The form of a body with `headers`; `Err` for one this envd does not
/// take.
fn form(headers: &HeaderMap) -> Result<Form, Status> {
    let gzip = match headers.get(header::CONTENT_ENCODING) {
        None => false,
        Some(encoding) => {
            let encoding = encoding.to_str().unwrap_or_default().trim();
            if encoding.eq_ignore_ascii_case("gzip") {
                true
            } else if encoding.is_empty() || encoding.eq_ignore_ascii_case("identity") {
                false
            } else {
                return Err(invalid(
                    "content-encoding",
                    format!("{encoding:?}: uploads may be gzip or not encoded"),
                ));
            }
        }
    };
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    match essence.as_str() {
        "multipart/form-data" if gzip => Err(invalid(
            "content-encoding",
            "a gzip upload is an octet-stream one (as the SDKs send it), not multipart",
        )),
        "multipart/form-data" => multer::parse_boundary(content_type)
            .map(|boundary| Form::Multipart { boundary })
            .map_err(|error| {
                invalid(
                    "content-type",
                    format!("multipart without a boundary: {error}"),
                )
            }),
        "application/octet-stream" | "" => Ok(Form::Raw { gzip }),
        other => Err(invalid(
            "content-type",
            format!("{other:?}: send multipart/form-data or application/octet-stream"),
        )),
    }
}

/// File metadata (`X-Metadata-*`, the SDKs' `metadata`) is not kept here
/// (our files carry no extended attributes): refused by name rather than
/// dropped.
fn refuse_metadata(headers: &HeaderMap) -> Result<(), Status> {
    match headers
        .keys()
        .find(|name| name.as_str().starts_with(METADATA_PREFIX))
    {
        Some(name) => Err(Status::unimplemented(format!(
            "{name}: file metadata is not supported by this server; write without `metadata`"
        ))),
        None => Ok(()),
    }
}

/// The header prefix of a file's metadata.
const METADATA_PREFIX: &str = "x-metadata-";

/// Writes the file `raw` names from `data`.
async fn one<S, E>(call: &SandboxCall, user: &User, raw: &str, data: S) -> Result<Written, Status>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let path = user::absolute("path", raw, user)?;
    let response = write::write(call, path, user.write_owner(), data).await?;
    let file = response.file.unwrap_or_default();
    Ok(Written {
        name: file.name,
        kind: "file",
        path: file.path,
    })
}

/// The files of a multipart body, each written as its part arrives.
async fn multipart<S>(
    call: &SandboxCall,
    user: &User,
    query: &Query,
    boundary: String,
    body: S,
) -> Result<Vec<Written>, Status>
where
    S: Stream<Item = Result<Bytes, String>> + Send + 'static,
{
    let mut parts = multer::Multipart::new(body, boundary);
    let mut written = Vec::new();
    loop {
        let field = parts
            .next_field()
            .await
            .map_err(|error| invalid("body", format!("a malformed multipart body: {error}")))?;
        let Some(mut field) = field else { break };
        if field.name() != Some("file") {
            continue;
        }
        let destination =
            match (&query.path, field.file_name()) {
                (Some(path), _) if written.is_empty() => path.clone(),
                (Some(_), _) => return Err(invalid(
                    "path",
                    "?path= names one file; send several without it, each part's filename its path",
                )),
                (None, Some(name)) if !name.is_empty() => name.to_owned(),
                (None, _) => {
                    return Err(invalid(
                        "file",
                        "a part without a filename: name its path in the filename or with ?path=",
                    ))
                }
            };
        written.push(one(call, user, &destination, &mut field).await?);
    }
    if written.is_empty() {
        return Err(invalid(
            "file",
            "no file in the multipart body (one part named `file` per file)",
        ));
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(content_type: &str) -> HeaderMap {
        let mut map = HeaderMap::new();
        map.insert(header::CONTENT_TYPE, content_type.parse().unwrap());
        map
    }

    #[test]
    fn the_two_forms_and_refusals() {
        assert_eq!(
            form(&headers("multipart/form-data; boundary=abc")).unwrap(),
            Form::Multipart {
                boundary: "abc".into()
            }
        );
        assert_eq!(
            form(&headers("application/octet-stream")).unwrap(),
            Form::Raw { gzip: false }
        );
        assert!(form(&headers("multipart/form-data")).is_err());
        assert!(form(&headers("text/plain")).is_err());
        let mut gzip = headers("application/octet-stream");
        gzip.insert(header::CONTENT_ENCODING, "gzip".parse().unwrap());
        assert_eq!(form(&gzip).unwrap(), Form::Raw { gzip: true });
        gzip.insert(header::CONTENT_ENCODING, "br".parse().unwrap());
        assert!(form(&gzip).is_err());
        let mut multi = headers("multipart/form-data; boundary=x");
        multi.insert(header::CONTENT_ENCODING, "gzip".parse().unwrap());
        assert!(form(&multi).is_err());
        let mut metadata = headers("application/octet-stream");
        assert!(refuse_metadata(&metadata).is_ok());
        metadata.insert("x-metadata-owner", "me".parse().unwrap());
        assert_eq!(
            refuse_metadata(&metadata).unwrap_err().code(),
            tonic::Code::Unimplemented
        );
    }

    #[test]
    fn the_answer_is_e2b_s() {
        let entry = Written {
            name: "a.txt".into(),
            kind: "file",
            path: "/home/user/a.txt".into(),
        };
        assert_eq!(
            serde_json::to_string(&[entry]).unwrap(),
            r#"[{"name":"a.txt","type":"file","path":"/home/user/a.txt"}]"#
        );
    }
}
