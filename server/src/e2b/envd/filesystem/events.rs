//! Our Files service's watch events as envd's `FilesystemEvent`s: names
//! relative to the watched directory, renames as fsnotify reports them
//! (the old name RENAME, the new one CREATE), and our own atomic write
//! reported as the file written: the write goes to a temporary beside the
//! file (`.NAME.airlock-N-M.tmp`, see the guest agent's files service)
//! renamed over it, so the temporary's events are dropped and its rename
//! into place is the file's CREATE and WRITE.

use std::collections::VecDeque;

use airlock_api::v1::{self as api, WatchEventType};
use airlock_e2b_wire::filesystem::{EventType, FilesystemEvent};

/// At most this many renames from a temporary are remembered (a rename's
/// two halves come together; this only bounds a stream of unpaired ones).
const MAX_PENDING: usize = 256;

/// A watch's translation state.
#[derive(Debug, Clone)]
pub struct Translate {
    root: String,
    /// Cookies of renames away from one of our temporaries.
    from_temp: VecDeque<u32>,
}

impl Translate {
    /// For a watch of the directory `root` (absolute).
    pub fn new(root: &str) -> Self {
        let root = match root.trim_end_matches('/') {
            "" => "/".to_owned(),
            trimmed => trimmed.to_owned(),
        };
        Translate {
            root,
            from_temp: VecDeque::new(),
        }
    }

    /// The envd events for `event` (none, one, or two for a write put in
    /// place), with the absolute path each is about.
    pub fn events(&mut self, event: &api::WatchEvent) -> Vec<(FilesystemEvent, String)> {
        let kind = WatchEventType::try_from(event.r#type).unwrap_or(WatchEventType::Unspecified);
        let temp = is_temporary(&event.path);
        let types: &[EventType] = match (kind, temp) {
            (WatchEventType::RenameFrom, true) => {
                if self.from_temp.len() == MAX_PENDING {
                    self.from_temp.pop_front();
                }
                self.from_temp.push_back(event.cookie);
                &[]
            }
            (_, true) | (WatchEventType::Unspecified, _) => &[],
            (WatchEventType::RenameTo, false) => {
                match self.from_temp.iter().position(|c| *c == event.cookie) {
                    Some(at) => {
                        self.from_temp.remove(at);
                        &[EventType::Create, EventType::Write]
                    }
                    None => &[EventType::Create],
                }
            }
            (WatchEventType::Create, false) => &[EventType::Create],
            (WatchEventType::Write, false) => &[EventType::Write],
            (WatchEventType::Remove, false) => &[EventType::Remove],
            (WatchEventType::RenameFrom, false) => &[EventType::Rename],
        };
        let name = self.name(&event.path);
        types
            .iter()
            .map(|kind| {
                (
                    FilesystemEvent {
                        name: name.clone(),
                        r#type: (*kind).into(),
                        entry: None,
                    },
                    event.path.clone(),
                )
            })
            .collect()
    }

    /// `path` relative to the watched directory.
    fn name(&self, path: &str) -> String {
        let rest = if self.root == "/" {
            path.strip_prefix('/')
        } else {
            path.strip_prefix(self.root.as_str())
                .and_then(|rest| rest.strip_prefix('/'))
        };
        rest.unwrap_or(path).to_owned()
    }
}

/// Whether `path` names one of our writes' temporaries.
fn is_temporary(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.starts_with('.') && name.ends_with(".tmp") && name.contains(".airlock-")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: WatchEventType, path: &str, cookie: u32) -> api::WatchEvent {
        api::WatchEvent {
            r#type: kind.into(),
            path: path.into(),
            is_dir: false,
            cookie,
        }
    }

    fn kinds(out: &[(FilesystemEvent, String)]) -> Vec<(String, i32)> {
        out.iter()
            .map(|(e, _)| (e.name.clone(), e.r#type))
            .collect()
    }

    #[test]
    fn our_write_is_reported_as_the_file_written() {
        let mut translate = Translate::new("/home/user/");
        let temp = "/home/user/.a.txt.airlock-1234-0.tmp";
        assert!(translate
            .events(&event(WatchEventType::Create, temp, 0))
            .is_empty());
        assert!(translate
            .events(&event(WatchEventType::Write, temp, 0))
            .is_empty());
        assert!(translate
            .events(&event(WatchEventType::RenameFrom, temp, 7))
            .is_empty());
        let out = translate.events(&event(WatchEventType::RenameTo, "/home/user/a.txt", 7));
        assert_eq!(
            kinds(&out),
            vec![
                ("a.txt".into(), EventType::Create.into()),
                ("a.txt".into(), EventType::Write.into())
            ]
        );
    }

    #[test]
    fn renames_and_nested_names() {
        let mut translate = Translate::new("/d");
        let from = translate.events(&event(WatchEventType::RenameFrom, "/d/x", 3));
        let to = translate.events(&event(WatchEventType::RenameTo, "/d/sub/y", 3));
        assert_eq!(kinds(&from), vec![("x".into(), EventType::Rename.into())]);
        assert_eq!(kinds(&to), vec![("sub/y".into(), EventType::Create.into())]);
        let removed = translate.events(&event(WatchEventType::Remove, "/d/x", 0));
        assert_eq!(
            kinds(&removed),
            vec![("x".into(), EventType::Remove.into())]
        );
        assert!(!is_temporary("/d/.hidden.tmp"));
    }
}
