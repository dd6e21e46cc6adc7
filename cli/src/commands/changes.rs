//! `airlock run --changes[=DIRS]` and `--download-changes HOSTDIR`: what
//! the command created, modified and deleted under guest directories
//! (default `/root` and `/tmp`, those that exist), printed on stderr after
//! it ends, and the created and modified files downloaded.

use std::path::{Path, PathBuf};

use airlock::fs::{ChangeKind, ChangeTracker, Changes, FileKind};
use airlock::Sandbox;

/// The roots `--changes` tracks when it names none.
pub const DEFAULT_ROOTS: &[&str] = &["/root", "/tmp"];

/// `--changes=DIR,...`: guest directories (none: the defaults).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Roots(pub Vec<PathBuf>);

/// What `run` was asked to track.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tracking {
    /// Guest directories; empty means the defaults.
    pub roots: Vec<PathBuf>,
    /// Where to download the changed files.
    pub download: Option<PathBuf>,
}

impl Tracking {
    /// From `run`'s options; `None` when nothing is tracked.
    pub fn from_args(changes: Option<Roots>, download: Option<PathBuf>) -> Option<Self> {
        if changes.is_none() && download.is_none() {
            return None;
        }
        Some(Tracking {
            roots: changes.map(|r| r.0).unwrap_or_default(),
            download,
        })
    }

    /// Records the roots before the command runs. Default roots the guest
    /// lacks are left out; a named root that is missing is an error.
    pub async fn start(&self, sandbox: &Sandbox) -> Result<Started, String> {
        let fs = sandbox.fs();
        let roots = if self.roots.is_empty() {
            let mut found = Vec::new();
            for root in DEFAULT_ROOTS {
                if fs.stat(root).await.is_ok_and(|m| m.is_dir()) {
                    found.push(PathBuf::from(root));
                }
            }
            found
        } else {
            self.roots.clone()
        };
        if roots.is_empty() {
            return Err("--changes: none of /root and /tmp exists in the guest; name the directories (--changes=/dir,...)".into());
        }
        let tracker = fs.track_changes(&roots).await.map_err(|e| {
            format!(
                "cannot record {}: {}",
                list(&roots),
                airlock::error_chain(&e)
            )
        })?;
        Ok(Started { roots, tracker })
    }
}

/// The recorded roots, waiting for the command to end.
#[derive(Debug)]
pub struct Started {
    roots: Vec<PathBuf>,
    tracker: ChangeTracker,
}

impl Started {
    /// Prints what changed (stderr) and downloads it if asked.
    pub async fn finish(self, sandbox: &Sandbox, download: Option<&Path>) -> Result<(), String> {
        let changes = self
            .tracker
            .changes()
            .await
            .map_err(|e| format!("cannot list the changes: {}", airlock::error_chain(&e)))?;
        eprint!("{}", report(&self.roots, &changes));
        if let Some(dir) = download {
            let count = sandbox
                .fs()
                .download_changes(&changes, dir)
                .await
                .map_err(|e| {
                    format!(
                        "cannot download the changes to {}: {}",
                        dir.display(),
                        airlock::error_chain(&e)
                    )
                })?;
            eprintln!("airlock: downloaded {count} entries to {}", dir.display());
        }
        Ok(())
    }
}

fn list(roots: &[PathBuf]) -> String {
    roots
        .iter()
        .map(|r| r.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The lines `--changes` prints.
pub fn report(roots: &[PathBuf], changes: &Changes) -> String {
    let mut out = format!(
        "airlock: {} change{} under {}\n",
        changes.changes.len(),
        if changes.changes.len() == 1 { "" } else { "s" },
        list(roots)
    );
    for change in &changes.changes {
        let slash = if change.file_kind == FileKind::Directory {
            "/"
        } else {
            ""
        };
        let size = match change.kind {
            ChangeKind::Modified => format!("{} B (was {} B)", change.size, change.previous_size),
            _ if change.file_kind == FileKind::Directory => String::new(),
            _ => format!("{} B", change.size),
        };
        out.push_str(&format!(
            "{:<9} {}{slash}  {size}\n",
            change.kind.as_str(),
            change.path.display()
        ));
    }
    if changes.truncated {
        out.push_str(
            "airlock: the list is truncated: more changes or entries than the agent reports\n",
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock::fs::Change;
    use std::time::SystemTime;

    #[test]
    fn the_report_has_a_line_per_change() {
        let change = |kind, path: &str, file_kind, size, previous_size| Change {
            kind,
            path: PathBuf::from(path),
            file_kind,
            size,
            previous_size,
            modified: SystemTime::UNIX_EPOCH,
        };
        let changes = Changes {
            changes: vec![
                change(ChangeKind::Created, "/tmp/out", FileKind::Directory, 60, 0),
                change(ChangeKind::Created, "/tmp/out/a.txt", FileKind::File, 12, 0),
                change(ChangeKind::Modified, "/root/data", FileKind::File, 20, 10),
                change(ChangeKind::Deleted, "/tmp/old", FileKind::File, 3, 3),
            ],
            truncated: true,
            scanned: 9,
        };
        let text = report(&[PathBuf::from("/root"), PathBuf::from("/tmp")], &changes);
        assert_eq!(
            text,
            "airlock: 4 changes under /root, /tmp\n\
             created   /tmp/out/  \n\
             created   /tmp/out/a.txt  12 B\n\
             modified  /root/data  20 B (was 10 B)\n\
             deleted   /tmp/old  3 B\n\
             airlock: the list is truncated: more changes or entries than the agent reports\n"
        );
        assert_eq!(Tracking::from_args(None, None), None);
        let download = Tracking::from_args(None, Some("out".into())).unwrap();
        assert!(download.roots.is_empty());
    }
}
