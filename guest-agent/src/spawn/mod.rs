//! Starting a program without copying the agent.
//!
//! `fork` copies the calling process's page tables, and until the child
//! `exec`s, every page either side writes is copied on the fault; under
//! emulation that was about 2 ms of every exec in an agent with a dozen
//! threads. Moving the new process into its cgroup afterwards (a write to
//! `cgroup.procs`) cost another 1 to 2 ms. So the agent starts programs the
//! way `posix_spawn` does, with one more flag:
//!
//! - [`Launch`] holds everything the new process needs, built in the agent
//!   (C strings, the search path resolved into candidate paths, the stdio
//!   descriptors, the cgroup directory, the [`ChildSetup`] steps): the
//!   child allocates nothing and takes no lock.
//! - `vfork` clones with `CLONE_VM | CLONE_VFORK | CLONE_INTO_CGROUP`: the
//!   child shares the agent's memory, runs on a stack of its own, is born
//!   in its cgroup (so nothing it forks can escape it), and the calling
//!   thread sleeps until the child has `exec`ed or exited.
//! - In the child, `Launch::enter` puts the stdio in place, starts the
//!   process group or the terminal's session, changes directory and runs
//!   the [`ChildSetup`] steps; then signal handlers go back to their
//!   defaults, the signal mask is cleared, and each candidate path is
//!   `exec`ed in turn (`execvp`'s rules: a missing file or a directory in
//!   the way moves on, a permission error is remembered, anything else
//!   stops).
//! - A failure in the child is left as an errno in memory the agent reads
//!   when it wakes; the agent then reaps the child itself, so a failed
//!   start leaves no process and reports the same errno `exec` gave.

pub mod child_setup;
mod vfork;

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::io::Errno;

pub use child_setup::{ChildSetup, Ids, DROPPED_CAPS};
pub use vfork::ChildStack;

/// Where `execvp` looks when the program's environment has no `PATH`
/// (musl's default).
const DEFAULT_SEARCH: &str = "/usr/local/bin:/bin:/usr/bin";

/// The session a program starts in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Session {
    /// The agent's session, in a new process group the program leads.
    #[default]
    ProcessGroup,
    /// A new session the program leads, with its stdin (a terminal's slave
    /// side) as the controlling terminal.
    Terminal,
}

/// Everything a new program needs, prepared before the clone.
#[derive(Debug)]
pub struct Launch {
    /// The paths to `exec`, in order (several when `PATH` is searched).
    candidates: Vec<CString>,
    argv: Vec<CString>,
    /// `KEY=value` strings: the program's whole environment.
    env: Vec<CString>,
    cwd: Option<CString>,
    /// stdin, stdout and stderr, each at 3 or above so that putting one in
    /// place never closes another.
    stdio: [OwnedFd; 3],
    /// The cgroup directory it is born in.
    cgroup: Option<OwnedFd>,
    session: Session,
    setup: ChildSetup,
}

impl Launch {
    /// `argv[0]` with `argv` and exactly `env`, on `stdio` (stdin, stdout,
    /// stderr), in the agent's working directory and cgroup, with no set-up
    /// steps. `argv[0]` without a slash is searched for in `env`'s `PATH`.
    pub fn new(argv: &[String], env: &[(String, String)], stdio: [OwnedFd; 3]) -> io::Result<Self> {
        let program = argv.first().map(String::as_str).unwrap_or_default();
        let search = env
            .iter()
            .find(|(key, _)| key == "PATH")
            .map(|(_, value)| value.as_str());
        let env = env
            .iter()
            .map(|(key, value)| c_string(format!("{key}={value}").into_bytes()))
            .collect::<io::Result<_>>()?;
        let argv = argv
            .iter()
            .map(|arg| c_string(arg.clone().into_bytes()))
            .collect::<io::Result<_>>()?;
        let [stdin, stdout, stderr] = stdio;
        Ok(Self {
            candidates: present(candidates(program, search)?),
            argv,
            env,
            cwd: None,
            stdio: [
                above_stdio(stdin)?,
                above_stdio(stdout)?,
                above_stdio(stderr)?,
            ],
            cgroup: None,
            session: Session::default(),
            setup: ChildSetup::default(),
        })
    }

    /// Starts the program in `dir` instead.
    pub fn current_dir(mut self, dir: &Path) -> io::Result<Self> {
        self.cwd = Some(c_string(dir.as_os_str().as_bytes().to_vec())?);
        Ok(self)
    }

    /// Starts it inside the cgroup whose directory `dir` is.
    pub fn cgroup(mut self, dir: OwnedFd) -> Self {
        self.cgroup = Some(dir);
        self
    }

    /// Starts it in `session`.
    pub fn session(mut self, session: Session) -> Self {
        self.session = session;
        self
    }

    /// Runs `setup` in the child before the `exec`.
    pub fn setup(mut self, setup: ChildSetup) -> Self {
        self.setup = setup;
        self
    }

    /// Starts the program: its pid once it has `exec`ed, or the errno that
    /// stopped it (the child is then reaped). Blocks for the clone and the
    /// `exec`; the caller must keep anyone else from reaping meanwhile
    /// (see `reaper`), and spawns that share `stack` take turns.
    pub fn spawn(&self, stack: &mut ChildStack) -> io::Result<u32> {
        if self.candidates.is_empty() {
            // Nothing to try: what `execvp` would say, without a clone.
            return Err(io::Error::from_raw_os_error(Errno::NOENT.raw_os_error()));
        }
        vfork::spawn(self, stack)
    }

    /// In the child: stdio, session, directory and set-up, in that order
    /// (the terminal must be stdin before it can become the controlling
    /// terminal; the set-up may give up the privileges the rest needs).
    fn enter(&self) -> Result<(), Errno> {
        let [stdin, stdout, stderr] = &self.stdio;
        rustix::stdio::dup2_stdin(stdin)?;
        rustix::stdio::dup2_stdout(stdout)?;
        rustix::stdio::dup2_stderr(stderr)?;
        match self.session {
            Session::ProcessGroup => rustix::process::setpgid(None, None)?,
            Session::Terminal => {
                rustix::process::setsid()?;
                // The terminal is new and belongs to no other session, so
                // this needs no privilege.
                rustix::process::ioctl_tiocsctty(rustix::stdio::stdin())?;
            }
        }
        if let Some(cwd) = &self.cwd {
            rustix::process::chdir(cwd.as_c_str())?;
        }
        self.setup.apply()
    }
}

/// The paths `execvp` would try for `program` with `search` as `PATH`: the
/// program itself if it names a path, else each directory's entry in
/// order (an empty directory is the working directory).
fn candidates(program: &str, search: Option<&str>) -> io::Result<Vec<CString>> {
    if program.is_empty() {
        return Err(io::Error::from_raw_os_error(Errno::NOENT.raw_os_error()));
    }
    if program.contains('/') {
        return Ok(vec![c_string(program.as_bytes().to_vec())?]);
    }
    search
        .unwrap_or(DEFAULT_SEARCH)
        .split(':')
        .map(|dir| match dir {
            "" => c_string(program.as_bytes().to_vec()),
            dir => c_string(format!("{dir}/{program}").into_bytes()),
        })
        .collect()
}

/// `candidates` without the absolute paths that do not exist. `execvp`
/// would move past them too, but each `execve` that fails costs as much as
/// a small fork under emulation (Linux 6.1 builds the new program's memory
/// before it opens the file): a `PATH` search for `true` took 5 ms more
/// than `/bin/true`. The check is the agent's (root's); a directory the
/// program's user may not search is still tried, and fails, in the child.
/// A relative candidate depends on the program's directory and is kept.
fn present(candidates: Vec<CString>) -> Vec<CString> {
    candidates
        .into_iter()
        .filter(|path| {
            !path.as_bytes().starts_with(b"/")
                || !matches!(
                    rustix::fs::access(path.as_c_str(), rustix::fs::Access::EXISTS),
                    Err(Errno::NOENT | Errno::NOTDIR)
                )
        })
        .collect()
}

fn c_string(bytes: Vec<u8>) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte"))
}

/// `fd`, or a duplicate of it at 3 or above if it is 0, 1 or 2.
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    Ok(rustix::io::fcntl_dupfd_cloexec(fd.as_fd(), 3)?)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn names(list: Vec<CString>) -> Vec<String> {
        list.into_iter().map(|c| c.into_string().unwrap()).collect()
    }

    #[test]
    fn a_path_is_tried_alone_and_a_name_in_each_directory() {
        assert_eq!(names(candidates("./x", Some("/bin")).unwrap()), ["./x"]);
        assert_eq!(
            names(candidates("sh", Some("/a::/b")).unwrap()),
            ["/a/sh", "sh", "/b/sh"]
        );
        assert_eq!(
            names(candidates("sh", None).unwrap()),
            ["/usr/local/bin/sh", "/bin/sh", "/usr/bin/sh"]
        );
        let empty = candidates("", Some("/bin")).unwrap_err();
        assert_eq!(empty.raw_os_error(), Some(Errno::NOENT.raw_os_error()));
    }

    fn null() -> OwnedFd {
        OwnedFd::from(std::fs::File::open("/dev/null").unwrap())
    }

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// Starts `argv` with `env`, its stdout on a pipe, and `change` applied
    /// to the launch; returns what it printed, or the start's error. The
    /// child is waited for by pid (the reaper's test, which reaps every
    /// child of this process, may have reaped it first: that is fine).
    fn output(
        argv: &[&str],
        env: &[(String, String)],
        change: impl FnOnce(Launch) -> Launch,
    ) -> io::Result<String> {
        use std::io::Read;
        let (mut reader, writer) = std::io::pipe().unwrap();
        let launch = change(Launch::new(
            &strings(argv),
            env,
            [null(), writer.into(), null()],
        )?);
        let mut stack = ChildStack::new().unwrap();
        let pid = launch.spawn(&mut stack);
        drop(launch);
        let pid = pid?;
        let mut out = String::new();
        reader.read_to_string(&mut out).unwrap();
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid as i32), None);
        Ok(out)
    }

    #[test]
    fn the_program_gets_its_argv_exactly_its_env_and_its_directory() {
        let vars = env(&[("PATH", "/usr/bin:/bin"), ("A", "one two")]);
        let printed = output(&["env"], &vars, |l| l).unwrap();
        assert_eq!(printed, "PATH=/usr/bin:/bin\nA=one two\n");

        let dir = tempfile::tempdir().unwrap();
        let printed = output(
            &["/bin/sh", "-c", "echo \"$0|$1\"; pwd -P", "x y"],
            &[],
            |l| l.current_dir(dir.path()).unwrap(),
        )
        .unwrap();
        let real = dir.path().canonicalize().unwrap();
        assert_eq!(printed, format!("x y|\n{}\n", real.display()));
    }

    #[test]
    fn signals_start_unblocked_and_sigpipe_at_its_default() {
        // The test harness, like the agent, ignores SIGPIPE; what else it
        // ignores stays ignored in the program, as across any exec.
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let ignored = status
            .lines()
            .find_map(|line| line.strip_prefix("SigIgn:\t"))
            .map(|hex| u64::from_str_radix(hex, 16).unwrap())
            .unwrap();
        assert_ne!(ignored & SIGPIPE_BIT, 0, "the harness ignores SIGPIPE");
        let printed = output(
            &["/bin/grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"],
            &[],
            |l| l,
        )
        .unwrap();
        assert_eq!(
            printed,
            format!(
                "SigBlk:\t0000000000000000\nSigIgn:\t{:016x}\n",
                ignored & !SIGPIPE_BIT
            )
        );
    }

    /// SIGPIPE (13) in `/proc`'s signal masks.
    const SIGPIPE_BIT: u64 = 1 << 12;

    #[test]
    fn the_search_skips_what_it_cannot_run_as_execvp_does() {
        let dir = tempfile::tempdir().unwrap();
        let unrunnable = dir.path().join("true");
        std::fs::write(&unrunnable, "").unwrap();
        let search = format!("{}:/usr/bin:/bin", dir.path().display());
        let printed = output(&["true"], &env(&[("PATH", &search)]), |l| l).unwrap();
        assert_eq!(printed, "", "found /usr/bin/true after the unrunnable one");

        let only = dir.path().display().to_string();
        let err = output(&["true"], &env(&[("PATH", &only)]), |l| l).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(Errno::ACCESS.raw_os_error()));
        let err = output(&["airlock-no-such-program"], &[], |l| l).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn a_step_that_fails_in_the_child_is_the_starts_error() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let err = output(&["/bin/true"], &[], |l| l.current_dir(&missing).unwrap()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn the_setup_runs_before_the_exec() {
        let setup = ChildSetup {
            rlimits: vec![(rustix::process::Resource::Nofile, 77)],
            privileged: true,
            ..ChildSetup::default()
        };
        let printed = output(&["/bin/sh", "-c", "ulimit -n"], &[], |l| l.setup(setup)).unwrap();
        assert_eq!(printed, "77\n");
    }

    #[test]
    fn only_paths_that_are_there_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("here"), "").unwrap();
        let search = format!("/nonexistent:{0}:{0}/here::relative", dir.path().display());
        let kept = names(present(candidates("here", Some(&search)).unwrap()));
        assert_eq!(
            kept,
            [
                format!("{}/here", dir.path().display()),
                "here".to_owned(),
                "relative/here".to_owned()
            ]
        );
    }

    #[test]
    fn nul_bytes_are_refused_before_any_clone() {
        let null = || OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
        let err =
            Launch::new(&["sh".into(), "a\0b".into()], &[], [null(), null(), null()]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }
}
