//! A pool member's warm-up: programs run in each member after its start
//! and before it is frozen, so that the first program of that kind a user
//! runs in it costs what the second one would.
//!
//! Why: under TCG a new QEMU process translates every guest code path the
//! first time it runs it, and a clone is a new process. A template's
//! warm-up puts the files in the guest's page cache, but the translated
//! code lives in the process, so a pooled clone frozen before anything
//! ran in it paid the translation of the shell, the loader and Python on
//! its first exec (about 350 ms of a first `python3 -c` under TCG).
//!
//! What a user could see of it is removed or refused:
//!
//! - files: each program runs with `HOME`, `TMPDIR` and its directory in a
//!   scratch directory under `/tmp`, removed afterwards; [`CHECKED_ROOTS`]
//!   are snapshotted before and compared after, and a warm-up that
//!   created, changed or deleted anything there fails the fill
//!   ([`WarmUpError::LeftChanges`]), so no member with a trace is handed
//!   out;
//! - programs: each runs transient (`StartRequest.transient`): whatever it
//!   left running is killed at its exit, and the agent forgets it, so no
//!   process list shows it;
//! - environment and history: the variables are the program's own, not
//!   the sandbox's, and shells run non-interactively with their `HOME` in
//!   the scratch directory;
//! - identity and entropy: the member was personalised at its start, and
//!   is again at its handout (fresh entropy, the clock, its hostname).

use std::path::PathBuf;
use std::time::Duration;

use airlock_proto::Feature;

use crate::error::{Error, Result};
use crate::exec::Command;
use crate::sandbox::Sandbox;

/// Where a warm-up must leave everything as it found it: the places a
/// user looks for files (home directories, temporary directories) and
/// the system's configuration. Those that do not exist in the guest are
/// skipped.
pub const CHECKED_ROOTS: [&str; 5] = ["/etc", "/home", "/root", "/tmp", "/var/tmp"];
/// How long one warm-up program may run.
const PROGRAM_TIMEOUT: Duration = Duration::from_secs(60);
/// The most stderr a failure quotes.
const STDERR_QUOTED: usize = 400;
/// The most changed paths an error names.
const PATHS_NAMED: usize = 8;

/// The programs a pool runs in each member before freezing it (see
/// [`PoolConfig::warm_up`](crate::PoolConfig::warm_up)).
///
/// The default, [`WarmUp::standard`], is the program a template runs
/// before it is saved: a shell, and `python3 -c pass` where the image has
/// Python. Add the commands your users run first ([`command`](Self::command),
/// [`shell`](Self::shell)); [`none`](Self::none) freezes members as they
/// started. Each program must exit 0 and may write only under its `HOME`
/// and `TMPDIR` (a scratch directory, removed after it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WarmUp {
    commands: Vec<Vec<String>>,
}

impl Default for WarmUp {
    fn default() -> Self {
        WarmUp::standard()
    }
}

impl WarmUp {
    /// No warm-up: members are frozen as soon as they answer.
    pub fn none() -> Self {
        WarmUp {
            commands: Vec::new(),
        }
    }

    /// The template's warm-up program: a shell, and `python3 -c pass`
    /// where the image has Python.
    pub fn standard() -> Self {
        WarmUp::none().command(crate::sandbox::TEMPLATE_WARM_UP.iter().copied())
    }

    /// Adds a program (its argv; the first is looked up in the guest's
    /// `PATH`), run after the ones before it.
    pub fn command<I, S>(mut self, argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let argv: Vec<String> = argv.into_iter().map(Into::into).collect();
        if !argv.is_empty() {
            self.commands.push(argv);
        }
        self
    }

    /// Adds a shell command line, run as `sh -c LINE`.
    pub fn shell(self, line: impl Into<String>) -> Self {
        self.command(["sh".to_owned(), "-c".to_owned(), line.into()])
    }

    /// The programs, in the order they run.
    pub fn commands(&self) -> &[Vec<String>] {
        &self.commands
    }

    /// Whether there is nothing to run.
    pub fn is_empty(&self) -> bool {
        self.commands.is_empty()
    }

    /// Runs every program in `sandbox` and checks that none left a trace.
    #[tracing::instrument(name = "warm_up", skip_all, fields(id = sandbox.id()))]
    pub(super) async fn run(&self, sandbox: &Sandbox) -> Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        let features = sandbox.features();
        if !features.has(Feature::Transient) || !features.has(Feature::TreeChanges) {
            tracing::warn!(
                revision = features.revision(),
                "the agent cannot run a warm-up without a trace; the member is frozen unwarmed"
            );
            return Ok(());
        }
        let began = std::time::Instant::now();
        let files = sandbox.fs();
        let mut roots = Vec::with_capacity(CHECKED_ROOTS.len());
        for root in CHECKED_ROOTS {
            match files.stat(root).await {
                Ok(meta) if meta.is_dir() => roots.push(root),
                Ok(_) => {}
                Err(error) if error.kind() == crate::ErrorKind::NotFound => {}
                Err(error) => return Err(setup(error)),
            }
        }
        let tracker = files.track_changes(&roots).await.map_err(setup)?;
        let scratch = scratch_dir();
        files.mkdir(&scratch, false).await.map_err(setup)?;
        // The sandbox's default user, whoever it is, writes there.
        files.chmod(&scratch, 0o777).await.map_err(setup)?;
        let ran = self.run_programs(sandbox, &scratch).await;
        let removed = files.remove(&scratch, true).await;
        let changes = tracker.finish(PATHS_NAMED as u64 + 1).await;
        ran?;
        removed.map_err(setup)?;
        let changes = changes.map_err(setup)?;
        if !changes.changes.is_empty() {
            return Err(WarmUpError::LeftChanges {
                roots: roots.join(", "),
                paths: name_paths(
                    changes
                        .changes
                        .iter()
                        .map(|change| change.path.display().to_string()),
                    changes.truncated,
                ),
            }
            .into());
        }
        tracing::debug!(took = ?began.elapsed(), programs = self.commands.len(), "warmed up");
        Ok(())
    }

    async fn run_programs(&self, sandbox: &Sandbox, scratch: &str) -> Result<()> {
        for argv in &self.commands {
            let Some((program, args)) = argv.split_first() else {
                continue;
            };
            let command = Command::new(program.clone())
                .args(args.iter().cloned())
                .env("HOME", scratch)
                .env("TMPDIR", scratch)
                .cwd(scratch)
                .timeout(PROGRAM_TIMEOUT)
                .transient();
            let failed = |source: Error| WarmUpError::Exec {
                command: shown(argv),
                source: Box::new(source),
            };
            let output = sandbox
                .exec(&command)
                .await
                .map_err(failed)?
                .output()
                .await
                .map_err(failed)?;
            if output.timed_out {
                return Err(WarmUpError::TimedOut {
                    command: shown(argv),
                    limit: PROGRAM_TIMEOUT,
                }
                .into());
            }
            if !output.status.success() {
                return Err(WarmUpError::Failed {
                    command: shown(argv),
                    status: output.status.to_string(),
                    stderr: quote_stderr(&output.stderr),
                }
                .into());
            }
        }
        Ok(())
    }
}

/// Why a pool member's warm-up failed; the member is discarded and the
/// fill reported as failed ([`PoolStatus::last_error`](crate::PoolStatus)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WarmUpError {
    /// A program could not be started or followed.
    #[error("warm-up `{command}`")]
    Exec {
        command: String,
        #[source]
        source: Box<Error>,
    },
    /// A program did not exit 0.
    #[error("warm-up `{command}` ended with {status}{stderr}; a warm-up program must succeed")]
    Failed {
        command: String,
        status: String,
        stderr: String,
    },
    /// A program ran past its limit and was killed.
    #[error("warm-up `{command}` ran past {limit:?} and was killed")]
    TimedOut { command: String, limit: Duration },
    /// The warm-up created, changed or deleted files a user would see.
    #[error(
        "the warm-up changed {paths} (checked: {roots}); a warm-up may write only under its \
         HOME and TMPDIR, which are removed after it"
    )]
    LeftChanges { roots: String, paths: String },
    /// Preparing the warm-up or cleaning up after it failed.
    #[error("preparing or checking the warm-up")]
    Setup(#[source] Box<Error>),
}

fn setup(error: Error) -> Error {
    WarmUpError::Setup(Box::new(error)).into()
}

/// A fresh scratch directory's guest path.
fn scratch_dir() -> String {
    // A name nobody guesses is enough; a failed read still gives a
    // directory (all zeros) that mkdir (without parents) refuses if it
    // exists.
    let hex = crate::random::hex::<8>().unwrap_or_else(|_| "0".repeat(16));
    PathBuf::from("/tmp")
        .join(format!(".airlock-warm-up-{hex}"))
        .display()
        .to_string()
}

/// A program as a user would type it.
fn shown(argv: &[String]) -> String {
    argv.iter()
        .map(|arg| {
            if !arg.is_empty()
                && arg
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:".contains(c))
            {
                arg.clone()
            } else {
                format!("'{}'", arg.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The end of a failed program's stderr, for its error.
fn quote_stderr(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let text = text.trim();
    if text.is_empty() {
        return String::new();
    }
    let start = text
        .char_indices()
        .map(|(i, _)| i)
        .find(|&i| text.len() - i <= STDERR_QUOTED)
        .unwrap_or(0);
    format!(": {}", &text[start..])
}

/// Up to [`PATHS_NAMED`] paths, and whether there were more.
fn name_paths(paths: impl Iterator<Item = String>, truncated: bool) -> String {
    let mut paths: Vec<String> = paths.collect();
    let more = truncated || paths.len() > PATHS_NAMED;
    paths.truncate(PATHS_NAMED);
    let mut named = paths.join(", ");
    if more {
        named.push_str(" and more");
    }
    named
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_standard_warm_up_is_the_templates() {
        let standard = WarmUp::default();
        assert_eq!(standard, WarmUp::standard());
        assert_eq!(standard.commands().len(), 1);
        assert_eq!(standard.commands()[0][0], "sh");
        assert!(standard.commands()[0][2].contains("python3 -c pass"));
        assert!(WarmUp::none().is_empty());
    }

    #[test]
    fn commands_run_in_the_order_added() {
        let warm = WarmUp::none()
            .shell("python3 -c 'import json'")
            .command(["node", "-e", "1"])
            .command(Vec::<String>::new());
        assert_eq!(
            warm.commands(),
            [
                vec!["sh", "-c", "python3 -c 'import json'"],
                vec!["node", "-e", "1"]
            ]
        );
    }

    #[test]
    fn errors_show_the_program_as_typed() {
        let argv: Vec<String> = ["sh", "-c", "echo it's"].map(String::from).into();
        assert_eq!(shown(&argv), r"sh -c 'echo it'\''s'");
        assert_eq!(quote_stderr(b"  \n"), "");
        assert_eq!(quote_stderr(b"boom\n"), ": boom");
        let long = "x".repeat(1000);
        assert_eq!(quote_stderr(long.as_bytes()).len(), 2 + STDERR_QUOTED);
    }

    #[test]
    fn a_long_list_of_changes_is_cut() {
        let paths = (0..20).map(|i| format!("/tmp/{i}"));
        let named = name_paths(paths, false);
        assert!(named.starts_with("/tmp/0, /tmp/1"), "{named}");
        assert!(named.ends_with("/tmp/7 and more"), "{named}");
        assert_eq!(
            name_paths(["/root/a".to_owned()].into_iter(), false),
            "/root/a"
        );
        assert_eq!(
            name_paths(["/root/a".to_owned()].into_iter(), true),
            "/root/a and more"
        );
    }

    #[test]
    fn scratch_directories_are_fresh_names_under_tmp() {
        let (a, b) = (scratch_dir(), scratch_dir());
        assert!(a.starts_with("/tmp/.airlock-warm-up-"), "{a}");
        assert_ne!(a, b);
    }
}
