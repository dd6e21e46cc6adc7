//! What can go wrong starting or following a program.
//!
//! Codes are assigned in `crate::error`, the one place errors become
//! statuses; messages here name the offending value so a user can fix it.

/// A program could not be started or followed to its end.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// `argv` was empty.
    #[error("argv is empty; name a program to run")]
    EmptyArgv,
    /// A string the kernel needs as a C string contains NUL.
    #[error("{field} contains a NUL byte")]
    Nul {
        /// Which field, e.g. `argv[1]` or `env key FOO`.
        field: String,
    },
    /// An environment variable name is empty or contains `=`.
    #[error("invalid environment variable name {0:?}; names must be non-empty and contain no '='")]
    BadEnvName(String),
    /// `cwd` is relative.
    #[error("working directory must be an absolute path: {0}")]
    RelativeCwd(String),
    /// `cwd` does not exist.
    #[error("working directory not found: {0}")]
    CwdNotFound(String),
    /// `cwd` exists but is not a directory.
    #[error("working directory is not a directory: {0}")]
    CwdNotDirectory(String),
    /// `cwd` cannot be examined (e.g. a path component is a file).
    #[error("working directory unusable: {path}")]
    CwdUnusable {
        /// The requested directory.
        path: String,
        /// Why it cannot be used.
        #[source]
        source: std::io::Error,
    },
    /// `cwd` exists but the agent may not enter it.
    #[error("working directory not accessible: {0}")]
    CwdNoAccess(String),
    /// No such program (or not found in `PATH`).
    #[error("program not found: {0}")]
    ProgramNotFound(String),
    /// The program exists, but the interpreter or dynamic loader it needs
    /// does not.
    #[error("program found but its interpreter (#! line or ELF loader) is missing: {0}")]
    InterpreterMissing(String),
    /// The program is not executable by the agent.
    #[error("permission denied running {0}; is it executable?")]
    ProgramNoAccess(String),
    /// The kernel does not recognise the file as an executable.
    #[error("{0} is not an executable this guest can run")]
    NotExecutable(String),
    /// argv plus environment exceed the kernel's limit.
    #[error("argument list and environment too long")]
    ArgsTooLong,
    /// The guest is out of processes, memory or file descriptors.
    #[error("out of resources starting {program}")]
    Exhausted {
        /// The program, as `argv[0]` named it.
        program: String,
        /// The errno behind it.
        #[source]
        source: std::io::Error,
    },
    /// Any other spawn failure.
    #[error("cannot start {program}")]
    Spawn {
        /// The program, as `argv[0]` named it.
        program: String,
        /// Why spawning failed.
        #[source]
        source: std::io::Error,
    },
    /// `/dev/null` could not be opened for the program's stdin.
    #[error("cannot open /dev/null for stdin")]
    DevNull(#[source] std::io::Error),
    /// The program's output pipes could not be watched.
    #[error("cannot watch the output of pid {pid}")]
    Pipe {
        /// The program's pid.
        pid: u32,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The reaper stopped before reporting the program's exit.
    #[error("lost track of pid {pid}; its exit status is unknown")]
    Lost {
        /// The program's pid.
        pid: u32,
    },
    /// `user` is not a name, a number or `user:group`.
    #[error("invalid user {0:?}; use name, uid, name:group or uid:gid")]
    BadUser(String),
    /// `user` names no entry of /etc/passwd.
    #[error("user not found in the guest's /etc/passwd: {0}")]
    UserNotFound(String),
    /// The group part of `user` names no entry of /etc/group.
    #[error("group not found in the guest's /etc/group: {0}")]
    GroupNotFound(String),
    /// The agent is not root, so it cannot run programs as someone else.
    #[error("the agent runs unprivileged and cannot switch to user {0}")]
    UserSwitchDenied(String),
    /// Memory, pids or CPU limits were asked for where the agent has no
    /// cgroups.
    #[error("cgroup limits were requested but the agent has no cgroups here")]
    LimitsUnavailable,
    /// The program's cgroup would not take a limit.
    #[error("cannot apply limits")]
    Limits(#[source] std::io::Error),
    /// The tag is unusable.
    #[error("invalid tag {0:?}; use 1 to 128 printable characters")]
    BadTag(String),
    /// Another running program has the tag.
    #[error("tag {0:?} is in use by a running process")]
    TagInUse(String),
    /// A request names no process.
    #[error("no process named; give a pid or a tag")]
    NoSelector,
    /// The table has no such process (it never ran here, or it finished
    /// long enough ago to be forgotten).
    #[error("no such process: {0}")]
    NoSuchProcess(String),
    /// Input for a program started without a stdin pipe.
    #[error("stdin of pid {0} is not a pipe; start it with stdin mode PIPE")]
    StdinNotPiped(u32),
    /// Input after CloseStdin.
    #[error("stdin of pid {0} is closed")]
    StdinClosed(u32),
    /// The program (and whatever inherited its stdin) stopped reading.
    #[error("pid {0} no longer reads its stdin")]
    StdinGone(u32),
    /// Writing to the stdin pipe failed otherwise.
    #[error("cannot write to the stdin of pid {pid}")]
    StdinWrite {
        /// The program's pid.
        pid: u32,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The program has exited (and, for signals, nothing of its tree is
    /// left).
    #[error("pid {0} has exited")]
    Exited(u32),
    /// Not a signal number.
    #[error("invalid signal number {0}")]
    BadSignal(i32),
    /// `kill(2)` failed.
    #[error("cannot signal pid {pid}")]
    Signal {
        /// The program's pid.
        pid: u32,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Another client attached to the program's output.
    #[error("another client attached to pid {0}")]
    Displaced(u32),
    /// A window size does not fit a terminal.
    #[error("invalid window size {rows}x{cols}; rows and columns must be at most 65535")]
    BadWindowSize {
        /// The requested rows.
        rows: u32,
        /// The requested columns.
        cols: u32,
    },
    /// A pseudo-terminal could not be allocated.
    #[error("cannot open a pseudo-terminal for {program}")]
    Pty {
        /// The program, as `argv[0]` named it.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Resize for a program started without `pty`.
    #[error("pid {0} has no terminal; start it with a pty")]
    NotATerminal(u32),
    /// CloseStdin for a program on a terminal.
    #[error("stdin of pid {0} is a terminal and stays open; send ^D (0x04) for end-of-file")]
    InputIsTerminal(u32),
    /// Setting the window size failed.
    #[error("cannot resize the terminal of pid {pid}")]
    Resize {
        /// The program's pid.
        pid: u32,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}
