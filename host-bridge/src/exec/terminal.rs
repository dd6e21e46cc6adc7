//! [`TerminalSize`]: the window size of a program's pseudo-terminal (see
//! `Command::pty` and `ProcessHandle::resize`).

/// A terminal's window size in character cells.
///
/// ```
/// use airlock::TerminalSize;
///
/// let size = TerminalSize::new(50, 132);
/// assert_eq!((size.rows, size.cols), (50, 132));
/// assert_eq!(TerminalSize::default(), TerminalSize::new(24, 80));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TerminalSize {
    /// Rows (lines).
    pub rows: u16,
    /// Columns.
    pub cols: u16,
}

impl TerminalSize {
    /// `rows` by `cols` cells; a 0 is taken as the default (24 rows, 80
    /// columns) by the agent.
    pub fn new(rows: u16, cols: u16) -> Self {
        TerminalSize { rows, cols }
    }
}

impl Default for TerminalSize {
    /// 24 rows by 80 columns, a VT100's screen.
    fn default() -> Self {
        TerminalSize { rows: 24, cols: 80 }
    }
}
