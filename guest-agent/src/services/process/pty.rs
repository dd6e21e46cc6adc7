//! Pseudo-terminals for programs started with `pty`.
//!
//! [`PtySpec`] is the request's terminal (size and `TERM`, defaults
//! applied). [`open`] allocates the pair: the master side stays with the
//! agent, the slave side becomes the program's stdin, stdout and stderr
//! and, through `crate::spawn` (`setsid` + `TIOCSCTTY` in the child before
//! its exec), its controlling terminal. Both ends are close-on-exec, so no
//! other program the agent starts inherits them.
//!
//! [`Master`] is the agent's end, shared by three users: `output` reads the
//! program's screen output from it, `stdin` writes input to it (through
//! [`Master::writer`]), and `Resize` sets its window size. On the master,
//! `EIO` means every slave descriptor is closed: the end of the output, not
//! an error. The kernel hands out what the program wrote before it closed
//! the slave first, so reading until `EIO` loses nothing.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use airlock_proto::v1::Pty;
use rustix::pty::OpenptFlags;
use rustix::termios::Winsize;
use tokio::io::unix::AsyncFd;
use tokio::io::AsyncWrite;

use super::ProcessError;

/// Rows of a terminal whose request says 0.
pub const DEFAULT_ROWS: u16 = 24;
/// Columns of a terminal whose request says 0.
pub const DEFAULT_COLS: u16 = 80;
/// `TERM` when the request names none.
pub const DEFAULT_TERM: &str = "xterm-256color";

/// A terminal's size in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowSize {
    /// Rows.
    pub rows: u16,
    /// Columns.
    pub cols: u16,
}

impl WindowSize {
    /// The size a request asks for: 0 is the default, past `u16::MAX` is
    /// refused.
    pub fn from_request(rows: u32, cols: u32) -> Result<Self, ProcessError> {
        let bad = || ProcessError::BadWindowSize { rows, cols };
        let pick = |value: u32, default: u16| match value {
            0 => Ok(default),
            n => u16::try_from(n).map_err(|_| bad()),
        };
        Ok(Self {
            rows: pick(rows, DEFAULT_ROWS)?,
            cols: pick(cols, DEFAULT_COLS)?,
        })
    }

    fn winsize(self) -> Winsize {
        Winsize {
            ws_row: self.rows,
            ws_col: self.cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        }
    }
}

/// A validated `Pty` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PtySpec {
    /// The initial window size.
    pub size: WindowSize,
    /// The `TERM` to set unless the request's env has one.
    pub term: String,
}

impl PtySpec {
    /// Applies the defaults to a request's `Pty`.
    pub fn from_request(pty: Pty) -> Result<Self, ProcessError> {
        if pty.term.contains('\0') {
            return Err(ProcessError::Nul {
                field: "pty.term".to_owned(),
            });
        }
        Ok(Self {
            size: WindowSize::from_request(pty.rows, pty.cols)?,
            term: if pty.term.is_empty() {
                DEFAULT_TERM.to_owned()
            } else {
                pty.term
            },
        })
    }
}

/// Allocates a pseudo-terminal of `size`: returns the master and the slave,
/// both close-on-exec. Blocking system calls only; no runtime needed.
pub fn open(size: WindowSize) -> std::io::Result<(OwnedFd, OwnedFd)> {
    let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
    let master = rustix::pty::openpt(flags)?;
    rustix::pty::grantpt(&master)?;
    rustix::pty::unlockpt(&master)?;
    // TIOCGPTPEER opens the slave without a path lookup (Linux 4.13+),
    // and so without a race on /dev/pts.
    let slave = rustix::pty::ioctl_tiocgptpeer(&master, flags)?;
    rustix::termios::tcsetwinsize(&master, size.winsize())?;
    Ok((master, slave))
}

/// The agent's end of a program's terminal. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Master {
    fd: Arc<AsyncFd<File>>,
}

impl Master {
    /// Wraps a master from [`open`] for the runtime (non-blocking, in the
    /// reactor). Must run inside a tokio runtime.
    pub fn new(fd: OwnedFd) -> std::io::Result<Self> {
        rustix::io::ioctl_fionbio(&fd, true)?;
        // `AsyncFd::new` is deprecated because a borrowed fd could be closed
        // while registered; this one is owned by the `File`, which the
        // `AsyncFd` owns, so it closes only after deregistration (and
        // `register` would need `unsafe`). As in `files::watch`.
        #[allow(deprecated)]
        let fd = AsyncFd::new(File::from(fd))?;
        Ok(Self { fd: Arc::new(fd) })
    }

    /// Reads the program's output; `Ok(0)` once every slave descriptor is
    /// closed. Cancel-safe.
    pub async fn read(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let mut guard = self.fd.readable().await?;
            match guard.try_io(|file| (&mut file.get_ref()).read(buf)) {
                Ok(read) => return end_on_eio(read),
                Err(_would_block) => continue,
            }
        }
    }

    /// Reads what the terminal holds right now, without waiting: a
    /// `WouldBlock` error when it holds nothing, `Ok(0)` at the end.
    pub fn read_now(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        end_on_eio((&mut self.fd.get_ref()).read(buf))
    }

    /// Sets the window size; the kernel sends SIGWINCH to the terminal's
    /// foreground process group.
    pub fn resize(&self, size: WindowSize) -> std::io::Result<()> {
        rustix::termios::tcsetwinsize(self.fd.get_ref(), size.winsize())?;
        Ok(())
    }

    /// A writer of input to the terminal, as if typed.
    pub fn writer(&self) -> MasterWriter {
        MasterWriter {
            fd: Arc::clone(&self.fd),
        }
    }
}

/// `EIO` on a master: no slave is open any more, the end of the output.
fn end_on_eio(read: std::io::Result<usize>) -> std::io::Result<usize> {
    match read {
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::IO.raw_os_error()) => Ok(0),
        other => other,
    }
}

/// Input to a terminal ([`Master::writer`]).
#[derive(Debug)]
pub struct MasterWriter {
    fd: Arc<AsyncFd<File>>,
}

impl AsyncWrite for MasterWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        loop {
            let mut guard = ready!(self.fd.poll_write_ready(cx))?;
            match guard.try_io(|file| (&mut file.get_ref()).write(buf)) {
                Ok(written) => return Poll::Ready(written),
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[test]
    fn sizes_default_and_are_bounded() {
        assert_eq!(
            WindowSize::from_request(0, 0).unwrap(),
            WindowSize { rows: 24, cols: 80 }
        );
        assert_eq!(
            WindowSize::from_request(50, 0).unwrap(),
            WindowSize { rows: 50, cols: 80 }
        );
        assert!(matches!(
            WindowSize::from_request(70_000, 10),
            Err(ProcessError::BadWindowSize { .. })
        ));
    }

    #[test]
    fn term_defaults_and_rejects_nul() {
        let spec = PtySpec::from_request(Pty::default()).unwrap();
        assert_eq!(spec.term, DEFAULT_TERM);
        let spec = PtySpec::from_request(Pty {
            term: "vt100".into(),
            ..Pty::default()
        })
        .unwrap();
        assert_eq!(spec.term, "vt100");
        assert!(PtySpec::from_request(Pty {
            term: "a\0".into(),
            ..Pty::default()
        })
        .is_err());
    }

    #[tokio::test]
    async fn a_pair_carries_input_and_size_and_ends_with_the_slave() {
        let (master, slave) = open(WindowSize {
            rows: 30,
            cols: 100,
        })
        .unwrap();
        let size = rustix::termios::tcgetwinsize(&slave).unwrap();
        assert_eq!((size.ws_row, size.ws_col), (30, 100));
        let master = Master::new(master).unwrap();
        master
            .resize(WindowSize {
                rows: 40,
                cols: 120,
            })
            .unwrap();
        let size = rustix::termios::tcgetwinsize(&slave).unwrap();
        assert_eq!((size.ws_row, size.ws_col), (40, 120));

        // Typed input comes back as the terminal's echo.
        master.writer().write_all(b"hi\n").await.unwrap();
        let mut buf = [0; 64];
        let n = master.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"hi"), "{:?}", &buf[..n]);

        // What the slave wrote before closing is read before the end.
        let mut slave = File::from(slave);
        slave.write_all(b"last words").unwrap();
        drop(slave);
        let mut got = Vec::new();
        loop {
            match master.read(&mut buf).await.unwrap() {
                0 => break,
                n => got.extend_from_slice(&buf[..n]),
            }
        }
        assert!(
            String::from_utf8_lossy(&got).contains("last words"),
            "{got:?}"
        );
    }
}
