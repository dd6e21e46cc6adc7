"""Airlock's Python SDK: sandboxes (microVMs for untrusted code) in E2B's
vocabulary, blocking (:class:`Sandbox`) and asyncio (:class:`AsyncSandbox`).

Layout: :mod:`airlock.connection` finds the server (``AIRLOCK_HOST``,
``AIRLOCK_API_KEY``, ``AIRLOCK_CA_CERT``, else the local Unix socket,
starting the local server on demand); :mod:`airlock._client` holds the
gRPC channels and the stubs generated at build time into
:mod:`airlock.api.v1`, and makes every call; :mod:`airlock.sandbox` is the
core both clients share, everything but the calls (requests, answers as
models, output decoding, checks of arguments), one module per part of the
API; :mod:`airlock.sandbox_sync` and :mod:`airlock.sandbox_async` are the
two clients, module by module, holding only the calls (blocking, or
awaited), with :class:`Template` and :class:`AsyncTemplate` (templates
built through the API) and :class:`Usage` and :class:`AsyncUsage` (the
server's usage ledger); errors are :mod:`airlock.exceptions`, the data
types :mod:`airlock.models`.
"""

from .connection import ConnectionConfig
from .exceptions import (
    AlreadyExistsException,
    AuthenticationException,
    BuildException,
    CommandExitException,
    FileNotFoundException,
    InvalidArgumentException,
    NotEnoughSpaceException,
    NotFoundException,
    RateLimitException,
    SandboxException,
    SandboxNotFoundException,
    TimeoutException,
)
from .models.code import Context, Execution, ExecutionError, Logs, OutputMessage, Result
from .models.commands import CommandResult, ProcessInfo, PtySize
from .models.files import (
    ChangeKind,
    ChangeList,
    EntryInfo,
    FileChange,
    FilesystemEvent,
    FilesystemEventType,
    FileType,
    WriteEntry,
    WriteInfo,
)
from .models.ingress import ExposedPort
from .models.network import ALL_TRAFFIC, AuditRecord, NetworkPolicy
from .models.sandbox import SandboxInfo, SandboxMetrics, SandboxQuery, SandboxState, Secret
from .models.snapshot import SnapshotInfo
from .models.usage import UsageRow
from .models.template import (
    LogEntry,
    LogEntryEnd,
    LogEntryLevel,
    LogEntryStart,
    ReadyCmd,
    TemplateInfo,
    wait_for_file,
    wait_for_port,
    wait_for_process,
    wait_for_timeout,
    wait_for_url,
)
from .sandbox.templates import TemplateBase
from .sandbox_async.command_handle import AsyncCommandHandle
from .sandbox_async.files import AsyncChangeTracker, AsyncWatchHandle
from .sandbox_async.main import AsyncSandbox, AsyncSandboxPaginator
from .sandbox_async.snapshots import AsyncSnapshotPaginator
from .sandbox_async.template import AsyncTemplate
from .sandbox_async.usage import AsyncUsage
from .sandbox_sync.command_handle import CommandHandle
from .sandbox_sync.files import ChangeTracker, WatchHandle
from .sandbox_sync.main import Sandbox, SandboxPaginator
from .sandbox_sync.snapshots import SnapshotPaginator
from .sandbox_sync.template import Template
from .sandbox_sync.usage import Usage

__version__ = "0.1.0"

__all__ = [
    "ALL_TRAFFIC",
    "AlreadyExistsException",
    "AsyncChangeTracker",
    "AsyncCommandHandle",
    "AsyncSandbox",
    "AsyncSandboxPaginator",
    "AsyncSnapshotPaginator",
    "AsyncTemplate",
    "AsyncUsage",
    "AsyncWatchHandle",
    "AuditRecord",
    "AuthenticationException",
    "BuildException",
    "ChangeKind",
    "ChangeList",
    "ChangeTracker",
    "CommandExitException",
    "CommandHandle",
    "CommandResult",
    "ConnectionConfig",
    "Context",
    "EntryInfo",
    "Execution",
    "ExecutionError",
    "ExposedPort",
    "FileChange",
    "FileNotFoundException",
    "FileType",
    "FilesystemEvent",
    "FilesystemEventType",
    "InvalidArgumentException",
    "LogEntry",
    "LogEntryEnd",
    "LogEntryLevel",
    "LogEntryStart",
    "Logs",
    "NetworkPolicy",
    "NotEnoughSpaceException",
    "NotFoundException",
    "OutputMessage",
    "ProcessInfo",
    "PtySize",
    "RateLimitException",
    "ReadyCmd",
    "Result",
    "Sandbox",
    "SandboxException",
    "SandboxInfo",
    "SandboxMetrics",
    "SandboxNotFoundException",
    "SandboxPaginator",
    "SandboxQuery",
    "SandboxState",
    "Secret",
    "SnapshotInfo",
    "SnapshotPaginator",
    "Template",
    "TemplateBase",
    "TemplateInfo",
    "TimeoutException",
    "Usage",
    "UsageRow",
    "WatchHandle",
    "WriteEntry",
    "WriteInfo",
    "wait_for_file",
    "wait_for_port",
    "wait_for_process",
    "wait_for_timeout",
    "wait_for_url",
]
