//! [`Command`]: a program to run in a sandbox and how to run it.

use std::collections::BTreeMap;
use std::time::Duration;

use airlock_proto::v1::{Pty, StartRequest, StdinMode};
use airlock_proto::Feature;

use super::limits::Limits;
use super::terminal::TerminalSize;

/// Where a program's standard input comes from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Stdin {
    /// `/dev/null`: the program reads end-of-file at once.
    #[default]
    Null,
    /// A pipe the host writes with `ProcessHandle::write_stdin` (or
    /// `stream_stdin`) and closes with `close_stdin`.
    Piped,
}

/// A program to run in a sandbox, built like `std::process::Command`.
///
/// ```
/// use std::time::Duration;
/// use airlock::{Command, Stdin};
///
/// let command = Command::new("python3")
///     .arg("-c")
///     .arg("print(input())")
///     .env("PYTHONUNBUFFERED", "1")
///     .cwd("/tmp")
///     .user("1000:1000")
///     .stdin(Stdin::Piped)
///     .tag("repl")
///     .timeout(Duration::from_secs(30));
/// assert_eq!(command.argv(), ["python3", "-c", "print(input())"]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    argv: Vec<String>,
    env: BTreeMap<String, String>,
    cwd: Option<String>,
    user: Option<String>,
    stdin: Stdin,
    tag: Option<String>,
    timeout: Option<Duration>,
    limits: Limits,
    privileged: bool,
    pty: Option<TerminalSize>,
    /// The host's own program: it leaves nothing in the agent (see
    /// `StartRequest.transient`).
    transient: bool,
}

impl Command {
    /// A command running `program`, looked up in the guest's `PATH` when it
    /// has no `/`.
    pub fn new(program: impl Into<String>) -> Self {
        Command {
            argv: vec![program.into()],
            env: BTreeMap::new(),
            cwd: None,
            user: None,
            stdin: Stdin::Null,
            tag: None,
            timeout: None,
            limits: Limits::default(),
            privileged: false,
            pty: None,
            transient: false,
        }
    }

    /// Makes it the host's own program, which leaves nothing in the agent:
    /// what is left of its tree is killed at its exit, and it is forgotten
    /// (no [`Sandbox::list`](crate::Sandbox::list) shows it, no attach
    /// finds it). For warm-ups the sandbox's user must not see.
    pub(crate) fn transient(mut self) -> Self {
        self.transient = true;
        self
    }

    /// Appends one argument.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.argv.push(arg.into());
        self
    }

    /// Appends arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.argv.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets an environment variable (on top of the guest's default ones).
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// Sets environment variables.
    pub fn envs<I, K, V>(mut self, vars: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        self.env
            .extend(vars.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    /// Sets the working directory in the guest (default: the sandbox's
    /// default, else the user's home, `/root` for root, when it is a
    /// directory, else `/`).
    pub fn cwd(mut self, dir: impl Into<String>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// Runs the program as `user`: `name`, `uid`, `name:group` or
    /// `uid:gid`, resolved in the guest's `/etc/passwd` and `/etc/group`
    /// (default: root).
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// Where standard input comes from (default [`Stdin::Null`]).
    pub fn stdin(mut self, stdin: Stdin) -> Self {
        self.stdin = stdin;
        self
    }

    /// Names the program so it can be found again (`Sandbox::attach`,
    /// `Sandbox::process`). Unique among running programs.
    pub fn tag(mut self, tag: impl Into<String>) -> Self {
        self.tag = Some(tag.into());
        self
    }

    /// A deadline enforced by the agent in the guest, whatever happens to
    /// the connection: when it passes, the program's whole process tree is
    /// killed and its exit says `timed_out`. Rounded up to milliseconds.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Resource limits for the program's tree; they override the
    /// sandbox's [default limits](crate::SandboxBuilder::default_limits)
    /// field by field.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Runs the program with the agent's full capabilities (as root:
    /// reboot, load modules, mount...). Without it the program runs with
    /// no_new_privs and without the capabilities that reach past the
    /// sandbox's own processes (CAP_SYS_BOOT, CAP_SYS_ADMIN, CAP_KILL,
    /// CAP_SYS_PTRACE, ...; see docs/protocol.md).
    pub fn privileged(mut self, privileged: bool) -> Self {
        self.privileged = privileged;
        self
    }

    /// Runs the program on a new pseudo-terminal of `size` instead of
    /// pipes, as an interactive program expects: it leads a new session
    /// with the terminal as its controlling terminal and as its stdin,
    /// stdout and stderr. All its output arrives as [`Event::Stdout`]
    /// (with the terminal's `\r\n` line endings); input written with
    /// `write_stdin` is typed at the terminal, so `b"\x03"` (^C) interrupts
    /// the foreground job. The [`stdin`](Command::stdin) setting is ignored
    /// (a terminal's input is always open; `close_stdin` fails, send
    /// `b"\x04"` (^D) instead). `TERM` is `xterm-256color` unless set with
    /// [`env`](Command::env). Resize it with [`ProcessHandle::resize`].
    /// Needs protocol revision 5.
    ///
    /// [`Event::Stdout`]: super::Event::Stdout
    /// [`ProcessHandle::resize`]: super::ProcessHandle::resize
    pub fn pty(mut self, size: TerminalSize) -> Self {
        self.pty = Some(size);
        self
    }

    /// The command with a sandbox's defaults filled in where it sets none.
    pub(crate) fn with_defaults(
        &self,
        limits: &Limits,
        user: Option<&str>,
        cwd: Option<&str>,
        env: &[(String, String)],
    ) -> Command {
        let mut command = self.clone();
        for (key, value) in env {
            command
                .env
                .entry(key.clone())
                .or_insert_with(|| value.clone());
        }
        command.limits = command.limits.or(limits);
        if command.user.is_none() {
            command.user = user.map(str::to_owned);
        }
        if command.cwd.is_none() {
            command.cwd = cwd.map(str::to_owned);
        }
        command
    }

    /// The program and its arguments.
    pub fn argv(&self) -> &[String] {
        &self.argv
    }

    /// The newest protocol feature the agent needs to honour every option
    /// set, if any.
    pub(crate) fn required_feature(&self) -> Option<Feature> {
        if self.transient {
            return Some(Feature::Transient);
        }
        if self.pty.is_some() {
            return Some(Feature::Pty);
        }
        if !self.limits.is_empty() || self.privileged {
            return Some(Feature::Limits);
        }
        let extended = self.user.is_some()
            || self.stdin != Stdin::Null
            || self.tag.is_some()
            || self.timeout.is_some();
        extended.then_some(Feature::ExtendedStart)
    }

    pub(crate) fn to_request(&self) -> StartRequest {
        let timeout_ms = self.timeout.map_or(0, |t| {
            let ms = t.as_nanos().div_ceil(1_000_000);
            u64::try_from(ms).unwrap_or(u64::MAX).max(1)
        });
        StartRequest {
            argv: self.argv.clone(),
            env: self.env.clone().into_iter().collect(),
            cwd: self.cwd.clone().unwrap_or_default(),
            user: self.user.clone().unwrap_or_default(),
            stdin: match self.stdin {
                Stdin::Null => StdinMode::Closed,
                Stdin::Piped => StdinMode::Pipe,
            } as i32,
            tag: self.tag.clone().unwrap_or_default(),
            timeout_ms,
            limits: self.limits.to_proto(),
            privileged: self.privileged,
            pty: self.pty.map(|size| Pty {
                rows: size.rows.into(),
                cols: size.cols.into(),
                term: String::new(),
            }),
            transient: self.transient,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_builds_the_request() {
        let request = Command::new("python3")
            .arg("-c")
            .args(["print(1)"])
            .env("A", "1")
            .envs([("B", "2")])
            .cwd("/tmp")
            .to_request();
        assert_eq!(request.argv, ["python3", "-c", "print(1)"]);
        assert_eq!(request.env.get("A").map(String::as_str), Some("1"));
        assert_eq!(request.env.get("B").map(String::as_str), Some("2"));
        assert_eq!(request.cwd, "/tmp");
        assert_eq!(request.stdin, StdinMode::Closed as i32);
        assert_eq!(request.timeout_ms, 0);
        assert_eq!(request.pty, None);
    }

    #[test]
    fn the_sandbox_defaults_fill_only_what_the_command_leaves_unset() {
        let env = [("LANG".to_owned(), "C.UTF-8".to_owned())];
        let defaults = |command: Command| {
            command
                .with_defaults(&Limits::default(), Some("app"), Some("/srv/app"), &env)
                .to_request()
        };
        let plain = defaults(Command::new("pwd"));
        assert_eq!(plain.cwd, "/srv/app");
        assert_eq!(plain.user, "app");
        assert_eq!(plain.env.get("LANG").map(String::as_str), Some("C.UTF-8"));
        let own = defaults(
            Command::new("pwd")
                .cwd("/tmp")
                .user("root")
                .env("LANG", "C"),
        );
        assert_eq!(own.cwd, "/tmp");
        assert_eq!(own.user, "root");
        assert_eq!(own.env.get("LANG").map(String::as_str), Some("C"));
    }

    #[test]
    fn a_pty_reaches_the_request_and_needs_the_pty_feature() {
        let command = Command::new("sh").pty(TerminalSize::new(50, 132));
        assert_eq!(command.required_feature(), Some(Feature::Pty));
        let pty = command.to_request().pty.expect("pty set");
        assert_eq!((pty.rows, pty.cols), (50, 132));
        assert_eq!(pty.term, "", "TERM left to the agent's default");
    }

    #[test]
    fn extended_options_reach_the_request_and_need_the_extended_start_feature() {
        let plain = Command::new("true");
        assert_eq!(plain.required_feature(), None);
        let command = plain
            .user("1000:1000")
            .stdin(Stdin::Piped)
            .tag("job")
            .timeout(Duration::from_micros(1500));
        assert_eq!(command.required_feature(), Some(Feature::ExtendedStart));
        let request = command.to_request();
        assert_eq!(request.user, "1000:1000");
        assert_eq!(request.stdin, StdinMode::Pipe as i32);
        assert_eq!(request.tag, "job");
        assert_eq!(request.timeout_ms, 2, "rounded up");
        assert_eq!(
            Command::new("x")
                .timeout(Duration::ZERO)
                .to_request()
                .timeout_ms,
            1,
            "a zero timeout is the shortest, not none"
        );
    }
}
