//! Signal numbers, as the guest (Linux) numbers them.

use std::fmt;

/// A signal to send to a program in the guest. Any Linux signal number is
/// accepted; the constants name the common ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Signal(i32);

impl Signal {
    /// Hang-up (1).
    pub const HUP: Signal = Signal(1);
    /// Interrupt, as Ctrl-C sends (2).
    pub const INT: Signal = Signal(2);
    /// Quit (3).
    pub const QUIT: Signal = Signal(3);
    /// Kill, which cannot be caught (9).
    pub const KILL: Signal = Signal(9);
    /// User-defined 1 (10).
    pub const USR1: Signal = Signal(10);
    /// User-defined 2 (12).
    pub const USR2: Signal = Signal(12);
    /// Terminate (15).
    pub const TERM: Signal = Signal(15);
    /// Continue a stopped process (18).
    pub const CONT: Signal = Signal(18);
    /// Stop, which cannot be caught (19).
    pub const STOP: Signal = Signal(19);

    /// A signal by number; the agent refuses numbers that are not signals.
    pub const fn from_raw(number: i32) -> Signal {
        Signal(number)
    }

    /// The signal's number.
    pub const fn number(self) -> i32 {
        self.0
    }

    fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            1 => "SIGHUP",
            2 => "SIGINT",
            3 => "SIGQUIT",
            9 => "SIGKILL",
            10 => "SIGUSR1",
            12 => "SIGUSR2",
            15 => "SIGTERM",
            18 => "SIGCONT",
            19 => "SIGSTOP",
            _ => return None,
        })
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "signal {}", self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers() {
        assert_eq!(Signal::TERM.number(), 15);
        assert_eq!(Signal::INT.to_string(), "SIGINT");
        assert_eq!(Signal::from_raw(34).to_string(), "signal 34");
    }
}
