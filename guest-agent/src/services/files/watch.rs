//! `Watch`: inotify events below a directory as a stream.
//!
//! Watches are set up before the call answers, so once the client has the
//! stream every later change is reported. With `recursive`, every
//! directory below gets a watch, and directories created later get one
//! when their creation is seen (entries made in the brief gap before that
//! can be missed, as with any inotify watcher).

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::{Path, PathBuf};

use airlock_proto::v1::{WatchEvent, WatchEventKind};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, InotifyEvent, WatchDescriptor};
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc;
use tonic::Status;

use super::error::FilesError;

/// Events queued per watch before the watcher waits for the client.
const QUEUE: usize = 64;

/// The inotify instance as something `AsyncFd` can poll.
#[derive(Debug)]
struct Fd(Inotify);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// A live watch: inotify plus where each watch descriptor points.
#[derive(Debug)]
pub struct Watcher {
    fd: AsyncFd<Fd>,
    dirs: HashMap<WatchDescriptor, PathBuf>,
    recursive: bool,
}

fn mask() -> AddWatchFlags {
    AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_MODIFY
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_ONLYDIR
}

impl Watcher {
    /// Starts watching `dir` (and, if `recursive`, every directory below).
    pub fn new(dir: &Path, recursive: bool) -> Result<Self, FilesError> {
        let errno = |op, e: nix::Error| FilesError::io(op, dir, std::io::Error::from(e));
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .map_err(|e| errno("watch", e))?;
        // `AsyncFd::new` is deprecated because a borrowed fd could be closed
        // while registered; this one is owned by `Fd`, which the `AsyncFd`
        // owns, so it closes only after deregistration (and `register` would
        // need `unsafe`).
        #[allow(deprecated)]
        let fd = AsyncFd::new(Fd(inotify)).map_err(|e| FilesError::io("watch", dir, e))?;
        let mut watcher = Watcher {
            fd,
            dirs: HashMap::new(),
            recursive,
        };
        watcher.add(dir)?;
        Ok(watcher)
    }

    /// Watches `dir` and, when recursive, its subdirectories.
    fn add(&mut self, dir: &Path) -> Result<(), FilesError> {
        let wd = self
            .fd
            .get_ref()
            .0
            .add_watch(dir, mask())
            .map_err(|e| FilesError::io("watch", dir, std::io::Error::from(e)))?;
        self.dirs.insert(wd, dir.to_owned());
        if self.recursive {
            let entries = std::fs::read_dir(dir).map_err(|e| FilesError::io("watch", dir, e))?;
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    // A directory removed meanwhile is simply not watched.
                    let _ = self.add(&entry.path());
                }
            }
        }
        Ok(())
    }

    /// Forwards events to `tx` until the client goes away.
    pub async fn run(mut self, tx: mpsc::Sender<Result<WatchEvent, Status>>) {
        loop {
            let events = tokio::select! {
                () = tx.closed() => return,
                ready = self.fd.readable() => match ready {
                    Ok(mut guard) => match guard.try_io(|fd| fd.get_ref().0.read_events().map_err(std::io::Error::from)) {
                        Ok(Ok(events)) => events,
                        Ok(Err(e)) => {
                            let _ = tx.send(Err(Status::internal(format!("inotify: {e}")))).await;
                            return;
                        }
                        Err(_would_block) => continue,
                    },
                    Err(e) => {
                        let _ = tx.send(Err(Status::internal(format!("inotify: {e}")))).await;
                        return;
                    }
                },
            };
            for event in events {
                if let Some(out) = self.translate(&event) {
                    if tx.send(Ok(out)).await.is_err() {
                        return;
                    }
                }
            }
        }
    }

    fn translate(&mut self, event: &InotifyEvent) -> Option<WatchEvent> {
        if event.mask.contains(AddWatchFlags::IN_IGNORED) {
            self.dirs.remove(&event.wd);
            return None;
        }
        let dir = self.dirs.get(&event.wd)?;
        let path = match &event.name {
            Some(name) => dir.join(name),
            None => dir.clone(),
        };
        let is_dir = event.mask.contains(AddWatchFlags::IN_ISDIR);
        let kind = if event.mask.contains(AddWatchFlags::IN_CREATE) {
            WatchEventKind::Create
        } else if event.mask.contains(AddWatchFlags::IN_MODIFY) {
            WatchEventKind::Modify
        } else if event.mask.contains(AddWatchFlags::IN_DELETE) {
            WatchEventKind::Delete
        } else if event.mask.contains(AddWatchFlags::IN_MOVED_FROM) {
            WatchEventKind::RenameFrom
        } else if event.mask.contains(AddWatchFlags::IN_MOVED_TO) {
            WatchEventKind::RenameTo
        } else {
            return None;
        };
        if self.recursive
            && is_dir
            && matches!(kind, WatchEventKind::Create | WatchEventKind::RenameTo)
        {
            if let Err(e) = self.add(&path) {
                tracing::debug!(error = %e, "new directory not watched");
            }
        }
        Some(WatchEvent {
            kind: kind.into(),
            path: path.display().to_string(),
            is_dir,
            cookie: event.cookie,
        })
    }
}

/// Starts a watcher task; the receiver is the event stream.
pub fn start(
    dir: &Path,
    recursive: bool,
) -> Result<mpsc::Receiver<Result<WatchEvent, Status>>, FilesError> {
    let watcher = Watcher::new(dir, recursive)?;
    let (tx, rx) = mpsc::channel(QUEUE);
    tokio::spawn(watcher.run(tx));
    Ok(rx)
}
