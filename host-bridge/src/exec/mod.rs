//! Running programs in a sandbox.
//!
//! - [`command`]: [`Command`], what to run and how (argv, env, cwd, user,
//!   stdin or a terminal, tag, deadline), built like `std::process::Command`.
//! - [`execution`]: [`Execution`], one client's view of a running program:
//!   its events ([`Event`]), or everything collected into an [`Output`].
//! - [`process`]: [`ProcessHandle`], the controls of a program in the guest
//!   (stdin, signals, terminal size) by pid or tag ([`Target`]), and
//!   [`ProcessInfo`] for `Sandbox::list`.
//! - [`status`]: how a program ended ([`ExitStatus`], [`Exit`]).
//! - [`signal`]: [`Signal`] numbers.
//! - [`terminal`]: [`TerminalSize`], for programs on a pseudo-terminal.
//!
//! A program outlives its `Execution`: dropping one merely detaches, and
//! `Sandbox::attach` reconnects, replaying the output the agent still
//! holds.

pub mod command;
pub mod execution;
pub mod limits;
pub mod process;
pub mod signal;
pub mod status;
pub mod terminal;

pub use command::{Command, Stdin};
pub use execution::{Event, Execution, Output};
pub use limits::{Limits, Usage};
pub use process::{ProcessHandle, ProcessInfo, ProcessState, Target};
pub use signal::Signal;
pub use status::{ExecStamps, Exit, ExitStatus};
pub use terminal::TerminalSize;
