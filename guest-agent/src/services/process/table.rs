//! The agent's process table: every program it started, running or
//! recently finished, by pid and by tag.
//!
//! A program is inserted when it is spawned and outlives the call that
//! started it. Finished programs stay so that `List` can show their exit
//! and `Connect` can collect their output tail, within three bounds, oldest
//! forgotten first: [`MAX_FINISHED`] entries, [`FINISHED_TTL`], and
//! [`FINISHED_OUTPUT_BUDGET`] bytes of retained output. Bounds are applied
//! whenever the table is used.
//!
//! A tag is unique among running programs: [`ProcessTable::reserve_tag`]
//! claims it before the spawn, so two concurrent starts cannot both get it.
//! A finished program's tag passes to the next program started with it.
//!
//! Cgroups of forgotten programs whose descendants still run are kept in a
//! lingering list and removed once empty.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use airlock_proto::v1::{process_selector, ProcessSelector};

use super::cgroup::Cgroup;
use super::entry::Entry;
use super::ProcessError;

/// Finished programs remembered at most.
pub const MAX_FINISHED: usize = 64;
/// How long a finished program is remembered.
pub const FINISHED_TTL: Duration = Duration::from_secs(15 * 60);
/// Output bytes all finished programs may hold together.
pub const FINISHED_OUTPUT_BUDGET: usize = 16 * 1024 * 1024;
/// The longest tag.
pub const MAX_TAG_LEN: usize = 128;

/// Every program the agent started.
#[derive(Debug, Default)]
pub struct ProcessTable {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    by_pid: HashMap<u32, Arc<Entry>>,
    reserved_tags: HashSet<String>,
    lingering: Vec<Cgroup>,
}

/// A claimed tag, released on drop unless a program took it.
#[derive(Debug)]
pub struct TagClaim {
    table: Arc<ProcessTable>,
    tag: Option<String>,
}

impl Drop for TagClaim {
    fn drop(&mut self) {
        if let Some(tag) = self.tag.take() {
            self.table.lock().reserved_tags.remove(&tag);
        }
    }
}

/// Checks a tag from a request: empty means none.
pub fn check_tag(tag: &str) -> Result<Option<String>, ProcessError> {
    if tag.is_empty() {
        return Ok(None);
    }
    if tag.len() > MAX_TAG_LEN || tag.chars().any(char::is_control) {
        return Err(ProcessError::BadTag(tag.to_owned()));
    }
    Ok(Some(tag.to_owned()))
}

impl ProcessTable {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Claims `tag` for a program about to start.
    pub fn reserve_tag(self: &Arc<Self>, tag: Option<String>) -> Result<TagClaim, ProcessError> {
        if let Some(tag) = &tag {
            let mut inner = self.lock();
            let running = inner
                .by_pid
                .values()
                .any(|e| e.tag() == Some(tag) && e.finished_at().is_none());
            if running || !inner.reserved_tags.insert(tag.clone()) {
                return Err(ProcessError::TagInUse(tag.clone()));
            }
        }
        Ok(TagClaim {
            table: Arc::clone(self),
            tag,
        })
    }

    /// Adds a freshly spawned program, which takes the claimed tag. A
    /// finished program with the same pid (recycled) or tag is forgotten.
    pub fn insert(&self, entry: Arc<Entry>, mut claim: TagClaim) {
        let mut inner = self.lock();
        if let Some(tag) = claim.tag.take() {
            inner.reserved_tags.remove(&tag);
            let stale: Vec<u32> = inner
                .by_pid
                .values()
                .filter(|e| e.tag() == Some(tag.as_str()))
                .map(|e| e.pid())
                .collect();
            for pid in stale {
                forget(&mut inner, pid);
            }
        }
        forget(&mut inner, entry.pid());
        inner.by_pid.insert(entry.pid(), entry);
        sweep(&mut inner, Instant::now());
    }

    /// The program a request names: by pid, or by tag (the running one,
    /// else the latest finished one).
    pub fn find(&self, selector: Option<&ProcessSelector>) -> Result<Arc<Entry>, ProcessError> {
        let mut inner = self.lock();
        sweep(&mut inner, Instant::now());
        match selector.and_then(|s| s.selector.as_ref()) {
            None => Err(ProcessError::NoSelector),
            Some(process_selector::Selector::Pid(pid)) => inner
                .by_pid
                .get(pid)
                .cloned()
                .ok_or_else(|| ProcessError::NoSuchProcess(format!("pid {pid}"))),
            Some(process_selector::Selector::Tag(tag)) => inner
                .by_pid
                .values()
                .filter(|e| e.tag() == Some(tag.as_str()))
                .max_by_key(|e| (e.finished_at().is_none(), e.started()))
                .cloned()
                .ok_or_else(|| ProcessError::NoSuchProcess(format!("tag {tag:?}"))),
        }
    }

    /// Every program, oldest first.
    pub fn list(&self) -> Vec<Arc<Entry>> {
        let mut inner = self.lock();
        sweep(&mut inner, Instant::now());
        let mut all: Vec<_> = inner.by_pid.values().cloned().collect();
        all.sort_by_key(|e| e.started());
        all
    }

    /// Whether `entry` is still the table's entry for its pid.
    pub fn contains(&self, entry: &Arc<Entry>) -> bool {
        self.lock()
            .by_pid
            .get(&entry.pid())
            .is_some_and(|e| Arc::ptr_eq(e, entry))
    }

    /// Forgets `entry` now (a transient program at its end): nothing lists
    /// or finds it any more. Its cgroup, if processes are
    /// still in it, lingers until they are gone. An entry that a recycled
    /// pid already replaced only gives up its cgroup.
    pub fn forget_entry(&self, entry: &Arc<Entry>) {
        let mut inner = self.lock();
        let ours = inner
            .by_pid
            .get(&entry.pid())
            .is_some_and(|e| Arc::ptr_eq(e, entry));
        if ours {
            forget(&mut inner, entry.pid());
        } else if let Some(cgroup) = entry.tree().take_cgroup() {
            inner.lingering.push(cgroup);
        }
    }

    /// Keeps `cgroup` until its last process is gone, then removes it.
    pub fn linger(&self, cgroup: Cgroup) {
        self.lock().lingering.push(cgroup);
    }
}

/// Drops an entry, keeping its cgroup for removal if it is still in use.
fn forget(inner: &mut Inner, pid: u32) {
    if let Some(entry) = inner.by_pid.remove(&pid) {
        if let Some(cgroup) = entry.tree().take_cgroup() {
            inner.lingering.push(cgroup);
        }
    }
}

/// Applies the bounds on finished programs and retries lingering cgroups.
fn sweep(inner: &mut Inner, now: Instant) {
    let mut finished: Vec<(Instant, u32, usize)> = inner
        .by_pid
        .values()
        .filter_map(|e| Some((e.finished_at()?, e.pid(), e.held())))
        .collect();
    finished.sort_unstable();
    let mut count = finished.len();
    let mut bytes: usize = finished.iter().map(|f| f.2).sum();
    for (at, pid, held) in finished {
        let expired = now.saturating_duration_since(at) > FINISHED_TTL;
        if !expired && count <= MAX_FINISHED && bytes <= FINISHED_OUTPUT_BUDGET {
            break;
        }
        tracing::debug!(pid, "forgetting finished process");
        forget(inner, pid);
        count -= 1;
        bytes -= held;
    }
    for entry in inner.by_pid.values() {
        if entry.finished_at().is_some() {
            entry.tree().try_release_cgroup();
        }
    }
    inner.lingering.retain(|cgroup| cgroup.remove().is_err());
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::reaper::Reaper;
    use crate::services::process::entry::{End, Identity};
    use crate::services::process::signal::Tree;

    fn entry(pid: u32, tag: Option<&str>) -> Arc<Entry> {
        Arc::new(Entry::new(
            Identity {
                pid,
                tag: tag.map(str::to_owned),
                argv: vec!["p".into()],
                started: Instant::now(),
                received_us: 0,
                spawned_us: 0,
            },
            None,
            None,
            Tree::new(pid, Reaper::for_tests(), None),
        ))
    }

    fn start(table: &Arc<ProcessTable>, pid: u32, tag: Option<&str>) -> Arc<Entry> {
        let claim = table.reserve_tag(tag.map(str::to_owned)).unwrap();
        let e = entry(pid, tag);
        table.insert(e.clone(), claim);
        e
    }

    fn by_pid(pid: u32) -> ProcessSelector {
        ProcessSelector {
            selector: Some(process_selector::Selector::Pid(pid)),
        }
    }

    fn by_tag(tag: &str) -> ProcessSelector {
        ProcessSelector {
            selector: Some(process_selector::Selector::Tag(tag.into())),
        }
    }

    #[test]
    fn finds_by_pid_and_tag() {
        let table = Arc::new(ProcessTable::default());
        start(&table, 10, Some("web"));
        start(&table, 11, None);
        assert_eq!(table.find(Some(&by_pid(11))).unwrap().pid(), 11);
        assert_eq!(table.find(Some(&by_tag("web"))).unwrap().pid(), 10);
        assert!(matches!(
            table.find(Some(&by_pid(12))),
            Err(ProcessError::NoSuchProcess(_))
        ));
        assert!(matches!(table.find(None), Err(ProcessError::NoSelector)));
        assert_eq!(table.list().len(), 2);
    }

    #[test]
    fn a_tag_is_unique_among_running_programs() {
        let table = Arc::new(ProcessTable::default());
        let first = start(&table, 10, Some("job"));
        assert!(matches!(
            table.reserve_tag(Some("job".into())),
            Err(ProcessError::TagInUse(_))
        ));
        // A claim blocks others until it is dropped.
        let claim = table.reserve_tag(Some("other".into())).unwrap();
        assert!(table.reserve_tag(Some("other".into())).is_err());
        drop(claim);
        assert!(table.reserve_tag(Some("other".into())).is_ok());

        first.finish(End::Lost);
        start(&table, 20, Some("job"));
        assert_eq!(table.find(Some(&by_tag("job"))).unwrap().pid(), 20);
        assert!(
            table.find(Some(&by_pid(10))).is_err(),
            "old holder forgotten"
        );
    }

    #[test]
    fn finished_programs_are_bounded() {
        let table = Arc::new(ProcessTable::default());
        for pid in 0..(MAX_FINISHED as u32 + 10) {
            start(&table, 100 + pid, None).finish(End::Lost);
        }
        let running = start(&table, 5, None);
        let left = table.list();
        assert_eq!(left.len(), MAX_FINISHED + 1);
        assert!(table.contains(&running));
        assert!(table.find(Some(&by_pid(100))).is_err(), "oldest forgotten");
    }

    #[test]
    fn bad_tags_are_rejected() {
        assert_eq!(check_tag("").unwrap(), None);
        assert_eq!(check_tag("build-1").unwrap().as_deref(), Some("build-1"));
        assert!(check_tag("a\nb").is_err());
        assert!(check_tag(&"x".repeat(MAX_TAG_LEN + 1)).is_err());
    }
}
