//! `READY`: the check a template build waits for after `START`, before the
//! snapshot. Each check is a short program run in the guest until it
//! exits 0 or the timeout passes.

use std::time::Duration;

/// How long a check may take to pass unless the file says.
pub const DEFAULT_READY_TIMEOUT: Duration = Duration::from_secs(60);

/// What is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadyCheck {
    /// A TCP socket listens on this port (any address, IPv4 or IPv6).
    Port(u16),
    /// The file exists.
    File(String),
    /// The shell command exits 0.
    Cmd(String),
    /// The URL answers with a 2xx status.
    Url(String),
}

/// A check and how long it may take to pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ready {
    pub check: ReadyCheck,
    pub timeout: Duration,
}

impl Ready {
    pub fn port(port: u16) -> Self {
        Self::of(ReadyCheck::Port(port))
    }

    pub fn file(path: impl Into<String>) -> Self {
        Self::of(ReadyCheck::File(path.into()))
    }

    pub fn cmd(line: impl Into<String>) -> Self {
        Self::of(ReadyCheck::Cmd(line.into()))
    }

    pub fn url(url: impl Into<String>) -> Self {
        Self::of(ReadyCheck::Url(url.into()))
    }

    fn of(check: ReadyCheck) -> Self {
        Ready {
            check,
            timeout: DEFAULT_READY_TIMEOUT,
        }
    }

    /// The same check with another timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The guest program that exits 0 once the check passes (one try).
    pub fn probe_argv(&self) -> Vec<String> {
        let script = match &self.check {
            // State 0A is LISTEN in the kernel's socket tables.
            ReadyCheck::Port(port) => format!(
                "grep -Eq '^ *[0-9]+: [0-9A-F]+:{port:04X} [0-9A-F]+:[0-9A-F]+ 0A ' \
                 /proc/net/tcp /proc/net/tcp6 2>/dev/null"
            ),
            ReadyCheck::File(path) => format!("test -e {}", quote(path)),
            ReadyCheck::Cmd(line) => line.clone(),
            ReadyCheck::Url(url) => format!(
                "u={}; if command -v curl >/dev/null; then \
                   c=$(curl -s -o /dev/null -w '%{{http_code}}' --max-time 5 \"$u\"); \
                   case $c in 2??) exit 0;; esac; exit 1; \
                 else python3 -c 'import sys,urllib.request as r; \
                   sys.exit(0 if 200<=r.urlopen(sys.argv[1],timeout=5).status<300 else 1)' \"$u\"; fi",
                quote(url)
            ),
        };
        vec!["/bin/sh".into(), "-c".into(), script]
    }

    /// For progress lines.
    pub fn describe(&self) -> String {
        let what = match &self.check {
            ReadyCheck::Port(port) => format!("port {port}"),
            ReadyCheck::File(path) => format!("file {path}"),
            ReadyCheck::Cmd(line) => format!("cmd {line}"),
            ReadyCheck::Url(url) => format!("url {url}"),
        };
        format!("READY {what} (timeout {}s)", self.timeout.as_secs())
    }
}

/// `text` as one single-quoted shell word.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_are_shell_programs() {
        let port = Ready::port(8000).probe_argv();
        assert!(port[2].contains(":1F40 "), "{}", port[2]);
        let file = Ready::file("/tmp/it's ready").probe_argv();
        assert_eq!(file[2], r"test -e '/tmp/it'\''s ready'");
        assert_eq!(Ready::cmd("true").probe_argv()[2], "true");
        assert!(Ready::url("http://127.0.0.1:1/").probe_argv()[2].contains("2??"));
    }
}
