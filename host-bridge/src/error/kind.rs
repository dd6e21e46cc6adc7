//! How an [`Error`](crate::Error) is classified for a front (an RPC
//! server, a CLI) that must tell its caller in its own terms: its
//! [`Reason`] (what it is about) and the reason's [`ErrorKind`] (what kind
//! of failure that is). It imports nothing, so every module's error can
//! classify its variants where they are declared, and a front maps reasons
//! and kinds, never variants.

/// What kind of failure an [`Error`](crate::Error) is
/// ([`Error::kind`](crate::Error::kind)): the kind of its [`Reason`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Something named does not exist: a sandbox, a saved sandbox, a guest
    /// file, a program, an interpreter.
    NotFound,
    /// The caller asked for something malformed or out of bounds.
    Invalid,
    /// It exists already (a code context by that id).
    AlreadyExists,
    /// A limit was reached: the manager's maximum, the guest's resources.
    Exhausted,
    /// The sandbox is not in a state for this: ended, paused, without
    /// network, configured so that it cannot (a workspace cannot be saved),
    /// an agent too old, a workspace held elsewhere, a guest refusal.
    Precondition,
    /// Try again: the call was cut by a save or a fork, or the connection
    /// to the agent failed.
    Unavailable,
    /// The guest did not answer in time.
    Timeout,
    /// Anything else: the VMM, a boot, the host's files, a protocol
    /// violation.
    Internal,
}

/// What an [`Error`](crate::Error) is about
/// ([`Error::reason`](crate::Error::reason)), finer than its
/// [`ErrorKind`]: each reason has one kind ([`Reason::kind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// No sandbox by that id: in a manager, saved to disk, or to adopt.
    SandboxNotFound,
    /// Something else named on the host does not exist (a workspace).
    NotFound,
    /// No such file or directory in the guest, no such program, no
    /// interpreter for the language.
    GuestNotFound,
    /// A configuration or request that is malformed or out of bounds.
    Invalid,
    /// It exists already (a code context by that id).
    AlreadyExists,
    /// A manager runs as many sandboxes as it may.
    SandboxLimit,
    /// The guest is out of processes, memory or file descriptors.
    GuestExhausted,
    /// The sandbox has ended.
    SandboxEnded,
    /// The sandbox is paused, and was not (or could not be) resumed for
    /// the call.
    SandboxPaused,
    /// The sandbox has no network.
    NoNetwork,
    /// The sandbox, or this library, cannot do this as configured: saving
    /// a sandbox with a workspace, an agent too old for the call, a
    /// workspace held by another sandbox, a named template made by another
    /// kernel or agent, a sandbox not started adoptable, a manager without
    /// a pool.
    Unsupported,
    /// The guest refused the operation (permission denied, not a
    /// directory, not empty).
    GuestRefused,
    /// Nothing listens on the guest port a connection was for.
    PortClosed,
    /// The call was cut (by a save to disk, a fork, another adopter) or
    /// the connection to the agent failed; call again.
    Interrupted,
    /// The guest did not answer in time.
    Timeout,
    /// Anything else: the VMM, a boot, the host's files, a protocol
    /// violation.
    Internal,
}

impl Reason {
    /// The kind of failure this reason is.
    pub fn kind(self) -> ErrorKind {
        use ErrorKind as K;
        match self {
            Reason::SandboxNotFound | Reason::NotFound | Reason::GuestNotFound => K::NotFound,
            Reason::Invalid => K::Invalid,
            Reason::AlreadyExists => K::AlreadyExists,
            Reason::SandboxLimit | Reason::GuestExhausted => K::Exhausted,
            Reason::SandboxEnded
            | Reason::SandboxPaused
            | Reason::NoNetwork
            | Reason::Unsupported
            | Reason::GuestRefused
            | Reason::PortClosed => K::Precondition,
            Reason::Interrupted => K::Unavailable,
            Reason::Timeout => K::Timeout,
            Reason::Internal => K::Internal,
        }
    }
}
