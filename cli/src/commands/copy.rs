//! `airlock sandbox cp SRC DST`: a file or a directory between the host and
//! a sandbox, through the server's API. The bytes travel in the calls (the
//! server may be on another machine): a file through `Files.Write` and
//! `Files.Read`, streamed in chunks; a directory as a tar stream the client
//! packs or unpacks itself (modes and symlinks kept; entries that would land
//! outside the target are refused).

use std::path::{Path, PathBuf};

use airlock::fs::host_tar;
use airlock_client::api::{self, upload_tar_request, write_file_request};
use airlock_client::Client;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::remote::message;

/// Bytes per message.
const CHUNK: usize = airlock_client::limits::CHUNK_BYTES;

/// One side of `cp`.
#[derive(Debug, PartialEq, Eq)]
enum Side {
    Host(PathBuf),
    Guest { id: String, path: PathBuf },
}

/// `ID:/path` is a guest side (the id has no '/'); anything else is a host
/// path.
fn side(text: &str) -> Result<Side, String> {
    match text.split_once(':') {
        Some((id, path)) if !id.is_empty() && !id.contains('/') => {
            if !path.starts_with('/') {
                return Err(format!(
                    "the guest path in {text:?} must be absolute (ID:/path); write ./{text} for a \
                     host path"
                ));
            }
            Ok(Side::Guest {
                id: id.to_owned(),
                path: PathBuf::from(path),
            })
        }
        _ if text.is_empty() => Err("an empty path".into()),
        _ => Ok(Side::Host(PathBuf::from(text))),
    }
}

/// What `cp SRC DST` asks for.
#[derive(Debug, PartialEq, Eq)]
enum Copy {
    In {
        id: String,
        host: PathBuf,
        guest: String,
    },
    Out {
        id: String,
        guest: String,
        host: PathBuf,
    },
}

/// The copy for `cp SRC DST`.
fn copy_request(src: &str, dst: &str) -> Result<Copy, String> {
    let guest = |path: PathBuf| path.to_string_lossy().into_owned();
    match (side(src)?, side(dst)?) {
        (Side::Host(host), Side::Guest { id, path }) => Ok(Copy::In {
            id,
            host,
            guest: guest(path),
        }),
        (Side::Guest { id, path }, Side::Host(host)) => Ok(Copy::Out {
            id,
            guest: guest(path),
            host,
        }),
        _ => Err("exactly one side of cp must be ID:/guest/path".into()),
    }
}

/// Runs `cp SRC DST`.
pub async fn run(client: &Client, src: &str, dst: &str) -> Result<(), String> {
    let copied = match copy_request(src, dst)? {
        Copy::In { id, host, guest } => upload(client, &id, &host, &guest).await,
        Copy::Out { id, guest, host } => download(client, &id, &guest, &host).await,
    };
    copied.map_err(|problem| format!("cannot copy {src} to {dst}: {problem}"))
}

async fn upload(client: &Client, id: &str, host: &Path, guest: &str) -> Result<(), String> {
    let meta = tokio::fs::metadata(host)
        .await
        .map_err(|e| format!("{}: {e}", host.display()))?;
    if meta.is_dir() {
        let header = api::UploadTarRequest {
            part: Some(upload_tar_request::Part::Header(api::UploadTarHeader {
                sandbox_id: id.to_owned(),
                path: guest.to_owned(),
            })),
        };
        let (failure, data) = until_error(host_tar::pack(host.to_owned()));
        let data = data.map(|data| api::UploadTarRequest {
            part: Some(upload_tar_request::Part::Data(data)),
        });
        let sent = client
            .files()
            .upload_tar(futures::stream::iter([header]).chain(data))
            .await;
        if let Some(error) = take(&failure) {
            return Err(error);
        }
        sent.map_err(|status| message(status.into()))?;
        return Ok(());
    }
    use std::os::unix::fs::PermissionsExt;
    let file = tokio::fs::File::open(host)
        .await
        .map_err(|e| format!("{}: {e}", host.display()))?;
    let header = api::WriteFileRequest {
        part: Some(write_file_request::Part::Header(api::WriteHeader {
            sandbox_id: id.to_owned(),
            path: guest.to_owned(),
            mode: meta.permissions().mode() & 0o7777,
            ..api::WriteHeader::default()
        })),
    };
    let (failure, data) = until_error(read_chunks(file));
    let data = data.map(|data| api::WriteFileRequest {
        part: Some(write_file_request::Part::Data(data)),
    });
    let sent = client
        .files()
        .write(futures::stream::iter([header]).chain(data))
        .await;
    if let Some(error) = take(&failure) {
        // The write ended without its end: the guest keeps nothing.
        return Err(error);
    }
    sent.map_err(|status| message(status.into()))?;
    Ok(())
}

/// Symlinks `cp` follows to a file, as the kernel does at most.
const MAX_LINKS: usize = 40;

/// What the guest path names, through symlinks, as `cp` reads it: the
/// target's type and mode, not the link's own (0777), so a 0600 file
/// behind a link lands as 0600.
async fn followed(client: &Client, id: &str, guest: &str) -> Result<api::FileInfo, String> {
    let mut path = PathBuf::from(guest);
    for _ in 0..=MAX_LINKS {
        let info = client
            .files()
            .stat(api::StatRequest {
                sandbox_id: id.to_owned(),
                path: path.to_string_lossy().into_owned(),
            })
            .await
            .map_err(|status| message(status.into()))?
            .into_inner();
        if info.r#type() != api::FileType::Symlink {
            return Ok(info);
        }
        // A relative target is relative to the link's directory.
        let target = Path::new(&info.symlink_target);
        path = match path.parent() {
            Some(dir) => dir.join(target),
            None => target.to_owned(),
        };
    }
    Err(format!(
        "{guest}: more than {MAX_LINKS} symlinks on the way to a file"
    ))
}

async fn download(client: &Client, id: &str, guest: &str, host: &Path) -> Result<(), String> {
    let info = followed(client, id, guest).await?;
    if info.r#type() == api::FileType::Directory {
        let stream = client
            .files()
            .download_tar(api::DownloadTarRequest {
                sandbox_id: id.to_owned(),
                path: guest.to_owned(),
            })
            .await
            .map_err(|status| message(status.into()))?
            .into_inner();
        let chunks = stream.map(|chunk| chunk.map(|c| c.data).map_err(|s| s.message().to_owned()));
        host_tar::unpack(Box::pin(chunks), host)
            .await
            .map_err(|error| airlock::error_chain(&error))?;
        return Ok(());
    }
    let mut stream = client
        .files()
        .read(api::ReadFileRequest {
            sandbox_id: id.to_owned(),
            path: guest.to_owned(),
            ..api::ReadFileRequest::default()
        })
        .await
        .map_err(|status| message(status.into()))?
        .into_inner();
    // Written beside the target and renamed into place: a failed copy
    // leaves the old file.
    let dir = host
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let staged = tempfile::Builder::new()
        .prefix(".airlock-cp-")
        .tempfile_in(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut out = tokio::fs::File::from_std(
        staged
            .reopen()
            .map_err(|e| format!("{}: {e}", staged.path().display()))?,
    );
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|status| message(status.into()))?;
        out.write_all(&chunk.data)
            .await
            .map_err(|e| format!("{}: {e}", staged.path().display()))?;
    }
    out.flush()
        .await
        .map_err(|e| format!("{}: {e}", staged.path().display()))?;
    drop(out);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        staged.path(),
        std::fs::Permissions::from_mode(info.mode & 0o7777),
    )
    .map_err(|e| format!("{}: {e}", staged.path().display()))?;
    staged
        .persist(host)
        .map_err(|e| format!("{}: {}", host.display(), e.error))?;
    Ok(())
}

/// A file's bytes in chunks.
fn read_chunks(
    file: tokio::fs::File,
) -> impl Stream<Item = Result<Bytes, String>> + Send + 'static {
    futures::stream::unfold(Some(file), |file| async move {
        let mut file = file?;
        let mut buf = Vec::with_capacity(CHUNK);
        match (&mut file).take(CHUNK as u64).read_to_end(&mut buf).await {
            Ok(0) => None,
            Ok(_) => Some((Ok(Bytes::from(buf)), Some(file))),
            Err(e) => Some((Err(e.to_string()), None)),
        }
    })
}

type Failure = std::sync::Arc<std::sync::Mutex<Option<String>>>;

/// The items of `stream` until its first error, which is kept in the
/// returned slot (so a request stream ends early and the caller reports
/// why).
fn until_error<E: std::fmt::Display + Send + 'static>(
    stream: impl Stream<Item = Result<Bytes, E>> + Send + 'static,
) -> (Failure, impl Stream<Item = Bytes> + Send + 'static) {
    let failure: Failure = Default::default();
    let slot = std::sync::Arc::clone(&failure);
    let data = stream
        .take_while(move |item| {
            if let Err(error) = item {
                if let Ok(mut slot) = slot.lock() {
                    *slot = Some(error.to_string());
                }
            }
            futures::future::ready(item.is_ok())
        })
        .filter_map(|item| futures::future::ready(item.ok()));
    (failure, data)
}

fn take(failure: &Failure) -> Option<String> {
    failure.lock().ok().and_then(|mut slot| slot.take())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn cp_needs_exactly_one_guest_side() {
        let request = copy_request("data.txt", "sandbox-x1:/tmp/data").unwrap();
        let Copy::In { id, host, guest } = request else {
            panic!("not copy in")
        };
        assert_eq!(id, "sandbox-x1");
        assert_eq!(host, PathBuf::from("data.txt"));
        assert_eq!(guest, "/tmp/data");
        let request = copy_request("sb:/etc", "./out:dir").unwrap();
        assert!(matches!(request, Copy::Out { .. }), "{request:?}");
        assert!(copy_request("a", "b").is_err());
        assert!(copy_request("sb:/a", "sb:/b").is_err());
        assert!(copy_request("sb:rel", "b")
            .unwrap_err()
            .contains("absolute"));
    }
}
