//! The library's types as `airlock.api.v1` messages, each mapping in one
//! place.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use airlock::fs::{Change, ChangeKind, FileKind, Metadata, WatchEvent, WatchKind};
use airlock::{
    AuditRecord, CellDone, CellEvent, CellStatus, ContextInfo, Exit, ExitStatus, MimeBundle,
    ProcessInfo, ProcessState, SandboxState, SandboxUsage,
};
use airlock_api::v1 as api;

use crate::registry::Entry;

/// Milliseconds, saturating.
pub fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms(at: SystemTime) -> u64 {
    millis(at.duration_since(UNIX_EPOCH).unwrap_or_default())
}

/// Signed milliseconds since the Unix epoch (a file may predate it).
pub fn unix_ms_signed(at: SystemTime) -> i64 {
    match at.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_millis()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_millis()).unwrap_or(i64::MAX),
    }
}

pub fn now_ms() -> u64 {
    unix_ms(SystemTime::now())
}

pub fn state(state: &SandboxState) -> api::SandboxState {
    match state {
        SandboxState::Running => api::SandboxState::Running,
        SandboxState::Paused => api::SandboxState::Paused,
        SandboxState::OnDisk => api::SandboxState::OnDisk,
        SandboxState::Ended(_) => api::SandboxState::Ended,
    }
}

pub fn usage(usage: &SandboxUsage) -> api::SandboxUsage {
    api::SandboxUsage {
        wall_ms: millis(usage.wall),
        running_ms: millis(usage.running),
        guest_cpu_ms: millis(usage.guest_cpu),
    }
}

/// How a sandbox started, as `SandboxInfo.origin` names it.
pub fn origin(origin: &airlock::Origin, pooled: bool) -> &'static str {
    use airlock::Origin;
    if pooled {
        return "pool";
    }
    match origin {
        Origin::Cold | Origin::ColdFallback { .. } => "cold",
        Origin::Clone { .. } => "clone",
        Origin::Restored { .. } => "restored",
        Origin::Fork { .. } => "fork",
        Origin::Snapshot { .. } => "snapshot",
        Origin::Adopted => "adopted",
        _ => "other",
    }
}

/// A sandbox as `Get`, `List` and the lifecycle calls answer it.
pub fn sandbox_info(entry: &Entry) -> api::SandboxInfo {
    let record = &entry.record;
    let sandbox_state = entry.state();
    let (usage, end_reason, ends_at_ms, origin) = match &entry.handle {
        Some(handle) => (
            usage(&handle.usage()),
            match &sandbox_state {
                SandboxState::Ended(reason) => reason.to_string(),
                _ => String::new(),
            },
            handle.ends_at().map_or(0, unix_ms),
            self::origin(handle.origin(), record.pooled).to_owned(),
        ),
        None => (
            api::SandboxUsage::default(),
            String::new(),
            record.ends_at_ms,
            "restored".to_owned(),
        ),
    };
    api::SandboxInfo {
        sandbox_id: record.id.clone(),
        state: state(&sandbox_state).into(),
        end_reason,
        metadata: record.metadata.clone().into_iter().collect(),
        image: record.image.clone(),
        template: record.template.clone(),
        memory_mib: record.memory_mib,
        vcpus: record.vcpus,
        created_at_ms: record.created_at_ms,
        ends_at_ms,
        usage: Some(usage),
        network: record.network,
        origin,
        owner: record.owner.clone().unwrap_or_default(),
        env_names: record.envs.keys().cloned().collect(),
        public_ports: record.public_ports.iter().map(|&p| u32::from(p)).collect(),
        workspace: record.workspace.clone(),
        snapshot: record.snapshot.clone(),
    }
}

pub fn exit(exit: &Exit) -> api::ProcessExit {
    let (exit_code, signal) = match exit.status {
        ExitStatus::Code(code) => (code, 0),
        ExitStatus::Signal(signal) => (-1, signal),
    };
    api::ProcessExit {
        exit_code,
        signal,
        timed_out: exit.timed_out,
        oom_killed: exit.oom_killed,
        duration_ms: millis(exit.duration),
    }
}

pub fn process_info(info: &ProcessInfo) -> api::ProcessInfo {
    let (running, exit) = match &info.state {
        ProcessState::Running => (true, None),
        ProcessState::Exited(ended) => (false, Some(self::exit(ended))),
        ProcessState::Unknown => (false, None),
    };
    api::ProcessInfo {
        pid: info.pid,
        tag: info.tag.clone().unwrap_or_default(),
        argv: info.argv.clone(),
        exit,
        running,
        attached: info.attached,
        output_bytes: info.output_bytes,
        held_from: info.held_from,
    }
}

pub fn file_type(kind: FileKind) -> api::FileType {
    match kind {
        FileKind::File => api::FileType::File,
        FileKind::Directory => api::FileType::Directory,
        FileKind::Symlink => api::FileType::Symlink,
        _ => api::FileType::Other,
    }
}

pub fn file_info(meta: &Metadata) -> api::FileInfo {
    api::FileInfo {
        path: meta.path.to_string_lossy().into_owned(),
        name: meta
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        r#type: file_type(meta.kind).into(),
        size: meta.size,
        mode: meta.mode,
        uid: meta.uid,
        gid: meta.gid,
        modified_at_ms: unix_ms_signed(meta.modified),
        symlink_target: meta
            .symlink_target
            .as_ref()
            .map(|t| t.to_string_lossy().into_owned())
            .unwrap_or_default(),
    }
}

pub fn watch_event(event: &WatchEvent) -> api::WatchEvent {
    let kind = match event.kind {
        WatchKind::Create => api::WatchEventType::Create,
        WatchKind::Modify => api::WatchEventType::Write,
        WatchKind::Delete => api::WatchEventType::Remove,
        WatchKind::RenameFrom => api::WatchEventType::RenameFrom,
        WatchKind::RenameTo => api::WatchEventType::RenameTo,
    };
    api::WatchEvent {
        r#type: kind.into(),
        path: event.path.to_string_lossy().into_owned(),
        is_dir: event.is_dir,
        cookie: event.cookie,
    }
}

pub fn change(change: &Change) -> api::FileChange {
    let kind = match change.kind {
        ChangeKind::Created => api::ChangeKind::Created,
        ChangeKind::Modified => api::ChangeKind::Modified,
        ChangeKind::Deleted => api::ChangeKind::Deleted,
    };
    api::FileChange {
        kind: kind.into(),
        path: change.path.to_string_lossy().into_owned(),
        r#type: file_type(change.file_kind).into(),
        size: change.size,
        previous_size: change.previous_size,
        modified_at_ms: unix_ms_signed(change.modified),
    }
}

fn mime(bundle: &MimeBundle, is_main_result: bool) -> api::CodeResult {
    api::CodeResult {
        items: bundle
            .iter()
            .map(|(mime_type, data)| api::MimeItem {
                mime_type: mime_type.to_owned(),
                data: data.clone(),
            })
            .collect(),
        is_main_result,
    }
}

fn done(done: &CellDone) -> api::CellDone {
    let status = match done.status {
        CellStatus::Ok => api::CellStatus::Ok,
        CellStatus::Error => api::CellStatus::Error,
        CellStatus::Interrupted => api::CellStatus::Interrupted,
    };
    api::CellDone {
        status: status.into(),
        execution_count: done.execution_count,
        timed_out: done.timed_out,
        context_restarted: done.context_restarted,
        duration_ms: millis(done.duration),
    }
}

/// A cell's event as a message.
pub fn cell_event(event: CellEvent) -> api::CodeEvent {
    use api::code_event::Event as E;
    let event = match event {
        CellEvent::Stdout(data) => E::Stdout(data),
        CellEvent::Stderr(data) => E::Stderr(data),
        CellEvent::Result(bundle) => E::Result(mime(&bundle, true)),
        CellEvent::Display(bundle) => E::Result(mime(&bundle, false)),
        CellEvent::Error(error) => E::Error(api::CodeError {
            name: error.name,
            value: error.value,
            traceback: error.traceback,
        }),
        CellEvent::Done(ended) => E::Done(done(&ended)),
    };
    api::CodeEvent { event: Some(event) }
}

pub fn context(info: &ContextInfo) -> api::CodeContext {
    api::CodeContext {
        context_id: info.id.clone(),
        language: info.language.as_str().to_owned(),
        language_version: info.language_version.clone(),
        busy: info.busy,
        execution_count: info.execution_count,
    }
}

pub fn audit_record(record: &AuditRecord) -> api::AuditRecord {
    api::AuditRecord {
        seq: record.seq,
        at_ms: unix_ms(record.at),
        protocol: record.protocol.to_string(),
        name: record.name.clone().unwrap_or_default(),
        addr: record.addr.map(|a| a.to_string()).unwrap_or_default(),
        port: u32::from(record.port),
        allowed: record.verdict.is_allowed(),
        verdict: record.verdict.to_string(),
    }
}

/// Output bytes as one `Output` message.
pub fn output(data: Bytes, offset: u64) -> api::Output {
    api::Output { data, offset }
}
