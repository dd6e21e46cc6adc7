"""The one place where the API's messages become the SDK's models and the
SDK's arguments become requests; the blocking and the asyncio clients both
use it, so they cannot drift apart."""

from __future__ import annotations

import base64
import json
import os.path
import stat
import time
from datetime import datetime, timezone
from typing import Dict, List, Mapping, Optional, Sequence

from .api.v1 import (
    code_pb2,
    files_pb2,
    ingress_pb2,
    network_pb2,
    processes_pb2,
    sandboxes_pb2,
)
from .exceptions import InvalidArgumentException
from .models.code import Context, ExecutionError, Result
from .models.commands import CommandResult, ProcessInfo, PtySize
from .models.files import (
    ChangeKind,
    EntryInfo,
    FileChange,
    FilesystemEvent,
    FilesystemEventType,
    FileType,
)
from .models.ingress import ExposedPort
from .models.network import AuditRecord, NetworkPolicy
from .models.sandbox import SandboxInfo, SandboxMetrics, SandboxState, Secret

# -- time ---------------------------------------------------------------


def from_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def now_ns() -> int:
    return time.time_ns()


# -- sandboxes ----------------------------------------------------------

_STATES: Dict[int, SandboxState] = {
    sandboxes_pb2.SANDBOX_STATE_RUNNING: SandboxState.RUNNING,
    sandboxes_pb2.SANDBOX_STATE_PAUSED: SandboxState.PAUSED,
    sandboxes_pb2.SANDBOX_STATE_ON_DISK: SandboxState.ON_DISK,
    sandboxes_pb2.SANDBOX_STATE_ENDED: SandboxState.ENDED,
}
_STATE_VALUES: Dict[SandboxState, "sandboxes_pb2.SandboxState.ValueType"] = {
    SandboxState.RUNNING: sandboxes_pb2.SANDBOX_STATE_RUNNING,
    SandboxState.PAUSED: sandboxes_pb2.SANDBOX_STATE_PAUSED,
    SandboxState.ON_DISK: sandboxes_pb2.SANDBOX_STATE_ON_DISK,
    SandboxState.ENDED: sandboxes_pb2.SANDBOX_STATE_ENDED,
}


def state(value: int) -> SandboxState:
    return _STATES.get(value, SandboxState.ENDED)


def state_value(value: "SandboxState | str") -> "sandboxes_pb2.SandboxState.ValueType":
    try:
        return _STATE_VALUES[SandboxState(value)]
    except ValueError:
        names = ", ".join(s.value for s in SandboxState)
        raise InvalidArgumentException(
            f"state {value!r} is not one of {names}", field="state"
        ) from None


def sandbox_info(info: sandboxes_pb2.SandboxInfo) -> SandboxInfo:
    return SandboxInfo(
        sandbox_id=info.sandbox_id,
        template_id=info.template,
        name=info.image or None,
        metadata=dict(info.metadata),
        started_at=from_ms(info.created_at_ms),
        end_at=from_ms(info.ends_at_ms) if info.ends_at_ms else None,
        state=state(info.state),
        cpu_count=info.vcpus,
        memory_mb=info.memory_mib,
        end_reason=info.end_reason,
        network=info.network,
        origin=info.origin,
        owner=info.owner,
        env_names=list(info.env_names),
        wall_ms=info.usage.wall_ms,
        running_ms=info.usage.running_ms,
        guest_cpu_ms=info.usage.guest_cpu_ms,
        public_ports=list(info.public_ports),
    )


def metrics(figures: sandboxes_pb2.SandboxMetrics, vcpus: int) -> SandboxMetrics:
    usage = figures.usage
    running = max(usage.running_ms, 1)
    cpus = max(vcpus, 1)
    return SandboxMetrics(
        timestamp=from_ms(figures.at_ms),
        cpu_count=vcpus,
        cpu_used_pct=round(100.0 * usage.guest_cpu_ms / running / cpus, 2),
        mem_total=figures.memory_total_bytes,
        mem_used=max(figures.memory_total_bytes - figures.memory_available_bytes, 0),
        programs_cpu_ms=figures.programs_cpu_ms,
        programs_memory_bytes=figures.programs_memory_bytes,
        wall_ms=usage.wall_ms,
        running_ms=usage.running_ms,
        guest_cpu_ms=usage.guest_cpu_ms,
    )


def create_request(
    *,
    template: Optional[str] = None,
    image: Optional[str] = None,
    timeout: Optional[int] = None,
    metadata: Optional[Mapping[str, str]] = None,
    envs: Optional[Mapping[str, str]] = None,
    memory_mb: Optional[int] = None,
    vcpus: Optional[int] = None,
    allow_net: Optional[Sequence[str]] = None,
    secrets: Optional[Sequence[Secret]] = None,
    no_image: bool = False,
    cold: bool = False,
    workspace: Optional[str] = None,
    ca_certs: Optional[Sequence[str]] = None,
    allow_internet_access: Optional[bool] = None,
    public_ports: Optional[Sequence[int]] = None,
) -> sandboxes_pb2.CreateSandboxRequest:
    if allow_internet_access:
        raise InvalidArgumentException(
            "allow_internet_access=True: an Airlock sandbox has no network unless rules "
            "allow it; pass allow_net=['example.com', '*.example.org:443', ...] instead",
            field="allow_net",
        )
    request = sandboxes_pb2.CreateSandboxRequest(
        image=image or "",
        no_image=no_image,
        template=template or "",
        memory_mib=memory_mb or 0,
        vcpus=vcpus or 0,
        cold=cold,
        metadata=dict(metadata or {}),
        envs=dict(envs or {}),
        allow_net=list(allow_net or []),
        workspace=workspace or "",
        ca_certs=list(ca_certs or []),
        public_ports=[guest_port(p, "public_ports") for p in public_ports or []],
    )
    if timeout is not None:
        request.timeout_secs = int(timeout)
    for secret in secrets or []:
        request.secrets.append(
            sandboxes_pb2.Secret(name=secret.name, value=secret.value, hosts=list(secret.hosts))
        )
    return request


# -- ingress ------------------------------------------------------------

PORT_MIN, PORT_MAX = 1, 65535


def guest_port(port: object, field: str = "port") -> int:
    """`port` as the API's guest port, refused here when it cannot be one
    (the server would refuse it too, with less to go on)."""
    if isinstance(port, bool) or not isinstance(port, int):
        raise InvalidArgumentException(
            f"{field}: {port!r} is not a port number; give an int from {PORT_MIN} to {PORT_MAX}",
            field=field,
        )
    if not PORT_MIN <= port <= PORT_MAX:
        raise InvalidArgumentException(
            f"{field}: {port} is not a TCP port; give one from {PORT_MIN} to {PORT_MAX}",
            field=field,
        )
    return port


def get_host_request(sandbox_id: str, port: int) -> ingress_pb2.GetHostRequest:
    return ingress_pb2.GetHostRequest(sandbox_id=sandbox_id, port=guest_port(port))


def exposed_port(port: int, found: ingress_pb2.GetHostResponse) -> ExposedPort:
    return ExposedPort(
        port=port,
        host=found.host,
        url=found.url,
        token=found.token,
        public=found.public,
        path_url=found.path_url,
        address=found.address,
    )


# -- commands -----------------------------------------------------------


def shell(cmd: str) -> List[str]:
    """A command line as the API runs one."""
    return ["/bin/sh", "-c", cmd]


def start_request(
    *,
    sandbox_id: str,
    argv: Sequence[str],
    envs: Optional[Mapping[str, str]],
    cwd: Optional[str],
    user: Optional[str],
    timeout: Optional[float],
    stdin: bool,
    pty: Optional[PtySize] = None,
    tag: Optional[str] = None,
    kill_on_disconnect: bool = False,
) -> processes_pb2.ProcessInput:
    start = processes_pb2.StartProcess(
        sandbox_id=sandbox_id,
        argv=list(argv),
        envs=dict(envs or {}),
        cwd=cwd or "",
        user=user or "",
        stdin=stdin,
        tag=tag or "",
        kill_on_disconnect=kill_on_disconnect,
    )
    if timeout:
        start.timeout_secs = float(timeout)
    if pty is not None:
        start.pty.CopyFrom(processes_pb2.TerminalSize(rows=pty.rows, cols=pty.cols))
    return processes_pb2.ProcessInput(start=start)


def selector(pid: int) -> processes_pb2.ProcessSelector:
    return processes_pb2.ProcessSelector(pid=pid)


def exit_error(exit: processes_pb2.ProcessExit) -> Optional[str]:
    """Why a program ended other than by exiting, as words."""
    if exit.timed_out:
        return "timed out"
    if exit.oom_killed:
        return "killed by the out-of-memory killer"
    if exit.signal:
        return f"signal: {exit.signal}"
    return None


def command_result(stdout: str, stderr: str, exit: processes_pb2.ProcessExit) -> CommandResult:
    return CommandResult(
        stdout=stdout,
        stderr=stderr,
        exit_code=exit.exit_code,
        error=exit_error(exit),
        signal=exit.signal,
        timed_out=exit.timed_out,
        oom_killed=exit.oom_killed,
        duration_ms=exit.duration_ms,
    )


def process_info(info: processes_pb2.ProcessInfo) -> ProcessInfo:
    argv = list(info.argv)
    return ProcessInfo(
        pid=info.pid,
        tag=info.tag or None,
        cmd=argv[0] if argv else "",
        args=argv[1:],
        running=info.running,
        exit_code=info.exit.exit_code if info.HasField("exit") else None,
        attached=info.attached,
        output_bytes=info.output_bytes,
        held_from=info.held_from,
    )


# -- files --------------------------------------------------------------

_FILE_TYPES: Dict[int, FileType] = {
    files_pb2.FILE_TYPE_FILE: FileType.FILE,
    files_pb2.FILE_TYPE_DIRECTORY: FileType.DIR,
    files_pb2.FILE_TYPE_SYMLINK: FileType.SYMLINK,
    files_pb2.FILE_TYPE_OTHER: FileType.OTHER,
}

_TYPE_CHARS = {FileType.FILE: "-", FileType.DIR: "d", FileType.SYMLINK: "l", FileType.OTHER: "?"}


def file_type(value: int) -> FileType:
    return _FILE_TYPES.get(value, FileType.OTHER)


def entry_info(info: files_pb2.FileInfo) -> EntryInfo:
    kind = file_type(info.type)
    return EntryInfo(
        name=info.name,
        type=kind,
        path=info.path,
        size=info.size,
        mode=info.mode,
        permissions=_TYPE_CHARS[kind] + stat.filemode(info.mode)[1:],
        owner=str(info.uid),
        group=str(info.gid),
        modified_time=from_ms(info.modified_at_ms),
        symlink_target=info.symlink_target or None,
        uid=info.uid,
        gid=info.gid,
    )


_WATCH_TYPES: Dict[int, FilesystemEventType] = {
    files_pb2.WATCH_EVENT_TYPE_CREATE: FilesystemEventType.CREATE,
    files_pb2.WATCH_EVENT_TYPE_WRITE: FilesystemEventType.WRITE,
    files_pb2.WATCH_EVENT_TYPE_REMOVE: FilesystemEventType.REMOVE,
    files_pb2.WATCH_EVENT_TYPE_RENAME_FROM: FilesystemEventType.RENAME,
    files_pb2.WATCH_EVENT_TYPE_RENAME_TO: FilesystemEventType.RENAME,
}


def watch_event(event: files_pb2.WatchEvent, root: str) -> FilesystemEvent:
    kind = _WATCH_TYPES.get(event.type, FilesystemEventType.CHMOD)
    try:
        name = os.path.relpath(event.path, root)
    except ValueError:
        name = event.path
    return FilesystemEvent(
        name=name, type=kind, path=event.path, is_dir=event.is_dir, cookie=event.cookie
    )


_CHANGE_KINDS: Dict[int, ChangeKind] = {
    files_pb2.CHANGE_KIND_CREATED: ChangeKind.CREATED,
    files_pb2.CHANGE_KIND_MODIFIED: ChangeKind.MODIFIED,
    files_pb2.CHANGE_KIND_DELETED: ChangeKind.DELETED,
}


def file_change(change: files_pb2.FileChange) -> FileChange:
    return FileChange(
        kind=_CHANGE_KINDS.get(change.kind, ChangeKind.MODIFIED),
        path=change.path,
        type=file_type(change.type),
        size=change.size,
        previous_size=change.previous_size,
        modified_time=from_ms(change.modified_at_ms) if change.modified_at_ms else None,
    )


def text_bytes(data: "str | bytes | bytearray | memoryview") -> bytes:
    return data.encode() if isinstance(data, str) else bytes(data)


# -- code ---------------------------------------------------------------

_TEXT_FIELDS = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "text/latex": "latex",
    "application/javascript": "javascript",
}
_BINARY_FIELDS = {"image/png": "png", "image/jpeg": "jpeg", "application/pdf": "pdf"}


def code_result(result: code_pb2.CodeResult) -> Result:
    out = Result(is_main_result=result.is_main_result)
    extra: Dict[str, str] = {}
    for item in result.items:
        mime, data = item.mime_type, bytes(item.data)
        if mime in _TEXT_FIELDS:
            setattr(out, _TEXT_FIELDS[mime], data.decode(errors="replace"))
        elif mime in _BINARY_FIELDS:
            setattr(out, _BINARY_FIELDS[mime], base64.b64encode(data).decode())
        elif mime == "application/json":
            try:
                out.json = json.loads(data)
            except ValueError:
                extra[mime] = data.decode(errors="replace")
        else:
            try:
                extra[mime] = data.decode()
            except UnicodeDecodeError:
                extra[mime] = base64.b64encode(data).decode()
    out.extra = extra or None
    return out


def execution_error(error: code_pb2.CodeError) -> ExecutionError:
    return ExecutionError(name=error.name, value=error.value, traceback="\n".join(error.traceback))


def context(ctx: code_pb2.CodeContext, cwd: Optional[str] = None) -> Context:
    return Context(
        id=ctx.context_id,
        language=ctx.language,
        cwd=cwd,
        language_version=ctx.language_version,
        busy=ctx.busy,
        execution_count=ctx.execution_count,
    )


def context_id(ctx: "Context | str | None") -> str:
    if ctx is None:
        return ""
    return ctx if isinstance(ctx, str) else ctx.id


# -- network ------------------------------------------------------------


def policy(value: network_pb2.NetworkPolicy) -> NetworkPolicy:
    return NetworkPolicy(
        rules=list(value.rules),
        secrets={secret.name: list(secret.hosts) for secret in value.secrets},
    )


def audit_record(record: network_pb2.AuditRecord) -> AuditRecord:
    return AuditRecord(
        seq=record.seq,
        at=from_ms(record.at_ms),
        protocol=record.protocol,
        name=record.name,
        addr=record.addr,
        port=record.port,
        allowed=record.allowed,
        verdict=record.verdict,
    )
