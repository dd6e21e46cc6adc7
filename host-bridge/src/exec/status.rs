//! How a program ended.

use std::fmt;
use std::time::Duration;

use airlock_proto::v1::{exited, Exited};

use super::limits::Usage;

use crate::error::{Error, Result};

/// How a program ended: its exit code, or the signal that killed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// It called `exit(code)`.
    Code(i32),
    /// A signal killed it.
    Signal(i32),
}

impl ExitStatus {
    /// True for exit code 0.
    pub fn success(self) -> bool {
        self == ExitStatus::Code(0)
    }

    /// The exit code, if it exited normally.
    pub fn code(self) -> Option<i32> {
        match self {
            ExitStatus::Code(code) => Some(code),
            ExitStatus::Signal(_) => None,
        }
    }

    /// The code a shell would report: the exit code, or 128 + the signal.
    pub fn shell_code(self) -> i32 {
        match self {
            ExitStatus::Code(code) => code,
            ExitStatus::Signal(signal) => 128 + signal,
        }
    }
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitStatus::Code(code) => write!(f, "exit code {code}"),
            ExitStatus::Signal(signal) => write!(f, "killed by signal {signal}"),
        }
    }
}

/// The end of a program, as the agent reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    /// Exit code or signal.
    pub status: ExitStatus,
    /// The agent killed the program's tree because its timeout passed
    /// (the status is then `Signal(9)`).
    pub timed_out: bool,
    /// The guest's OOM killer killed a process of the program's tree
    /// (reported where the agent has cgroups, as in a VM).
    pub oom_killed: bool,
    /// From start to exit.
    pub duration: Duration,
    /// What the program's tree used (where the agent has cgroups and speaks
    /// protocol revision 4).
    pub usage: Option<Usage>,
    /// Where the time went inside the guest, by the agent's clock (an
    /// agent of protocol revision 8, on the stream that started the
    /// program or re-attached to it).
    pub stamps: Option<ExecStamps>,
}

/// Where a program's time went inside the guest, by the agent's own clock:
/// with the host's view of the same exec, what is left is the channel and
/// the two gRPC stacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecStamps {
    /// From the request's arrival in the agent until the program was
    /// spawned: its cgroup and limits, pipes, fork and exec.
    pub setup: Duration,
    /// From the spawn until the agent read its first output, if it wrote
    /// any.
    pub to_first_output: Option<Duration>,
    /// From the spawn until the agent saw the exit.
    pub run: Duration,
}

impl ExecStamps {
    /// The stamps of `Started` (`received_us`, `spawned_us`) and `Exited`,
    /// if the agent sent them.
    pub(crate) fn of(received_us: u64, spawned_us: u64, exited: &Exited) -> Option<ExecStamps> {
        if received_us == 0 || spawned_us < received_us || exited.exited_us < spawned_us {
            return None;
        }
        Some(ExecStamps {
            setup: Duration::from_micros(spawned_us - received_us),
            to_first_output: (exited.first_output_us >= spawned_us)
                .then(|| Duration::from_micros(exited.first_output_us - spawned_us)),
            run: Duration::from_micros(exited.exited_us - spawned_us),
        })
    }
}

impl Exit {
    /// An exit with no extras: not timed out, not OOM-killed, no duration.
    pub fn from_status(status: ExitStatus) -> Exit {
        Exit {
            status,
            timed_out: false,
            oom_killed: false,
            duration: Duration::ZERO,
            usage: None,
            stamps: None,
        }
    }

    pub(crate) fn from_proto(exited: &Exited) -> Result<Exit> {
        let status = match exited.status {
            Some(exited::Status::Code(code)) => ExitStatus::Code(code),
            Some(exited::Status::Signal(signal)) => ExitStatus::Signal(signal),
            None => return Err(Error::Protocol("exited event without a status".into())),
        };
        Ok(Exit {
            status,
            timed_out: exited.timed_out,
            oom_killed: exited.oom_killed,
            duration: Duration::from_micros(exited.duration_us),
            usage: exited.usage.as_ref().map(Usage::from),
            stamps: None,
        })
    }
}

impl PartialEq<ExitStatus> for Exit {
    fn eq(&self, other: &ExitStatus) -> bool {
        self.status == *other
    }
}

impl fmt::Display for Exit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.status)?;
        if self.timed_out {
            f.write_str(" (timed out)")?;
        }
        if self.oom_killed {
            f.write_str(" (out of memory)")?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn shell_codes() {
        assert_eq!(ExitStatus::Code(3).shell_code(), 3);
        assert_eq!(ExitStatus::Signal(9).shell_code(), 137);
        assert!(ExitStatus::Code(0).success());
        assert!(!ExitStatus::Signal(9).success());
    }

    #[test]
    fn exits_come_from_the_protocol() {
        let exit = Exit::from_proto(&Exited {
            status: Some(exited::Status::Signal(9)),
            timed_out: true,
            oom_killed: false,
            duration_us: 1_500_000,
            usage: Some(airlock_proto::v1::Usage {
                cpu_us: 2_000,
                memory_peak_bytes: 4096,
                pids_peak: 3,
            }),
            first_output_us: 0,
            exited_us: 0,
        })
        .unwrap();
        assert_eq!(exit, ExitStatus::Signal(9));
        assert!(exit.timed_out);
        assert_eq!(exit.duration, Duration::from_millis(1500));
        assert_eq!(exit.usage.map(|u| u.cpu), Some(Duration::from_millis(2)));
        assert_eq!(exit.to_string(), "killed by signal 9 (timed out)");
        assert!(Exit::from_proto(&Exited::default()).is_err());
    }

    #[test]
    fn stamps_are_durations_on_the_agents_clock() {
        let exited = Exited {
            first_output_us: 10_300,
            exited_us: 12_000,
            ..Exited::default()
        };
        let stamps = ExecStamps::of(9_000, 10_000, &exited).unwrap();
        assert_eq!(stamps.setup, Duration::from_millis(1));
        assert_eq!(stamps.to_first_output, Some(Duration::from_micros(300)));
        assert_eq!(stamps.run, Duration::from_millis(2));
        let silent = Exited {
            exited_us: 12_000,
            ..Exited::default()
        };
        assert_eq!(
            ExecStamps::of(9_000, 10_000, &silent)
                .unwrap()
                .to_first_output,
            None
        );
        // An older agent sends none; nonsense is not reported.
        assert_eq!(ExecStamps::of(0, 0, &exited), None);
        assert_eq!(ExecStamps::of(9_000, 20_000, &exited), None);
    }
}
