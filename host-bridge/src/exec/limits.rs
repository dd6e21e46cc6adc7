//! [`Limits`]: what one program's process tree may use in the guest, and
//! [`Usage`]: what it did use.

use std::time::Duration;

use airlock_proto::v1;

use crate::adopt::RecordedLimits;

/// Resource limits for a program's process tree, enforced by the agent
/// with the tree's cgroup (memory, processes, CPU) and with rlimits set
/// before `exec` (open files, core size, file size, stack). Unset means
/// unlimited (within the guest; the agent keeps headroom for itself).
///
/// Set on a [`Command`](crate::Command), or for every command of a sandbox
/// with [`SandboxBuilder::default_limits`](crate::SandboxBuilder::default_limits);
/// a command's own limits win field by field.
///
/// ```
/// use airlock::Limits;
///
/// let limits = Limits::new().memory_bytes(256 << 20).pids(64).cpu_millis(500);
/// assert_eq!(limits.get_pids(), Some(64));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    memory_bytes: Option<u64>,
    pids: Option<u32>,
    cpu_millis: Option<u32>,
    open_files: Option<u64>,
    core_bytes: Option<u64>,
    file_size_bytes: Option<u64>,
    stack_bytes: Option<u64>,
}

impl Limits {
    /// No limits.
    pub fn new() -> Self {
        Self::default()
    }

    /// Memory of the whole tree (cgroup `memory.max`), swap off. Past it
    /// the guest's OOM killer kills in the tree and the exit says
    /// [`oom_killed`](crate::Exit::oom_killed).
    pub fn memory_bytes(mut self, bytes: u64) -> Self {
        self.memory_bytes = Some(bytes.max(1));
        self
    }

    /// Processes and threads in the tree at once (cgroup `pids.max`);
    /// `fork` fails past it.
    pub fn pids(mut self, pids: u32) -> Self {
        self.pids = Some(pids.max(1));
        self
    }

    /// CPU share in thousandths of a CPU (cgroup `cpu.max`): 500 is half a
    /// CPU, 2000 two.
    pub fn cpu_millis(mut self, millis: u32) -> Self {
        self.cpu_millis = Some(millis.max(1));
        self
    }

    /// Open file descriptors per process (`RLIMIT_NOFILE`).
    pub fn open_files(mut self, n: u64) -> Self {
        self.open_files = Some(n.max(1));
        self
    }

    /// Core file size (`RLIMIT_CORE`).
    pub fn core_bytes(mut self, bytes: u64) -> Self {
        self.core_bytes = Some(bytes.max(1));
        self
    }

    /// Largest file a process may write (`RLIMIT_FSIZE`).
    pub fn file_size_bytes(mut self, bytes: u64) -> Self {
        self.file_size_bytes = Some(bytes.max(1));
        self
    }

    /// Stack size (`RLIMIT_STACK`).
    pub fn stack_bytes(mut self, bytes: u64) -> Self {
        self.stack_bytes = Some(bytes.max(1));
        self
    }

    /// The process limit, if set.
    pub fn get_pids(&self) -> Option<u32> {
        self.pids
    }

    /// Whether no limit is set.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// These limits, with `defaults` filling the unset fields.
    pub fn or(self, defaults: &Limits) -> Limits {
        Limits {
            memory_bytes: self.memory_bytes.or(defaults.memory_bytes),
            pids: self.pids.or(defaults.pids),
            cpu_millis: self.cpu_millis.or(defaults.cpu_millis),
            open_files: self.open_files.or(defaults.open_files),
            core_bytes: self.core_bytes.or(defaults.core_bytes),
            file_size_bytes: self.file_size_bytes.or(defaults.file_size_bytes),
            stack_bytes: self.stack_bytes.or(defaults.stack_bytes),
        }
    }

    pub(crate) fn to_proto(self) -> Option<v1::Limits> {
        (!self.is_empty()).then(|| v1::Limits {
            memory_bytes: self.memory_bytes.unwrap_or(0),
            pids: self.pids.unwrap_or(0),
            cpu_millis: self.cpu_millis.unwrap_or(0),
            open_files: self.open_files.unwrap_or(0),
            core_bytes: self.core_bytes.unwrap_or(0),
            file_size_bytes: self.file_size_bytes.unwrap_or(0),
            stack_bytes: self.stack_bytes.unwrap_or(0),
        })
    }
}

/// [`Limits`] to and from the form an adoption record keeps them in (see
/// `crate::adopt`).
impl From<Limits> for RecordedLimits {
    fn from(limits: Limits) -> Self {
        RecordedLimits {
            memory_bytes: limits.memory_bytes,
            pids: limits.pids,
            cpu_millis: limits.cpu_millis,
            open_files: limits.open_files,
            core_bytes: limits.core_bytes,
            file_size_bytes: limits.file_size_bytes,
            stack_bytes: limits.stack_bytes,
        }
    }
}

impl From<RecordedLimits> for Limits {
    fn from(recorded: RecordedLimits) -> Self {
        Limits {
            memory_bytes: recorded.memory_bytes,
            pids: recorded.pids,
            cpu_millis: recorded.cpu_millis,
            open_files: recorded.open_files,
            core_bytes: recorded.core_bytes,
            file_size_bytes: recorded.file_size_bytes,
            stack_bytes: recorded.stack_bytes,
        }
    }
}

/// What a program's process tree used, from its cgroup in the guest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// CPU time, user and system, of every process in the tree.
    pub cpu: Duration,
    /// Peak memory of the tree, in bytes (0 where the guest kernel does not
    /// report it).
    pub memory_peak_bytes: u64,
    /// The most processes the tree had at once (0 where the guest kernel
    /// does not report it).
    pub pids_peak: u32,
}

impl From<&v1::Usage> for Usage {
    fn from(u: &v1::Usage) -> Self {
        Usage {
            cpu: Duration::from_micros(u.cpu_us),
            memory_peak_bytes: u.memory_peak_bytes,
            pids_peak: u.pids_peak,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_limits_win_over_defaults_field_by_field() {
        let defaults = Limits::new().pids(100).memory_bytes(1 << 30);
        let merged = Limits::new().pids(10).or(&defaults);
        assert_eq!(merged, Limits::new().pids(10).memory_bytes(1 << 30));
        assert_eq!(Limits::new().to_proto(), None);
        let proto = merged.to_proto().unwrap_or_default();
        assert_eq!(
            (proto.pids, proto.memory_bytes, proto.cpu_millis),
            (10, 1 << 30, 0)
        );
    }

    #[test]
    fn limits_survive_their_record_form() {
        let limits = Limits::new().pids(7).cpu_millis(500).stack_bytes(1 << 20);
        assert_eq!(Limits::from(RecordedLimits::from(limits)), limits);
    }
}
