//! `airlock run --upload HOST:GUEST` and `--download GUEST:HOST`: files or
//! directories copied into the sandbox before the command and out of it
//! after, with `Files::copy_in` and `copy_out`: a directory goes as a tar
//! stream (modes and symlinks kept); a file is written atomically with its
//! host mode.

use std::path::PathBuf;

use airlock::Sandbox;

/// One `SRC:DST` copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transfer {
    /// Where the data comes from.
    pub from: PathBuf,
    /// Where it goes.
    pub to: PathBuf,
}

/// Parses `SRC:DST` (split at the first ':'); both sides must be non-empty
/// and the guest side absolute (`guest_is_dst` says which side that is).
fn parse(spec: &str, guest_is_dst: bool) -> Result<Transfer, String> {
    let (from, to) = spec
        .split_once(':')
        .filter(|(a, b)| !a.is_empty() && !b.is_empty())
        .ok_or_else(|| format!("expected SRC:DST, got {spec:?}"))?;
    let guest = if guest_is_dst { to } else { from };
    if !guest.starts_with('/') {
        return Err(format!("the guest path must be absolute, got {guest:?}"));
    }
    Ok(Transfer {
        from: PathBuf::from(from),
        to: PathBuf::from(to),
    })
}

/// clap parser for `--upload HOST:GUEST`.
pub fn parse_upload(spec: &str) -> Result<Transfer, String> {
    parse(spec, true)
}

/// clap parser for `--download GUEST:HOST`.
pub fn parse_download(spec: &str) -> Result<Transfer, String> {
    parse(spec, false)
}

/// Copies each host path into the guest, in order.
pub async fn upload(sandbox: &Sandbox, transfers: &[Transfer]) -> Result<(), String> {
    let fs = sandbox.fs();
    for t in transfers {
        fs.copy_in(&t.from, &t.to).await.map_err(|e| {
            format!(
                "cannot upload {} to {}: {}",
                t.from.display(),
                t.to.display(),
                airlock::error_chain(&e)
            )
        })?;
        tracing::debug!(from = %t.from.display(), to = %t.to.display(), "uploaded");
    }
    Ok(())
}

/// Copies each guest path out to the host, in order.
pub async fn download(sandbox: &Sandbox, transfers: &[Transfer]) -> Result<(), String> {
    let fs = sandbox.fs();
    for t in transfers {
        let failed = |e: airlock::Error| {
            format!(
                "cannot download {} to {}: {}",
                t.from.display(),
                t.to.display(),
                airlock::error_chain(&e)
            )
        };
        fs.copy_out(&t.from, &t.to).await.map_err(failed)?;
        tracing::debug!(from = %t.from.display(), to = %t.to.display(), "downloaded");
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn specs_split_at_the_first_colon_and_need_an_absolute_guest_path() {
        let t = parse_upload("./data:/tmp/data").unwrap();
        assert_eq!((t.from, t.to), ("./data".into(), "/tmp/data".into()));
        let t = parse_download("/tmp/out:results").unwrap();
        assert_eq!(t.to, PathBuf::from("results"));
        assert!(parse_upload("data:tmp").unwrap_err().contains("absolute"));
        assert!(parse_upload("nocolon").unwrap_err().contains("SRC:DST"));
        assert!(parse_upload(":/x").is_err());
    }
}
