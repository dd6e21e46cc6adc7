//! The host's terminal for `airlock shell`: raw mode while the guest's
//! terminal is in charge, restored whatever happens, and the window size.

use std::io::IsTerminal;
use std::os::fd::AsFd;

use airlock::TerminalSize;
use rustix::termios::{tcgetattr, tcgetwinsize, tcsetattr, OptionalActions, Termios};

/// The host terminal could not be switched to raw mode.
#[derive(Debug, thiserror::Error)]
#[error("cannot put the terminal in raw mode")]
pub struct RawModeError(#[source] std::io::Error);

/// Raw mode on stdin (a terminal) until dropped: keys reach the guest as
/// typed (^C, ^Z and ^D included, no local echo or line editing) and the
/// guest's output reaches the screen as sent. Dropping it restores the
/// settings from before, on every path out (return, error, panic unwind).
#[derive(Debug)]
pub struct RawMode {
    saved: Termios,
}

impl RawMode {
    /// Saves the terminal's settings and switches it to raw mode.
    pub fn enter() -> Result<RawMode, RawModeError> {
        let stdin = std::io::stdin();
        let saved = tcgetattr(stdin.as_fd()).map_err(|e| RawModeError(e.into()))?;
        let mut raw = saved.clone();
        raw.make_raw();
        tcsetattr(stdin.as_fd(), OptionalActions::Now, &raw).map_err(|e| RawModeError(e.into()))?;
        Ok(RawMode { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let stdin = std::io::stdin();
        if let Err(error) = tcsetattr(stdin.as_fd(), OptionalActions::Now, &self.saved) {
            tracing::warn!(%error, "cannot restore the terminal; run `stty sane`");
        }
    }
}

/// Whether stdin is a terminal (an interactive session).
pub fn is_interactive() -> bool {
    std::io::stdin().is_terminal()
}

/// The window size of the terminal on stdin, else stdout; the default
/// (24x80) when neither is a terminal or it reports 0.
pub fn window_size() -> TerminalSize {
    let from = |fd: std::os::fd::BorrowedFd<'_>| {
        tcgetwinsize(fd)
            .ok()
            .filter(|w| w.ws_row > 0 && w.ws_col > 0)
    };
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    from(stdin.as_fd())
        .or_else(|| from(stdout.as_fd()))
        .map_or_else(TerminalSize::default, |w| {
            TerminalSize::new(w.ws_row, w.ws_col)
        })
}
