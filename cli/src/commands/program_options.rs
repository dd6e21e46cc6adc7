//! How to run a program, declared once for `run`, `shell` and
//! `sandbox exec`: environment, working directory, user, timeout, resource
//! limits and privilege.
//!
//! [`ProgramOptions`] is the clap arguments flattened into those commands;
//! `sandbox exec` carries it to the daemon as the `ProgramOptions` message
//! (mapped in `daemon::wire`), so the client and the daemon cannot
//! disagree on them: both turn it into an [`airlock::Command`] with
//! [`ProgramOptions::apply`].

use std::time::Duration;

use airlock::{Command, Limits};

use super::parse_size;

/// Options of the program a command runs.
#[derive(Debug, Clone, Default, PartialEq, clap::Args)]
pub struct ProgramOptions {
    /// Kill the command's process tree after SECS seconds (enforced in the
    /// guest); the output so far is kept and airlock exits 124.
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<f64>,

    /// Set an environment variable in the guest; KEY alone passes the
    /// host's value. Repeatable.
    #[arg(short = 'e', long = "env", value_name = "KEY=VALUE", value_parser = parse_env)]
    pub env: Vec<(String, String)>,

    /// Working directory in the guest (default: a template's WORKDIR, else
    /// the user's home, /root for root, when it exists, else /).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<String>,

    /// Run the command as this guest user: name, uid, name:group or uid:gid.
    #[arg(short, long, value_name = "USER")]
    pub user: Option<String>,

    /// Memory limit for the command's process tree (e.g. 256M); past it
    /// the guest's OOM killer kills in the tree.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub limit_memory: Option<u64>,

    /// Most processes and threads the command's tree may have at once.
    #[arg(long, value_name = "N")]
    pub limit_pids: Option<u32>,

    /// CPU limit for the command's tree, in CPUs (e.g. 0.5).
    #[arg(long, value_name = "CPUS", value_parser = parse_cpus)]
    pub limit_cpus: Option<u32>,

    /// Run with every capability (as root: reboot, mount, load modules)
    /// and without no_new_privs.
    #[arg(long)]
    pub privileged: bool,
}

/// Options that do not make a command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProgramOptionsError {
    #[error("no program to run")]
    NoProgram,
    #[error("--timeout must be a positive number of seconds")]
    BadTimeout,
}

impl ProgramOptions {
    /// `--timeout` as a duration.
    pub fn timeout(&self) -> Result<Option<Duration>, ProgramOptionsError> {
        self.timeout
            .map(Duration::try_from_secs_f64)
            .transpose()
            .map_err(|_| ProgramOptionsError::BadTimeout)
    }

    /// `--limit-*` as limits (empty when none is given).
    pub fn limits(&self) -> Limits {
        let mut limits = Limits::new();
        if let Some(bytes) = self.limit_memory {
            limits = limits.memory_bytes(bytes);
        }
        if let Some(pids) = self.limit_pids {
            limits = limits.pids(pids);
        }
        if let Some(millis) = self.limit_cpus {
            limits = limits.cpu_millis(millis);
        }
        limits
    }

    /// `argv` (the program, then its arguments) run as the options say.
    pub fn command(&self, argv: &[String]) -> Result<Command, ProgramOptionsError> {
        let Some((program, args)) = argv.split_first() else {
            return Err(ProgramOptionsError::NoProgram);
        };
        self.apply(Command::new(program.clone()).args(args.iter().cloned()))
    }

    /// `command` with the options applied over what it sets (`--env`
    /// wins over a variable it has).
    pub fn apply(&self, command: Command) -> Result<Command, ProgramOptionsError> {
        let mut command = command.envs(self.env.iter().cloned());
        if let Some(cwd) = &self.cwd {
            command = command.cwd(cwd.clone());
        }
        if let Some(user) = &self.user {
            command = command.user(user.clone());
        }
        if let Some(timeout) = self.timeout()? {
            command = command.timeout(timeout);
        }
        let limits = self.limits();
        if !limits.is_empty() {
            command = command.limits(limits);
        }
        if self.privileged {
            command = command.privileged(true);
        }
        Ok(command)
    }
}

/// Parses `KEY=VALUE`, or `KEY` alone for the host's value of KEY.
fn parse_env(text: &str) -> Result<(String, String), String> {
    let (key, value) = match text.split_once('=') {
        Some((key, value)) => (key, value.to_owned()),
        None => match std::env::var(text) {
            Ok(value) => (text, value),
            Err(_) => return Err(format!("{text} is not set on the host; use {text}=VALUE")),
        },
    };
    if key.is_empty() {
        return Err(format!("{text:?} has no variable name; use KEY=VALUE"));
    }
    Ok((key.to_owned(), value))
}

/// CPUs as thousandths: "0.5" is 500.
fn parse_cpus(text: &str) -> Result<u32, String> {
    match text.trim().parse::<f64>() {
        Ok(cpus) if cpus > 0.0 && cpus <= 1024.0 => Ok(((cpus * 1000.0).round() as u32).max(1)),
        _ => Err(format!("{text:?} is not a CPU count; pass e.g. 0.5 or 2")),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use clap::Parser;

    use super::*;

    /// The options as clap parses `ARGS`.
    #[derive(Debug, Parser)]
    struct Parsed {
        #[command(flatten)]
        options: ProgramOptions,
    }

    fn parse(args: &[&str]) -> ProgramOptions {
        let argv = [&["airlock"], args].concat();
        Parsed::try_parse_from(argv).unwrap().options
    }

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| (*w).to_owned()).collect()
    }

    #[test]
    fn no_options_make_a_plain_command() {
        let command = parse(&[]).command(&argv(&["ls", "-l"])).unwrap();
        assert_eq!(command, Command::new("ls").arg("-l"));
    }

    #[test]
    fn every_option_reaches_the_command() {
        let options = parse(&[
            "-e",
            "A=1",
            "--env",
            "B=2",
            "--cwd",
            "/tmp",
            "--user",
            "1000",
            "--timeout",
            "2.5",
            "--limit-memory",
            "64M",
            "--limit-pids",
            "32",
            "--limit-cpus",
            "0.5",
            "--privileged",
        ]);
        let command = options.command(&argv(&["sh", "-c", "env"])).unwrap();
        let expected = Command::new("sh")
            .args(["-c", "env"])
            .env("A", "1")
            .env("B", "2")
            .cwd("/tmp")
            .user("1000")
            .timeout(Duration::from_millis(2500))
            .limits(
                Limits::new()
                    .memory_bytes(64 << 20)
                    .pids(32)
                    .cpu_millis(500),
            )
            .privileged(true);
        assert_eq!(command, expected);
    }

    #[test]
    fn env_given_wins_over_the_commands_own() {
        let options = parse(&["-e", "TERM=dumb"]);
        let command = options
            .apply(Command::new("sh").env("TERM", "xterm"))
            .unwrap();
        assert_eq!(command, Command::new("sh").env("TERM", "dumb"));
    }

    #[test]
    fn a_bad_timeout_or_no_program_is_refused() {
        let options = parse(&["--timeout=-1"]);
        assert_eq!(options.timeout(), Err(ProgramOptionsError::BadTimeout));
        let err = options.command(&argv(&["true"])).unwrap_err();
        assert_eq!(err, ProgramOptionsError::BadTimeout);
        assert_eq!(
            parse(&[]).command(&[]).unwrap_err(),
            ProgramOptionsError::NoProgram
        );
    }

    #[test]
    fn env_takes_key_value_or_the_hosts_value() {
        assert_eq!(parse_env("A=1=2"), Ok(("A".into(), "1=2".into())));
        assert_eq!(parse_env("EMPTY="), Ok(("EMPTY".into(), String::new())));
        assert!(parse_env("=x").is_err());
        assert!(parse_env("AIRLOCK_SURELY_UNSET_VARIABLE").is_err());
        let path = std::env::var("PATH").unwrap_or_default();
        assert_eq!(parse_env("PATH"), Ok(("PATH".into(), path)));
    }

    #[test]
    fn cpus_are_thousandths() {
        assert_eq!(parse_cpus("0.5"), Ok(500));
        assert_eq!(parse_cpus("2"), Ok(2000));
        assert!(parse_cpus("0").is_err());
        assert!(parse_cpus("x").is_err());
    }
}
