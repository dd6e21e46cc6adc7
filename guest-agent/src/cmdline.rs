//! The kernel command line (`/proc/cmdline`) keys the agent understands.
//!
//! The host bridge passes agent settings as `airlock.*` parameters (named in
//! `airlock_proto::contract::cmdline`); the kernel
//! ignores them (dotted names are treated as unused module parameters) and
//! leaves them in `/proc/cmdline`, where [`Cmdline::parse`] reads them:
//!
//! | key                 | meaning                              | default   |
//! |---------------------|--------------------------------------|-----------|
//! | `airlock.channel=`  | `serial` or `vsock`: where the agent serves | `vsock` |
//! | `airlock.port=N`    | vsock port the gRPC server listens on | 1024      |
//! | `airlock.hostname=` | the guest's hostname                 | `airlock` |
//! | `airlock.log=`      | tracing env-filter for agent logs    | `info`    |
//! | `airlock.root=DEV`  | root image disk (ext4) to switch to  | none: stay in the initramfs |
//! | `airlock.workspace=DEV` | ext4 disk for the overlay's writable layer | none: tmpfs |
//!
//! Values may be double-quoted (`airlock.log="info,airlock_agent=debug"`), as
//! the kernel allows. Words after a lone `--` belong to init's argv and are
//! not parameters. Unknown keys are ignored; a later key overrides an earlier.

use std::path::{Path, PathBuf};

use airlock_proto::contract::cmdline as keys;
use airlock_proto::contract::Channel;

/// The hostname used when the command line names none.
pub const DEFAULT_HOSTNAME: &str = "airlock";

/// The log filter used when the command line names none.
pub const DEFAULT_LOG_FILTER: &str = "info";

/// The longest hostname Linux accepts (`HOST_NAME_MAX`).
const HOSTNAME_MAX: usize = 64;

/// A command line the agent cannot honour.
#[derive(Debug, thiserror::Error)]
pub enum CmdlineError {
    /// `airlock.channel` is neither `serial` nor `vsock`.
    #[error("airlock.channel={0:?} is not a channel; pass airlock.channel=serial or vsock")]
    BadChannel(String),
    /// `airlock.port` is not a number in `1..=u32::MAX`.
    #[error("airlock.port={0:?} is not a vsock port number; pass e.g. airlock.port=1024")]
    BadPort(String),
    /// `airlock.hostname` is empty, too long or contains a `/`.
    #[error("airlock.hostname={0:?} is not a valid hostname (1-64 bytes, no '/')")]
    BadHostname(String),
    /// `airlock.root` or `airlock.workspace` is not a device path.
    #[error("{key}={value:?} is not a device; pass e.g. {key}=/dev/vda")]
    BadDevice {
        /// The key.
        key: &'static str,
        /// The value given.
        value: String,
    },
    /// A workspace without a root image has nothing to be the upper layer of.
    #[error("airlock.workspace needs airlock.root")]
    WorkspaceWithoutRoot,
    /// `/proc/cmdline` could not be read.
    #[error("cannot read {path}")]
    Read {
        /// The file that was read.
        path: String,
        /// Why reading failed.
        #[source]
        source: std::io::Error,
    },
}

/// The agent's settings from the kernel command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cmdline {
    /// The channel to serve on.
    pub channel: Channel,
    /// The vsock port to listen on.
    pub port: u32,
    /// The hostname to set.
    pub hostname: String,
    /// The tracing env-filter directive.
    pub log: String,
    /// The root image's disk, if the agent is to switch into it.
    pub root: Option<PathBuf>,
    /// The workspace disk: the overlay's writable layer instead of a tmpfs.
    pub workspace: Option<PathBuf>,
}

impl Default for Cmdline {
    fn default() -> Self {
        Self {
            channel: Channel::Vsock,
            port: airlock_proto::DEFAULT_AGENT_PORT,
            hostname: DEFAULT_HOSTNAME.to_owned(),
            log: DEFAULT_LOG_FILTER.to_owned(),
            root: None,
            workspace: None,
        }
    }
}

impl Cmdline {
    /// Reads and parses a command line file; a missing file means defaults
    /// (e.g. a test run outside a VM with no `/proc`).
    pub fn read(path: &Path) -> Result<Self, CmdlineError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse(&text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(source) => Err(CmdlineError::Read {
                path: path.display().to_string(),
                source,
            }),
        }
    }

    /// Parses the text of a kernel command line.
    pub fn parse(text: &str) -> Result<Self, CmdlineError> {
        let mut cmdline = Self::default();
        for word in words(text) {
            if word == "--" {
                break;
            }
            let Some((key, value)) = word.split_once('=') else {
                continue;
            };
            let value = unquote(value);
            match key {
                keys::CHANNEL => {
                    cmdline.channel = Channel::parse(value)
                        .ok_or_else(|| CmdlineError::BadChannel(value.to_owned()))?;
                }
                keys::PORT => cmdline.port = parse_port(value)?,
                keys::HOSTNAME => cmdline.hostname = parse_hostname(value)?,
                keys::LOG => cmdline.log = value.to_owned(),
                keys::ROOT => cmdline.root = Some(parse_device(keys::ROOT, value)?),
                keys::WORKSPACE => {
                    cmdline.workspace = Some(parse_device(keys::WORKSPACE, value)?);
                }
                _ => {}
            }
        }
        if cmdline.workspace.is_some() && cmdline.root.is_none() {
            return Err(CmdlineError::WorkspaceWithoutRoot);
        }
        Ok(cmdline)
    }
}

/// Splits a command line on whitespace, keeping double-quoted runs together.
fn words(text: &str) -> Vec<&str> {
    let mut words = Vec::new();
    let mut start = None;
    let mut quoted = false;
    for (i, c) in text.char_indices() {
        if c == '"' {
            quoted = !quoted;
        }
        if c.is_whitespace() && !quoted {
            if let Some(s) = start.take() {
                words.push(&text[s..i]);
            }
        } else if start.is_none() {
            start = Some(i);
        }
    }
    if let Some(s) = start {
        words.push(&text[s..]);
    }
    words
}

/// Removes one pair of surrounding double quotes, as the kernel does.
fn unquote(value: &str) -> &str {
    value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(value)
}

fn parse_port(value: &str) -> Result<u32, CmdlineError> {
    match value.parse::<u32>() {
        Ok(port) if port != 0 => Ok(port),
        _ => Err(CmdlineError::BadPort(value.to_owned())),
    }
}

/// A device path: absolute, under `/dev/`, no `..`.
fn parse_device(key: &'static str, value: &str) -> Result<PathBuf, CmdlineError> {
    let path = Path::new(value);
    let plain = path
        .components()
        .all(|c| !matches!(c, std::path::Component::ParentDir));
    if value.len() > "/dev/".len() && value.starts_with("/dev/") && plain {
        Ok(path.to_owned())
    } else {
        Err(CmdlineError::BadDevice {
            key,
            value: value.to_owned(),
        })
    }
}

fn parse_hostname(value: &str) -> Result<String, CmdlineError> {
    if !is_valid_hostname(value) {
        return Err(CmdlineError::BadHostname(value.to_owned()));
    }
    Ok(value.to_owned())
}

/// Whether Linux takes `value` as a hostname: 1-64 bytes, no `/`.
pub fn is_valid_hostname(value: &str) -> bool {
    !value.is_empty() && value.len() <= HOSTNAME_MAX && !value.contains('/')
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn empty_line_gives_defaults() {
        let c = Cmdline::parse("").unwrap();
        assert_eq!(c, Cmdline::default());
        assert_eq!(c.channel, Channel::Vsock);
        assert_eq!(c.port, 1024);
        assert_eq!(c.hostname, "airlock");
        assert_eq!(c.log, "info");
    }

    #[test]
    fn reads_airlock_keys_among_others() {
        let c = Cmdline::parse(
            "console=ttyS0 quiet airlock.port=5000 panic=-1 airlock.hostname=box1 \
             airlock.log=debug rdinit=/init\n",
        )
        .unwrap();
        assert_eq!(c.port, 5000);
        assert_eq!(c.hostname, "box1");
        assert_eq!(c.log, "debug");
    }

    #[test]
    fn quoted_values_keep_spaces_and_lose_quotes() {
        let c =
            Cmdline::parse(r#"airlock.log="info, airlock_agent=trace" airlock.port=7"#).unwrap();
        assert_eq!(c.log, "info, airlock_agent=trace");
        assert_eq!(c.port, 7);
    }

    #[test]
    fn later_key_wins() {
        let c = Cmdline::parse("airlock.port=1 airlock.port=2").unwrap();
        assert_eq!(c.port, 2);
    }

    #[test]
    fn words_after_double_dash_are_not_parameters() {
        let c = Cmdline::parse("airlock.port=9 -- airlock.port=10").unwrap();
        assert_eq!(c.port, 9);
    }

    #[test]
    fn similar_keys_are_ignored() {
        let c = Cmdline::parse("xairlock.port=9 airlock.portx=10 airlock.port").unwrap();
        assert_eq!(c.port, 1024);
    }

    #[test]
    fn bad_port_is_an_error_naming_the_value() {
        for bad in [
            "airlock.port=abc",
            "airlock.port=",
            "airlock.port=0",
            "airlock.port=-1",
        ] {
            let err = Cmdline::parse(bad).unwrap_err();
            assert!(matches!(err, CmdlineError::BadPort(_)), "{bad}: {err}");
        }
        let err = Cmdline::parse("airlock.port=99999999999").unwrap_err();
        assert!(err.to_string().contains("99999999999"));
    }

    #[test]
    fn channel_is_serial_or_vsock() {
        let c = Cmdline::parse("airlock.channel=serial airlock.port=9").unwrap();
        assert_eq!(c.channel, Channel::Serial);
        let c = Cmdline::parse("airlock.channel=vsock").unwrap();
        assert_eq!(c.channel, Channel::Vsock);
        for bad in [
            "airlock.channel=",
            "airlock.channel=tcp",
            "airlock.channel=Serial",
        ] {
            let err = Cmdline::parse(bad).unwrap_err();
            assert!(matches!(err, CmdlineError::BadChannel(_)), "{bad}: {err}");
        }
    }

    #[test]
    fn bad_hostname_is_an_error() {
        let long = format!("airlock.hostname={}", "a".repeat(65));
        for bad in ["airlock.hostname=", "airlock.hostname=a/b", long.as_str()] {
            assert!(matches!(
                Cmdline::parse(bad),
                Err(CmdlineError::BadHostname(_))
            ));
        }
    }

    #[test]
    fn root_and_workspace_devices() {
        let c = Cmdline::parse("airlock.root=/dev/vda airlock.workspace=/dev/vdb").unwrap();
        assert_eq!(c.root.as_deref(), Some(Path::new("/dev/vda")));
        assert_eq!(c.workspace.as_deref(), Some(Path::new("/dev/vdb")));
        assert_eq!(Cmdline::parse("").unwrap().root, None);
        for bad in [
            "airlock.root=vda",
            "airlock.root=/dev/",
            "airlock.root=/dev/../etc/x",
            "airlock.root=/etc/passwd",
        ] {
            assert!(
                matches!(Cmdline::parse(bad), Err(CmdlineError::BadDevice { .. })),
                "{bad}"
            );
        }
        assert!(matches!(
            Cmdline::parse("airlock.workspace=/dev/vdb"),
            Err(CmdlineError::WorkspaceWithoutRoot)
        ));
    }

    #[test]
    fn missing_file_means_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let c = Cmdline::read(&dir.path().join("cmdline")).unwrap();
        assert_eq!(c, Cmdline::default());
    }

    #[test]
    fn file_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cmdline");
        std::fs::write(&path, "airlock.hostname=vm7\n").unwrap();
        assert_eq!(Cmdline::read(&path).unwrap().hostname, "vm7");
    }
}
