//! From a `StartRequest` to a running child: validation, the environment,
//! the user, and turning spawn failures into precise [`ProcessError`]s.
//!
//! [`Spec::from_request`] checks everything that can be checked before
//! `fork` (NUL bytes, env names, the user, the tag, the working directory),
//! because after it std reports a failed `chdir` and a missing program with
//! the same `ENOENT`. [`Spec::spawn`] builds the [`Launch`] (cleared
//! environment plus [`DEFAULT_ENV`] plus the user's `HOME`/`USER` (and
//! `TERM` with a `pty`) plus the request's; stdin `/dev/null` or a pipe;
//! stdout and stderr piped; its own process group; born in its cgroup; its
//! user, rlimits and capabilities set in the child by `ChildSetup`) and
//! spawns it through the reaper. With a `pty`, stdin, stdout and stderr
//! are all the slave side of a new pseudo-terminal (see `pty`) and the
//! child leads a new session on it instead of a process group.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use airlock_proto::v1::{Limits, StartRequest, StdinMode};
use nix::errno::Errno;
use nix::unistd::{access, geteuid, getgid, AccessFlags};
use rustix::process::Resource;
use tokio::sync::oneshot;

use super::cgroup::Cgroup;
use super::pty::{self, PtySpec};
use super::table::check_tag;
use super::user::{self, Credentials};
use super::ProcessError;
use crate::reaper::{Exit, Reaper};
use crate::spawn::{ChildSetup, Ids, Launch, Session};

/// The capacity of a program's stdout and stderr pipes (Linux's default is
/// 64 KiB): room for a writer to go on while the agent sends what it read,
/// and for reads of a whole output chunk (`output::CHUNK`).
const OUTPUT_PIPE_BYTES: usize = 256 * 1024;

/// The home of the agent's own user (root): the `HOME` of [`DEFAULT_ENV`],
/// and where a program that names neither a directory nor a user starts
/// (when it is a directory), as E2B starts commands in the user's home.
pub const AGENT_HOME: &str = "/root";

/// The environment every program starts with; the request's `env` is laid
/// over it. The agent's own environment is not inherited.
pub const DEFAULT_ENV: &[(&str, &str)] = &[
    (
        "PATH",
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    ),
    ("HOME", AGENT_HOME),
];

/// A validated request, ready to spawn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    argv: Vec<String>,
    env: Vec<(String, String)>,
    cwd: PathBuf,
    credentials: Option<Credentials>,
    stdin_pipe: bool,
    tag: Option<String>,
    timeout: Option<Duration>,
    limits: Limits,
    privileged: bool,
    pty: Option<PtySpec>,
    transient: bool,
}

/// A spawned child: its pid, the agent's ends of its pipes, its exit, and
/// the master side of its terminal when it has one (its stdin, stdout and
/// stderr are then not piped).
#[derive(Debug)]
pub struct Spawned {
    /// Its pid.
    pub pid: u32,
    /// The agent's ends of its pipes.
    pub pipes: Pipes,
    /// Its exit, from the reaper.
    pub exit: oneshot::Receiver<Exit>,
    /// The terminal's master side, for a `pty` program.
    pub pty_master: Option<OwnedFd>,
}

impl Spec {
    /// Validates a request and resolves its user.
    pub fn from_request(req: StartRequest) -> Result<Self, ProcessError> {
        if req.argv.is_empty() {
            return Err(ProcessError::EmptyArgv);
        }
        for (i, arg) in req.argv.iter().enumerate() {
            no_nul(arg, || format!("argv[{i}]"))?;
        }
        for (key, value) in &req.env {
            no_nul(key, || format!("env key {key:?}"))?;
            no_nul(value, || format!("env value of {key}"))?;
            if key.is_empty() || key.contains('=') {
                return Err(ProcessError::BadEnvName(key.clone()));
            }
        }
        no_nul(&req.cwd, || "cwd".to_owned())?;
        no_nul(&req.user, || "user".to_owned())?;
        let tag = check_tag(&req.tag)?;
        let credentials = credentials_for(&req.user)?;
        let cwd = if req.cwd.is_empty() {
            default_cwd(credentials.as_ref())
        } else {
            check_cwd(&req.cwd, credentials.as_ref())?
        };
        let pty = req.pty.map(PtySpec::from_request).transpose()?;
        // A terminal's input is always open; the stdin mode is ignored.
        let stdin_pipe = pty.is_none() && req.stdin == StdinMode::Pipe as i32;
        let timeout = (req.timeout_ms > 0).then(|| Duration::from_millis(req.timeout_ms));
        let limits = req.limits.unwrap_or_default();
        Ok(Self {
            argv: req.argv,
            env: merge_env(
                req.env,
                credentials.as_ref(),
                pty.as_ref().map(|p| p.term.as_str()),
            ),
            cwd,
            credentials,
            stdin_pipe,
            tag,
            timeout,
            limits,
            privileged: req.privileged,
            pty,
            transient: req.transient,
        })
    }

    /// The limits asked for.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Whether the request needs a cgroup to honour its limits.
    pub fn needs_cgroup(&self) -> bool {
        let l = &self.limits;
        l.memory_bytes > 0 || l.pids > 0 || l.cpu_millis > 0
    }

    /// The rlimits to set in the child.
    fn rlimits(&self) -> Vec<(Resource, u64)> {
        let l = &self.limits;
        [
            (Resource::Nofile, l.open_files),
            (Resource::Core, l.core_bytes),
            (Resource::Fsize, l.file_size_bytes),
            (Resource::Stack, l.stack_bytes),
        ]
        .into_iter()
        .filter(|&(_, value)| value > 0)
        .collect()
    }

    /// The program as the user named it.
    pub fn program(&self) -> &str {
        self.argv.first().map(String::as_str).unwrap_or_default()
    }

    /// The program and its arguments.
    pub fn argv(&self) -> &[String] {
        &self.argv
    }

    /// The tag, if any.
    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    /// The agent-enforced deadline, if any.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// Whether the program runs on a terminal.
    pub fn has_pty(&self) -> bool {
        self.pty.is_some()
    }

    /// Whether the program leaves nothing behind: its tree is killed at
    /// its exit and its entry forgotten once its end is recorded.
    pub fn transient(&self) -> bool {
        self.transient
    }

    /// Spawns the program through the reaper, in `cgroup` if given. Blocks
    /// for the `fork`/`exec`. The child's stdin is taken by the caller when
    /// it is a pipe.
    pub fn spawn(&self, reaper: &Reaper, cgroup: Option<&Cgroup>) -> Result<Spawned, ProcessError> {
        self.spawn_with(reaper, cgroup, None)
    }

    /// [`spawn`](Spec::spawn) with `stdin` as the program's stdin, whatever
    /// the request said (the code service gives its interpreter driver one
    /// end of a socket there). Ignored for a `pty` program.
    pub fn spawn_with_stdin(
        &self,
        reaper: &Reaper,
        cgroup: Option<&Cgroup>,
        stdin: OwnedFd,
    ) -> Result<Spawned, ProcessError> {
        self.spawn_with(reaper, cgroup, Some(stdin))
    }

    fn spawn_with(
        &self,
        reaper: &Reaper,
        cgroup: Option<&Cgroup>,
        stdin: Option<OwnedFd>,
    ) -> Result<Spawned, ProcessError> {
        let failed = |source| self.spawn_error(source);
        let (stdio, pipes, pty_master) = match (&self.pty, stdin) {
            (Some(pty), _) => {
                let (master, stdio) = self.terminal_stdio(pty)?;
                (stdio, Pipes::default(), Some(master))
            }
            (None, stdin) => {
                let (stdio, pipes) = self.pipe_stdio(stdin)?;
                (stdio, pipes, None)
            }
        };
        let mut launch = Launch::new(&self.argv, &self.env, stdio)
            .and_then(|launch| launch.current_dir(&self.cwd))
            .map_err(failed)?
            .session(match self.pty {
                Some(_) => Session::Terminal,
                None => Session::ProcessGroup,
            })
            .setup(ChildSetup {
                ids: self
                    .credentials
                    .as_ref()
                    .map(|c| Ids::new(c.uid, c.gid, &c.groups)),
                rlimits: self.rlimits(),
                privileged: self.privileged,
                reset_oom_score: std::process::id() == 1,
            });
        if let Some(cgroup) = cgroup {
            launch = launch.cgroup(cgroup.directory().map_err(failed)?);
        }
        let (pid, exit) = reaper
            .spawn(&launch)
            .map_err(|e| classify(self.program(), e))?;
        // `launch` still holds the child's ends (and a terminal's slave
        // side); they close when it goes, so the child alone keeps them.
        Ok(Spawned {
            pid,
            pipes,
            exit,
            pty_master,
        })
    }

    /// A start that failed before the program ran, naming it.
    fn spawn_error(&self, source: std::io::Error) -> ProcessError {
        ProcessError::Spawn {
            program: self.program().to_owned(),
            source,
        }
    }

    /// The child's stdin (`stdin` if given, else `/dev/null` or a pipe),
    /// stdout and stderr (pipes), and the agent's ends of the pipes.
    fn pipe_stdio(&self, stdin: Option<OwnedFd>) -> Result<([OwnedFd; 3], Pipes), ProcessError> {
        let failed = |source| self.spawn_error(source);
        let (child_stdin, our_stdin) = match stdin {
            Some(stdin) => (stdin, None),
            None if self.stdin_pipe => {
                let (reader, writer) = std::io::pipe().map_err(failed)?;
                (reader.into(), Some(writer.into()))
            }
            None => (
                File::open("/dev/null")
                    .map_err(ProcessError::DevNull)?
                    .into(),
                None,
            ),
        };
        let (stdout, child_stdout) = std::io::pipe().map_err(failed)?;
        let (stderr, child_stderr) = std::io::pipe().map_err(failed)?;
        for pipe in [&stdout, &stderr] {
            if let Err(e) = rustix::pipe::fcntl_setpipe_size(pipe, OUTPUT_PIPE_BYTES) {
                tracing::debug!(error = %e, "output pipe keeps its default size");
            }
            // The pipe is the child's: a program that reopens its own output
            // (`/proc/self/fd/1`, as the interpreter driver does) may only
            // when the pipe's inode is its user's, not the agent's root.
            if let Some(c) = &self.credentials {
                let owner = (
                    Some(rustix::fs::Uid::from_raw(c.uid)),
                    Some(rustix::fs::Gid::from_raw(c.gid)),
                );
                if let Err(e) = rustix::fs::fchown(pipe, owner.0, owner.1) {
                    tracing::debug!(error = %e, uid = c.uid, "output pipe stays the agent's");
                }
            }
        }
        Ok((
            [child_stdin, child_stdout.into(), child_stderr.into()],
            Pipes {
                stdin: our_stdin,
                stdout: Some(stdout.into()),
                stderr: Some(stderr.into()),
            },
        ))
    }

    /// A new terminal: its master, and its slave as stdin, stdout and
    /// stderr.
    fn terminal_stdio(&self, spec: &PtySpec) -> Result<(OwnedFd, [OwnedFd; 3]), ProcessError> {
        let failed = |source| ProcessError::Pty {
            program: self.program().to_owned(),
            source,
        };
        let (master, slave) = pty::open(spec.size).map_err(failed)?;
        let stdout = slave.try_clone().map_err(failed)?;
        let stderr = slave.try_clone().map_err(failed)?;
        Ok((master, [slave, stdout, stderr]))
    }
}

/// The agent's ends of a child's pipes (none for a terminal).
#[derive(Debug, Default)]
pub struct Pipes {
    /// The writing end of its stdin, when that is a pipe.
    pub stdin: Option<OwnedFd>,
    /// The reading ends of its stdout and stderr.
    pub stdout: Option<OwnedFd>,
    pub stderr: Option<OwnedFd>,
}

/// Resolves the request's user. An unprivileged agent (tests) can only run
/// programs as itself.
fn credentials_for(spec: &str) -> Result<Option<Credentials>, ProcessError> {
    let Some(credentials) = user::resolve(spec)? else {
        return Ok(None);
    };
    let euid = geteuid();
    if euid.is_root() {
        return Ok(Some(credentials));
    }
    if credentials.uid == euid.as_raw() && credentials.gid == getgid().as_raw() {
        return Ok(None);
    }
    Err(ProcessError::UserSwitchDenied(spec.to_owned()))
}

fn no_nul(value: &str, field: impl FnOnce() -> String) -> Result<(), ProcessError> {
    if value.contains('\0') {
        return Err(ProcessError::Nul { field: field() });
    }
    Ok(())
}

/// The request's variables over [`DEFAULT_ENV`], the image's and the
/// trusted roots' variables, the user's `HOME`,
/// `USER` and `LOGNAME` and a terminal's `TERM`, sorted for determinism.
fn merge_env(
    extra: HashMap<String, String>,
    credentials: Option<&Credentials>,
    term: Option<&str>,
) -> Vec<(String, String)> {
    let mut env: std::collections::BTreeMap<String, String> = DEFAULT_ENV
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    // The root image's own environment (its PATH above all): init::root.
    env.extend(crate::init::root::image_env().iter().cloned());
    // The CA variables of roots installed by System.TrustRoots: trust.
    env.extend(crate::trust::env());
    if let Some(c) = credentials {
        env.insert("HOME".into(), c.home.clone().unwrap_or_else(|| "/".into()));
        if let Some(name) = &c.name {
            env.insert("USER".into(), name.clone());
            env.insert("LOGNAME".into(), name.clone());
        }
    }
    if let Some(term) = term {
        env.insert("TERM".into(), term.to_owned());
    }
    env.extend(extra);
    env.into_iter().collect()
}

/// Where a program starts when its request names no directory: a named
/// user's home, or without a user the agent's own ([`AGENT_HOME`]), when
/// it is a directory the agent may enter; else `/`.
fn default_cwd(credentials: Option<&Credentials>) -> PathBuf {
    match credentials {
        Some(c) => home_or_root(c.home.as_deref()),
        None => home_or_root(Some(AGENT_HOME)),
    }
}

/// `home` when it is a directory the agent may enter, else `/`.
fn home_or_root(home: Option<&str>) -> PathBuf {
    home.map(Path::new)
        .filter(|home| home.is_dir() && access(*home, AccessFlags::X_OK).is_ok())
        .map_or_else(|| PathBuf::from("/"), Path::to_path_buf)
}

fn check_cwd(cwd: &str, credentials: Option<&Credentials>) -> Result<PathBuf, ProcessError> {
    let path = Path::new(cwd);
    if !path.is_absolute() {
        return Err(ProcessError::RelativeCwd(cwd.to_owned()));
    }
    match std::fs::metadata(path) {
        Ok(meta) if !meta.is_dir() => return Err(ProcessError::CwdNotDirectory(cwd.to_owned())),
        Ok(meta) => {
            if let Some(c) = credentials {
                if !may_enter(&meta, c) {
                    return Err(ProcessError::CwdNoAccess(cwd.to_owned()));
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ProcessError::CwdNotFound(cwd.to_owned()))
        }
        Err(source) => {
            return Err(ProcessError::CwdUnusable {
                path: cwd.to_owned(),
                source,
            })
        }
    }
    match access(path, AccessFlags::X_OK) {
        Ok(()) => Ok(path.to_owned()),
        Err(_) => Err(ProcessError::CwdNoAccess(cwd.to_owned())),
    }
}

/// Whether `c` may enter a directory, judged from its mode bits (the
/// agent cannot ask the kernel on another user's behalf before the fork).
fn may_enter(meta: &std::fs::Metadata, c: &Credentials) -> bool {
    let mode = meta.mode();
    if c.uid == 0 {
        return true;
    }
    if meta.uid() == c.uid {
        mode & 0o100 != 0
    } else if c.groups.contains(&meta.gid()) || meta.gid() == c.gid {
        mode & 0o010 != 0
    } else {
        mode & 0o001 != 0
    }
}

/// Names a spawn failure by its errno.
fn classify(program: &str, e: std::io::Error) -> ProcessError {
    let program = program.to_owned();
    let errno = e.raw_os_error().map(Errno::from_raw);
    match errno {
        Some(Errno::ENOENT | Errno::ENOTDIR) => {
            // A path that exists but "is not found" lacks its interpreter.
            if program.contains('/') && Path::new(&program).is_file() {
                ProcessError::InterpreterMissing(program)
            } else {
                ProcessError::ProgramNotFound(program)
            }
        }
        Some(Errno::EACCES | Errno::EPERM) => ProcessError::ProgramNoAccess(program),
        Some(Errno::ENOEXEC) => ProcessError::NotExecutable(program),
        Some(Errno::E2BIG) => ProcessError::ArgsTooLong,
        Some(Errno::EAGAIN | Errno::ENOMEM | Errno::EMFILE | Errno::ENFILE) => {
            ProcessError::Exhausted { program, source: e }
        }
        _ => ProcessError::Spawn { program, source: e },
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn req(argv: &[&str]) -> StartRequest {
        StartRequest {
            argv: argv.iter().map(|s| (*s).to_owned()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn empty_argv_is_rejected() {
        assert!(matches!(
            Spec::from_request(req(&[])),
            Err(ProcessError::EmptyArgv)
        ));
    }

    #[test]
    fn nul_bytes_are_rejected_naming_the_field() {
        let err = Spec::from_request(req(&["sh", "a\0b"])).unwrap_err();
        assert_eq!(err.to_string(), "argv[1] contains a NUL byte");

        let mut r = req(&["sh"]);
        r.env.insert("K".into(), "v\0".into());
        assert!(matches!(
            Spec::from_request(r),
            Err(ProcessError::Nul { .. })
        ));
    }

    #[test]
    fn bad_env_names_are_rejected() {
        for name in ["", "A=B"] {
            let mut r = req(&["sh"]);
            r.env.insert(name.into(), "v".into());
            assert!(matches!(
                Spec::from_request(r),
                Err(ProcessError::BadEnvName(_))
            ));
        }
    }

    #[test]
    fn env_is_defaults_overlaid_by_request() {
        let mut r = req(&["sh"]);
        r.env.insert("HOME".into(), "/home/u".into());
        r.env.insert("FOO".into(), "bar".into());
        let spec = Spec::from_request(r).unwrap();
        let env: HashMap<_, _> = spec.env.into_iter().collect();
        assert_eq!(env["HOME"], "/home/u");
        assert_eq!(env["FOO"], "bar");
        assert!(env["PATH"].contains("/usr/bin"));
        assert_eq!(env.len(), 3);
    }

    #[test]
    fn a_pty_sets_term_unless_env_does_and_ignores_the_stdin_mode() {
        let mut r = req(&["sh"]);
        r.pty = Some(airlock_proto::v1::Pty::default());
        r.stdin = StdinMode::Pipe as i32;
        let spec = Spec::from_request(r.clone()).unwrap();
        assert!(spec.has_pty() && !spec.stdin_pipe);
        let env: HashMap<_, _> = spec.env.into_iter().collect();
        assert_eq!(env["TERM"], "xterm-256color");

        r.env.insert("TERM".into(), "dumb".into());
        let env: HashMap<_, _> = Spec::from_request(r).unwrap().env.into_iter().collect();
        assert_eq!(env["TERM"], "dumb", "the request's env wins");

        let plain = Spec::from_request(req(&["sh"])).unwrap();
        assert!(!plain.env.iter().any(|(k, _)| k == "TERM"));
    }

    #[test]
    fn limits_become_rlimits_and_cgroup_needs() {
        let spec = Spec::from_request(req(&["sh"])).unwrap();
        assert!(!spec.needs_cgroup());
        assert!(spec.rlimits().is_empty());
        let mut r = req(&["sh"]);
        r.limits = Some(Limits {
            pids: 64,
            open_files: 100,
            ..Default::default()
        });
        let spec = Spec::from_request(r).unwrap();
        assert!(spec.needs_cgroup());
        assert_eq!(spec.rlimits(), vec![(Resource::Nofile, 100)]);
    }

    #[test]
    fn empty_cwd_without_a_user_means_the_agents_home() {
        assert_eq!(
            Spec::from_request(req(&["sh"])).unwrap().cwd,
            home_or_root(Some(AGENT_HOME))
        );
        assert_eq!(default_cwd(None), home_or_root(Some(AGENT_HOME)));
    }

    #[test]
    fn a_home_is_used_only_when_it_is_a_directory() {
        let home = tempfile::tempdir().unwrap();
        let file = home.path().join("f");
        std::fs::write(&file, b"").unwrap();
        let home_text = home.path().display().to_string();
        assert_eq!(home_or_root(Some(&home_text)), home.path());
        assert_eq!(
            home_or_root(Some(&file.display().to_string())),
            Path::new("/")
        );
        assert_eq!(home_or_root(Some("/no/such/home")), Path::new("/"));
        assert_eq!(home_or_root(None), Path::new("/"));
    }

    #[test]
    fn empty_cwd_means_a_named_users_home() {
        let home = tempfile::tempdir().unwrap();
        let credentials = Credentials {
            uid: 1000,
            gid: 1000,
            groups: vec![1000],
            name: Some("user".into()),
            home: Some(home.path().display().to_string()),
        };
        assert_eq!(default_cwd(Some(&credentials)), home.path());
        let gone = Credentials {
            home: Some("/no/such/home".into()),
            ..credentials
        };
        assert_eq!(default_cwd(Some(&gone)), Path::new("/"));
        let homeless = Credentials { home: None, ..gone };
        assert_eq!(default_cwd(Some(&homeless)), Path::new("/"));
    }

    #[test]
    fn bad_cwds_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"").unwrap();
        type Check = fn(&ProcessError) -> bool;
        let cases: [(String, Check); 4] = [
            ("rel/dir".into(), |e| {
                matches!(e, ProcessError::RelativeCwd(_))
            }),
            (dir.path().join("missing").display().to_string(), |e| {
                matches!(e, ProcessError::CwdNotFound(_))
            }),
            (file.display().to_string(), |e| {
                matches!(e, ProcessError::CwdNotDirectory(_))
            }),
            (file.join("below").display().to_string(), |e| {
                matches!(e, ProcessError::CwdUnusable { .. })
            }),
        ];
        for (cwd, want) in cases {
            let mut r = req(&["sh"]);
            r.cwd = cwd.clone();
            let err = Spec::from_request(r).unwrap_err();
            assert!(want(&err), "{cwd}: {err}");
            assert!(err.to_string().contains(&cwd), "{err}");
        }
    }

    #[test]
    fn spawn_errors_are_classified_by_errno() {
        let os = std::io::Error::from_raw_os_error;
        assert!(matches!(
            classify("nope", os(nix::libc::ENOENT)),
            ProcessError::ProgramNotFound(_)
        ));
        assert!(matches!(
            classify("/bin/sh", os(nix::libc::ENOENT)),
            ProcessError::InterpreterMissing(_)
        ));
        assert!(matches!(
            classify("x", os(nix::libc::EACCES)),
            ProcessError::ProgramNoAccess(_)
        ));
        assert!(matches!(
            classify("x", os(nix::libc::ENOEXEC)),
            ProcessError::NotExecutable(_)
        ));
        assert!(matches!(
            classify("x", os(nix::libc::EAGAIN)),
            ProcessError::Exhausted { .. }
        ));
        assert!(matches!(
            classify("x", os(nix::libc::EIO)),
            ProcessError::Spawn { .. }
        ));
    }
}
