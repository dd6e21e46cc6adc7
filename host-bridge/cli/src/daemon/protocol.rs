//! The wire protocol between `airlock sandbox ...` clients and the daemon.
//!
//! A connection carries one request. Every message is a frame: a 4-byte
//! big-endian length, then that many bytes of JSON (at most
//! [`MAX_FRAME_BYTES`]; a bigger length is refused before anything is
//! read). Binary data (program output, stdin) travels base64-encoded in
//! chunks of at most [`DATA_CHUNK`] bytes.
//!
//! The client sends a [`Request`]; the daemon answers with one
//! [`Response`], except for [`Request::Exec`]: then the daemon sends
//! `Started`, output frames and finally `Exited` (or `Error`), while the
//! client may send [`Input`] frames (stdin, its end, signals). A client
//! that disconnects during an exec takes its program with it.

use std::path::PathBuf;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::DaemonError;
use crate::commands::ProgramOptions;
use airlock::{Exit, ExitStatus};

/// The largest frame either side sends or accepts.
pub const MAX_FRAME_BYTES: usize = 4 << 20;

/// The most bytes of binary data in one frame (well under the frame cap
/// once base64-encoded).
pub const DATA_CHUNK: usize = 64 * 1024;

/// What a client asks for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "request", rename_all = "snake_case")]
pub enum Request {
    /// Is a daemon there? Answered with [`Response::Pong`].
    Ping,
    /// Start a sandbox; answered with [`Response::Created`].
    Create(CreateRequest),
    /// Answered with [`Response::Sandboxes`].
    List,
    /// Run a program; see the module docs for the exchange.
    Exec(ExecRequest),
    /// Copy the host file or directory `host` to `guest`. The daemon runs
    /// as the same user (the socket is private), and opens `host` itself.
    CopyIn {
        id: String,
        host: PathBuf,
        guest: PathBuf,
    },
    /// Copy the guest file or directory `guest` to the host path `host`.
    CopyOut {
        id: String,
        guest: PathBuf,
        host: PathBuf,
    },
    Pause {
        id: String,
    },
    Resume {
        id: String,
    },
    Kill {
        id: String,
    },
}

/// How to start a sandbox. Paths are absolute (the client resolves them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreateRequest {
    /// The root image file; `None` boots the initramfs's busybox.
    pub image: Option<PathBuf>,
    /// A workspace disk, created on first use.
    pub workspace: Option<PathBuf>,
    pub memory_mib: u32,
    pub vcpus: u32,
    /// `None`: the library's default ceiling.
    pub max_lifetime_secs: Option<u64>,
    /// Seconds without a call, and what to do then.
    pub idle: Option<(u64, IdleAction)>,
}

/// What an idle sandbox does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdleAction {
    Pause,
    Stop,
}

/// A program to run in a sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecRequest {
    pub id: String,
    /// The program and its arguments (at least the program).
    pub argv: Vec<String>,
    /// How to run it, as `sandbox exec` parsed it: `env`, `cwd`, `user`,
    /// `timeout_secs` (enforced by the agent; the exit then has
    /// `timed_out`), `limit_memory_bytes`, `limit_pids`,
    /// `limit_cpu_millis`, `privileged`, inline in the request.
    #[serde(flatten)]
    pub options: ProgramOptions,
    /// The client will send [`Input::Stdin`] frames and [`Input::StdinEnd`].
    pub stdin: bool,
}

/// What a client sends while its program runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "input", rename_all = "snake_case")]
pub enum Input {
    Stdin {
        #[serde(with = "base64_bytes")]
        data: Vec<u8>,
    },
    StdinEnd,
    /// Send this signal number to the program's process tree.
    Signal {
        signal: i32,
    },
}

/// What the daemon answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "response", rename_all = "snake_case")]
pub enum Response {
    /// Done (pause, resume, kill, copies).
    Ok,
    Pong {
        /// The daemon's process id.
        pid: u32,
    },
    Created {
        id: String,
    },
    Sandboxes {
        sandboxes: Vec<SandboxEntry>,
    },
    /// The program started in the guest.
    Started {
        pid: u32,
    },
    Stdout {
        #[serde(with = "base64_bytes")]
        data: Vec<u8>,
    },
    Stderr {
        #[serde(with = "base64_bytes")]
        data: Vec<u8>,
    },
    /// The agent lost this many bytes of output.
    Dropped {
        bytes: u64,
    },
    /// The program ended.
    Exited(ExitReport),
    /// The request failed; the message is for the user.
    Error {
        message: String,
    },
}

/// How a program ended, as [`Response::Exited`] carries it: `code`, or
/// `signal` when a signal killed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitReport {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub oom_killed: bool,
    pub duration_ms: u64,
}

impl ExitReport {
    /// The report of `exit`.
    pub fn new(exit: &Exit) -> ExitReport {
        let (code, signal) = match exit.status {
            ExitStatus::Code(code) => (Some(code), None),
            ExitStatus::Signal(signal) => (None, Some(signal)),
        };
        ExitReport {
            code,
            signal,
            timed_out: exit.timed_out,
            oom_killed: exit.oom_killed,
            duration_ms: u64::try_from(exit.duration.as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// The exit reported; `None` when the report has neither a code nor a
    /// signal.
    pub fn exit(&self) -> Option<Exit> {
        let status = match (self.code, self.signal) {
            (Some(code), _) => ExitStatus::Code(code),
            (None, Some(signal)) => ExitStatus::Signal(signal),
            (None, None) => return None,
        };
        let mut exit = Exit::from_status(status);
        exit.timed_out = self.timed_out;
        exit.oom_killed = self.oom_killed;
        exit.duration = Duration::from_millis(self.duration_ms);
        Some(exit)
    }
}

/// One line of `airlock sandbox ls`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxEntry {
    pub id: String,
    /// `running`, `paused` or `ended`.
    pub state: String,
    /// Why it ended, once it has.
    pub ended: Option<String>,
    pub wall_ms: u64,
    pub running_ms: u64,
    pub guest_cpu_ms: u64,
}

impl SandboxEntry {
    /// The manager's view of a sandbox, for the wire.
    pub fn from_info(info: &airlock::SandboxInfo) -> SandboxEntry {
        use airlock::SandboxState;
        let (state, ended) = match &info.state {
            SandboxState::Running => ("running", None),
            SandboxState::Paused => ("paused", None),
            SandboxState::Ended(reason) => ("ended", Some(reason.to_string())),
        };
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        SandboxEntry {
            id: info.id.clone(),
            state: state.to_owned(),
            ended,
            wall_ms: ms(info.usage.wall),
            running_ms: ms(info.usage.running),
            guest_cpu_ms: ms(info.usage.guest_cpu),
        }
    }
}

/// Writes one frame.
pub async fn write_frame<W, T>(writer: &mut W, message: &T) -> Result<(), DaemonError>
where
    W: AsyncWrite + Unpin,
    T: Serialize,
{
    let body = serde_json::to_vec(message).map_err(DaemonError::Encode)?;
    if body.len() > MAX_FRAME_BYTES {
        return Err(DaemonError::FrameTooLarge {
            len: body.len(),
            max: MAX_FRAME_BYTES,
        });
    }
    let len = u32::try_from(body.len()).map_err(|_| DaemonError::FrameTooLarge {
        len: body.len(),
        max: MAX_FRAME_BYTES,
    })?;
    writer
        .write_all(&len.to_be_bytes())
        .await
        .map_err(DaemonError::Io)?;
    writer.write_all(&body).await.map_err(DaemonError::Io)?;
    writer.flush().await.map_err(DaemonError::Io)
}

/// Reads one frame; `None` when the peer closed the connection between
/// frames.
pub async fn read_frame<R, T>(reader: &mut R) -> Result<Option<T>, DaemonError>
where
    R: AsyncRead + Unpin,
    T: DeserializeOwned,
{
    let mut len = [0u8; 4];
    match reader.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(DaemonError::Io(e)),
    }
    let len = usize::try_from(u32::from_be_bytes(len)).unwrap_or(usize::MAX);
    if len > MAX_FRAME_BYTES {
        return Err(DaemonError::FrameTooLarge {
            len,
            max: MAX_FRAME_BYTES,
        });
    }
    let mut body = vec![0u8; len];
    reader
        .read_exact(&mut body)
        .await
        .map_err(DaemonError::Io)?;
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(DaemonError::Malformed)
}

/// Binary data as a base64 string.
mod base64_bytes {
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(data: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&STANDARD.encode(data))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        STANDARD
            .decode(text.as_bytes())
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_round_trip_with_binary_data() {
        let (mut a, mut b) = tokio::io::duplex(1 << 20);
        let sent = Response::Stdout {
            data: vec![0, 1, 2, 255, b'\n'],
        };
        write_frame(&mut a, &sent).await.unwrap();
        write_frame(&mut a, &Request::Kill { id: "x".into() })
            .await
            .unwrap();
        drop(a);
        let got: Response = read_frame(&mut b).await.unwrap().unwrap();
        assert_eq!(got, sent);
        let got: Request = read_frame(&mut b).await.unwrap().unwrap();
        assert_eq!(got, Request::Kill { id: "x".into() });
        assert!(read_frame::<_, Request>(&mut b).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn oversized_frames_are_refused_before_reading() {
        let (mut a, mut b) = tokio::io::duplex(64);
        let len = u32::try_from(MAX_FRAME_BYTES + 1).unwrap();
        a.write_all(&len.to_be_bytes()).await.unwrap();
        let err = read_frame::<_, Request>(&mut b).await.unwrap_err();
        assert!(matches!(err, DaemonError::FrameTooLarge { .. }), "{err}");
        let huge = Input::Stdin {
            data: vec![0; MAX_FRAME_BYTES],
        };
        let err = write_frame(&mut a, &huge).await.unwrap_err();
        assert!(matches!(err, DaemonError::FrameTooLarge { .. }), "{err}");
    }

    #[test]
    fn exec_frames_keep_their_wire_form() {
        let request = Request::Exec(ExecRequest {
            id: "sb".into(),
            argv: vec!["true".into()],
            options: ProgramOptions {
                limit_memory: Some(64 << 20),
                privileged: true,
                ..ProgramOptions::default()
            },
            stdin: false,
        });
        let json = serde_json::to_value(&request).unwrap();
        assert_eq!(json["request"], "exec");
        assert_eq!(json["argv"][0], "true");
        assert_eq!(json["limit_memory_bytes"], 64 << 20);
        assert_eq!(json["privileged"], true);
        assert!(json["timeout_secs"].is_null() && json["env"].is_array());
        let back: Request = serde_json::from_value(json).unwrap();
        assert_eq!(back, request);

        let mut exit = Exit::from_status(ExitStatus::Signal(9));
        exit.timed_out = true;
        exit.duration = Duration::from_millis(1500);
        let exited = Response::Exited(ExitReport::new(&exit));
        let json = serde_json::to_value(&exited).unwrap();
        assert_eq!(json["response"], "exited");
        assert_eq!((json["code"].is_null(), &json["signal"]), (true, &9.into()));
        let Response::Exited(report) = serde_json::from_value(json).unwrap() else {
            panic!("not exited")
        };
        assert_eq!(report.exit(), Some(exit));
        let nothing = ExitReport {
            code: None,
            signal: None,
            ..report
        };
        assert_eq!(nothing.exit(), None);
    }

    #[tokio::test]
    async fn garbage_is_a_malformed_frame() {
        let (mut a, mut b) = tokio::io::duplex(64);
        a.write_all(&3u32.to_be_bytes()).await.unwrap();
        a.write_all(b"{{{").await.unwrap();
        let err = read_frame::<_, Request>(&mut b).await.unwrap_err();
        assert!(matches!(err, DaemonError::Malformed(_)), "{err}");
    }
}
