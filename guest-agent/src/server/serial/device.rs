//! The virtio-serial port itself: found by name, opened non-blocking, and
//! read and written through tokio's reactor.
//!
//! What the guest driver (`drivers/char/virtio_console.c`) does, and what
//! [`Device`] makes of it:
//!
//! - `read()` returns data first, even data an old connection left; then 0
//!   while no host is connected, `EAGAIN` while one is. Between connections
//!   a 0 means "no host yet"; during one, the end of the stream.
//! - `poll()` reports `POLLHUP` while no host is connected. tokio keeps a
//!   hangup once seen (it treats it as final, as it is for a socket), so
//!   after one the port looks ready for ever. [`Device`] therefore reads a
//!   hangup during a connection as the end of that connection, without
//!   reading further (the next host's bytes stay for the next opening), and
//!   registers the port anew when a connection begins, or when it finds the
//!   port connected again between connections.
//! - `write()` returns `EAGAIN` while no host is connected: with a hangup
//!   seen, a write fails with [`io::ErrorKind::BrokenPipe`] instead of
//!   waiting.
//! - Readiness is not trusted to wake the agent alone: a read or write that
//!   waits is tried again every [`RECHECK_OPENING`] between connections and
//!   every [`RECHECK_CONNECTED`] during one.

use std::fs::File;
use std::future::Future;
use std::io::{self, Read, Write};
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use super::error::SerialError;
use super::Port;

/// Where the guest lists its virtio-serial ports, one directory each, with
/// the port's name in the file `name`.
pub const SYS_PORTS: &str = "/sys/class/virtio-ports";
/// Where the ports' device nodes are (devtmpfs).
pub const DEV: &str = "/dev";
/// How long a port may take to appear after `virtio_console` loads (the
/// host names it a moment after the device is found).
pub const APPEAR_WAIT: Duration = Duration::from_secs(10);
/// How often to look for a port that has not appeared yet.
const APPEAR_POLL: Duration = Duration::from_millis(20);
/// How often a waiting read or write is retried between connections.
pub const RECHECK_OPENING: Duration = Duration::from_millis(50);
/// How often a waiting read or write is retried during a connection.
pub const RECHECK_CONNECTED: Duration = Duration::from_secs(1);

/// An open virtio-serial port.
#[derive(Debug)]
pub struct Device {
    /// A descriptor of the port, registered with the reactor; replaced by a
    /// fresh duplicate to forget a hangup (see [`Device::rearm`]).
    io: AsyncFd<File>,
    /// Whether a connection is open (see [`Port`]).
    connected: bool,
    read_recheck: Recheck,
    write_recheck: Recheck,
}

impl Device {
    /// Opens the port named `name`, waiting up to [`APPEAR_WAIT`] for it to
    /// appear. Must run inside a tokio runtime.
    pub async fn open(name: &str) -> Result<Self, SerialError> {
        Self::open_in(Path::new(SYS_PORTS), Path::new(DEV), name, APPEAR_WAIT).await
    }

    /// [`Device::open`] with the sysfs class directory and the device
    /// directory given.
    async fn open_in(
        sys_ports: &Path,
        dev: &Path,
        name: &str,
        wait: Duration,
    ) -> Result<Self, SerialError> {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(node) = find(sys_ports, name) {
                let path = dev.join(node);
                match open_nonblocking(&path) {
                    Ok(file) => {
                        tracing::debug!(name, path = %path.display(), "serial port open");
                        return Self::from_file(file).map_err(|source| SerialError::Register {
                            name: name.to_owned(),
                            source,
                        });
                    }
                    // The node may lag its sysfs entry for a moment.
                    Err(e) if e.kind() == io::ErrorKind::NotFound && Instant::now() < deadline => {}
                    Err(source) => {
                        return Err(SerialError::Open {
                            name: name.to_owned(),
                            path,
                            source,
                        })
                    }
                }
            }
            if Instant::now() >= deadline {
                return Err(SerialError::NotFound {
                    name: name.to_owned(),
                    waited: wait,
                });
            }
            tokio::time::sleep(APPEAR_POLL).await;
        }
    }

    /// Wraps an open, non-blocking descriptor of a port. Must run inside a
    /// tokio runtime.
    pub(crate) fn from_file(file: File) -> io::Result<Self> {
        Ok(Self {
            io: register(file)?,
            connected: false,
            read_recheck: Recheck::default(),
            write_recheck: Recheck::default(),
        })
    }

    /// Registers a fresh duplicate of the descriptor and drops the old
    /// registration, and with it any hangup tokio remembers.
    fn rearm(&mut self) -> io::Result<()> {
        let duplicate = self.io.get_ref().try_clone()?;
        self.io = register(duplicate)?;
        Ok(())
    }

    fn recheck_period(&self) -> Duration {
        if self.connected {
            RECHECK_CONNECTED
        } else {
            RECHECK_OPENING
        }
    }

    fn read_poll(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        loop {
            let mut guard = match self.io.poll_read_ready(cx) {
                Poll::Ready(guard) => guard?,
                Poll::Pending => {
                    let period = self.recheck_period();
                    if !self.read_recheck.due(cx, period) {
                        return Poll::Pending;
                    }
                    match read_into(self.io.get_ref(), buf) {
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                        done => return Poll::Ready(done),
                    }
                }
            };
            let hung_up = guard.ready().is_read_closed();
            if hung_up && self.connected {
                // This connection's host left: end of stream.
                return Poll::Ready(Ok(()));
            }
            match guard.try_io(|io| read_into(io.get_ref(), buf)) {
                Ok(done) => return Poll::Ready(done),
                Err(_would_block) if hung_up => {
                    // A host is connected again since the hangup.
                    self.rearm()?;
                }
                Err(_would_block) => {}
            }
        }
    }

    fn write_poll(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = match self.io.poll_write_ready(cx) {
                Poll::Ready(guard) => guard?,
                Poll::Pending => {
                    let period = self.recheck_period();
                    if !self.write_recheck.due(cx, period) {
                        return Poll::Pending;
                    }
                    match write_from(self.io.get_ref(), buf) {
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                        done => return Poll::Ready(done),
                    }
                }
            };
            let hung_up = guard.ready().is_write_closed();
            if hung_up && self.connected {
                return Poll::Ready(Err(host_gone()));
            }
            match guard.try_io(|io| write_from(io.get_ref(), buf)) {
                Ok(done) => return Poll::Ready(done),
                Err(_would_block) if hung_up => return Poll::Ready(Err(host_gone())),
                Err(_would_block) => {}
            }
        }
    }
}

impl Port for Device {
    fn begin_connection(&mut self) {
        if let Err(e) = self.rearm() {
            tracing::warn!(error = %e, "cannot re-register the serial port; an old hangup may end this connection");
        }
        self.connected = true;
    }

    fn end_connection(&mut self) {
        self.connected = false;
    }
}

impl AsyncRead for Device {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.get_mut().read_poll(cx, buf)
    }
}

impl AsyncWrite for Device {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().write_poll(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// The device node's name (such as `vport0p1`) of the port called `name`.
fn find(sys_ports: &Path, name: &str) -> Option<String> {
    let entries = std::fs::read_dir(sys_ports).ok()?;
    entries.flatten().find_map(|entry| {
        let port_name = std::fs::read_to_string(entry.path().join("name")).ok()?;
        (port_name.trim_end_matches('\n') == name)
            .then(|| entry.file_name().into_string().ok())
            .flatten()
    })
}

fn open_nonblocking(path: &Path) -> io::Result<File> {
    let flags = OFlag::O_RDWR | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC | OFlag::O_NOCTTY;
    let fd = nix::fcntl::open(path, flags, Mode::empty())?;
    Ok(File::from(fd))
}

fn register(file: File) -> io::Result<AsyncFd<File>> {
    // `AsyncFd::new` is deprecated because a borrowed fd could be closed
    // while registered; this one is owned by the `File`, which the
    // `AsyncFd` owns, so it closes only after deregistration (and
    // `register` would need `unsafe`). As in `services::process::pty`.
    #[allow(deprecated)]
    AsyncFd::new(file)
}

fn read_into(mut file: &File, buf: &mut ReadBuf<'_>) -> io::Result<()> {
    let read = file.read(buf.initialize_unfilled())?;
    buf.advance(read);
    Ok(())
}

fn write_from(mut file: &File, buf: &[u8]) -> io::Result<usize> {
    file.write(buf)
}

fn host_gone() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "the host left the serial port")
}

/// A timer that makes a waiting read or write try again now and then.
#[derive(Debug, Default)]
struct Recheck(Option<Pin<Box<Sleep>>>);

impl Recheck {
    /// Whether `period` has passed since the timer was set (it is set now
    /// if it is not); if not, `cx` is woken when it has.
    fn due(&mut self, cx: &mut Context<'_>, period: Duration) -> bool {
        let sleep = self
            .0
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(period)));
        if sleep.as_mut().poll(cx).is_ready() {
            self.0 = None;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn port_dir(sys: &Path, node: &str, name: &str) {
        std::fs::create_dir(sys.join(node)).unwrap();
        std::fs::write(sys.join(node).join("name"), format!("{name}\n")).unwrap();
    }

    #[test]
    fn finds_a_port_by_its_name() {
        let sys = tempfile::tempdir().unwrap();
        port_dir(sys.path(), "vport0p0", "org.qemu.guest_agent.0");
        port_dir(sys.path(), "vport0p1", "airlock.agent.0");
        std::fs::create_dir(sys.path().join("vport0p2")).unwrap();
        assert_eq!(
            find(sys.path(), "airlock.agent.0").as_deref(),
            Some("vport0p1")
        );
        assert_eq!(find(sys.path(), "airlock.agent"), None);
        assert_eq!(find(&sys.path().join("missing"), "airlock.agent.0"), None);
    }

    #[tokio::test]
    async fn a_missing_port_is_an_error_naming_it() {
        let sys = tempfile::tempdir().unwrap();
        let wait = Duration::from_millis(60);
        let err = Device::open_in(sys.path(), sys.path(), "airlock.agent.0", wait)
            .await
            .unwrap_err();
        assert!(matches!(err, SerialError::NotFound { .. }), "{err}");
        assert!(err.to_string().contains("airlock.agent.0"), "{err}");
    }

    #[tokio::test]
    async fn waits_for_a_port_that_appears_late() {
        let sys = tempfile::tempdir().unwrap();
        let dev = tempfile::tempdir().unwrap();
        let opening = tokio::spawn({
            let (sys, dev) = (sys.path().to_owned(), dev.path().to_owned());
            async move { Device::open_in(&sys, &dev, "p", Duration::from_secs(10)).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        port_dir(sys.path(), "vport1p1", "p");
        tokio::time::sleep(Duration::from_millis(50)).await;
        // A FIFO stands in for the device node.
        nix::unistd::mkfifo(
            &dev.path().join("vport1p1"),
            Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        opening.await.unwrap().unwrap();
    }

    /// A device over one end of a socket pair, whose other end plays the
    /// host (a socket's hangup is final, so only one connection).
    fn socket_device() -> (Device, tokio::net::UnixStream) {
        let (guest, host) = UnixStream::pair().unwrap();
        guest.set_nonblocking(true).unwrap();
        host.set_nonblocking(true).unwrap();
        let device = Device::from_file(File::from(OwnedFd::from(guest))).unwrap();
        (device, tokio::net::UnixStream::from_std(host).unwrap())
    }

    #[tokio::test]
    async fn carries_bytes_both_ways_during_a_connection() {
        let (mut device, mut host) = socket_device();
        device.begin_connection();
        host.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        device.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"ping");
        device.write_all(b"pong").await.unwrap();
        host.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"pong");
    }

    #[tokio::test]
    async fn a_hangup_ends_the_connection() {
        let (mut device, host) = socket_device();
        device.begin_connection();
        drop(host);
        let mut buf = [0u8; 4];
        assert_eq!(device.read(&mut buf).await.unwrap(), 0);
        let err = device.write_all(b"late").await.unwrap_err();
        assert!(matches!(err.kind(), io::ErrorKind::BrokenPipe), "{err:?}");
    }

    #[tokio::test]
    async fn a_read_waits_for_the_host_to_write() {
        let (mut device, mut host) = socket_device();
        device.begin_connection();
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 5];
            device.read_exact(&mut buf).await.map(|_| buf)
        });
        tokio::time::sleep(RECHECK_OPENING).await;
        host.write_all(b"later").await.unwrap();
        assert_eq!(&reader.await.unwrap().unwrap(), b"later");
    }
}
