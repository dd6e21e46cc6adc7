//! [`ErrorKind`]: what kind of failure an [`Error`](crate::Error) is, in
//! terms a front (an RPC server, a CLI) tells its caller. It imports
//! nothing, so every module's error can classify itself where it is
//! declared.

/// What kind of failure an [`Error`](crate::Error) is, for a front (an RPC server, a CLI)
/// that must tell its caller in its own terms: [`Error::kind`](crate::Error::kind) classifies
/// every error once, so fronts map kinds, not variants.
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
