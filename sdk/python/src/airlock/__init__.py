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
awaited); errors are :mod:`airlock.exceptions`, the data types
:mod:`airlock.models`.
"""

from .connection import ConnectionConfig
from .exceptions import (
    AlreadyExistsException,
    AuthenticationException,
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
from .sandbox_async.command_handle import AsyncCommandHandle
from .sandbox_async.files import AsyncChangeTracker, AsyncWatchHandle
from .sandbox_async.main import AsyncSandbox, AsyncSandboxPaginator
from .sandbox_sync.command_handle import CommandHandle
from .sandbox_sync.files import ChangeTracker, WatchHandle
from .sandbox_sync.main import Sandbox, SandboxPaginator

__version__ = "0.1.0"

__all__ = [
    "ALL_TRAFFIC",
    "AsyncChangeTracker",
    "AsyncCommandHandle",
    "AsyncSandbox",
    "AsyncSandboxPaginator",
    "AsyncWatchHandle",
    "AlreadyExistsException",
    "AuditRecord",
    "AuthenticationException",
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
    "Logs",
    "NetworkPolicy",
    "NotEnoughSpaceException",
    "NotFoundException",
    "OutputMessage",
    "ProcessInfo",
    "PtySize",
    "RateLimitException",
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
    "TimeoutException",
    "WatchHandle",
    "WriteEntry",
    "WriteInfo",
]
