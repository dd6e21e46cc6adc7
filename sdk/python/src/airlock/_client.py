"""Connections: one gRPC channel per server (and, for asyncio, per event
loop), shared by every sandbox object that talks to it, with the
generated stubs of each service.

:class:`Client` is the blocking one (``grpc``), :class:`AsyncClient` the
asyncio one (``grpc.aio``). Both make every call of the SDK: ``call`` a
unary one (or one that sends a stream) with the key and the deadline,
turning a failure into the SDK's exceptions
(:func:`airlock.exceptions.from_rpc_error`); ``open`` one whose answers
stream, with the key, for the caller to read.
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from typing import Any, Awaitable, Dict, List, Optional, Tuple, TypeVar

import grpc
from grpc import aio
from typing_extensions import Protocol

from ._errors import arpc, rpc
from ._local import ensure_local_server
from .api.v1 import (
    code_pb2_grpc,
    files_pb2_grpc,
    ingress_pb2_grpc,
    network_pb2_grpc,
    processes_pb2_grpc,
    sandboxes_pb2_grpc,
    templates_pb2_grpc,
    usage_pb2_grpc,
)
from .connection import ConnectionConfig
from .exceptions import SandboxException
from .sandbox.limits import MAX_MESSAGE_BYTES

Q = TypeVar("Q", contravariant=True)
R = TypeVar("R", covariant=True)
T = TypeVar("T")
Metadata = Tuple[Tuple[str, str], ...]


class Method(Protocol[Q, R]):
    """A method of a generated stub, as the SDK calls it: a request (or a
    stream of them), the key as metadata, and a deadline."""

    def __call__(
        self, request: Q, /, *, timeout: Optional[float] = ..., metadata: Optional[Metadata] = ...
    ) -> R: ...


def _options(config: ConnectionConfig) -> List[Tuple[str, Any]]:
    options: List[Tuple[str, Any]] = [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.keepalive_time_ms", 20_000),
        ("grpc.keepalive_timeout_ms", 20_000),
        ("grpc.http2.max_pings_without_data", 0),
    ]
    integration = ConnectionConfig.integration()
    if integration:
        options.append(("grpc.primary_user_agent", f"airlock-sdk-python {integration}"))
    if config.remote is None:
        # gRPC would send the socket's path as :authority, which HTTP/2
        # servers refuse as malformed.
        options.append(("grpc.default_authority", "localhost"))
    if config.remote is None or config.remote.hostname in ("localhost", "127.0.0.1", "::1"):
        # A loopback or Unix socket server is never behind a proxy.
        options.append(("grpc.enable_http_proxy", 0))
    return options


def _credentials(config: ConnectionConfig) -> Optional[grpc.ChannelCredentials]:
    if config.remote is None or not config.remote.tls:
        return None
    roots: Optional[bytes] = None
    if config.ca_cert:
        try:
            with open(config.ca_cert, "rb") as pem:
                roots = pem.read()
        except OSError as error:
            raise SandboxException(
                f"cannot read the CA certificate {config.ca_cert} (AIRLOCK_CA_CERT): {error}"
            ) from None
        if b"BEGIN CERTIFICATE" not in roots:
            raise SandboxException(f"{config.ca_cert} (AIRLOCK_CA_CERT) holds no PEM certificate")
    return grpc.ssl_channel_credentials(root_certificates=roots)


#: A cached channel's key: the server, the CA, the process, the integration.
_ChannelKey = Tuple[str, Optional[str], int, Optional[str]]


def _key(config: ConnectionConfig) -> _ChannelKey:
    """Which cached channel serves `config`: one per server, CA, process and
    integration (a channel's user agent is fixed when it is made, so a name
    :meth:`ConnectionConfig.set_integration` sets later gets a new one)."""
    return (config.target, config.ca_cert, os.getpid(), ConnectionConfig.integration())


def _prepare(config: ConnectionConfig) -> None:
    if config.remote is None:
        ensure_local_server(config.socket, config.airlock_bin)


class Client:
    """A blocking connection to a server."""

    _lock = threading.Lock()
    _channels: Dict[_ChannelKey, grpc.Channel] = {}

    def __init__(self, config: ConnectionConfig) -> None:
        self.config = config
        self.metadata = config.metadata
        key = _key(config)
        with Client._lock:
            channel = Client._channels.get(key)
            if channel is None:
                _prepare(config)
                credentials = _credentials(config)
                if credentials is None:
                    channel = grpc.insecure_channel(config.target, _options(config))
                else:
                    channel = grpc.secure_channel(config.target, credentials, _options(config))
                Client._channels[key] = channel
        self.channel = channel
        self.sandboxes = sandboxes_pb2_grpc.SandboxesStub(channel)
        self.processes = processes_pb2_grpc.ProcessesStub(channel)
        self.files = files_pb2_grpc.FilesStub(channel)
        self.code = code_pb2_grpc.CodeStub(channel)
        self.network = network_pb2_grpc.NetworkStub(channel)
        self.ingress = ingress_pb2_grpc.IngressStub(channel)
        self.templates = templates_pb2_grpc.TemplatesStub(channel)
        self.usage = usage_pb2_grpc.UsageStub(channel)

    def timeout(self, request_timeout: Optional[float]) -> Optional[float]:
        return self.config.timeout(request_timeout)

    @property
    def endpoint(self) -> str:
        return self.config.endpoint

    def call(
        self, method: Method[Q, T], request: Q, request_timeout: Optional[float] = None, *, timed: bool = True
    ) -> T:
        """`method` with `request` and the key, within ``request_timeout``
        (else the configured default; ``timed=False``: no deadline)."""
        with rpc(self.endpoint):
            if not timed:
                return method(request, metadata=self.metadata)
            return method(request, metadata=self.metadata, timeout=self.timeout(request_timeout))

    def open(self, method: Method[Q, T], request: Q) -> T:
        """`method`'s call with `request` and the key, its answers to be
        read (in :func:`airlock._errors.rpc`)."""
        return method(request, metadata=self.metadata)


_async_channels: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Dict[_ChannelKey, aio.Channel]]" = (
    weakref.WeakKeyDictionary()
)


class AsyncClient:
    """An asyncio connection to a server, for the running event loop."""

    def __init__(self, config: ConnectionConfig, channel: aio.Channel) -> None:
        self.config = config
        self.metadata = config.metadata
        self.channel = channel
        self.sandboxes = sandboxes_pb2_grpc.SandboxesStub(channel)
        self.processes = processes_pb2_grpc.ProcessesStub(channel)
        self.files = files_pb2_grpc.FilesStub(channel)
        self.code = code_pb2_grpc.CodeStub(channel)
        self.network = network_pb2_grpc.NetworkStub(channel)
        self.ingress = ingress_pb2_grpc.IngressStub(channel)
        self.templates = templates_pb2_grpc.TemplatesStub(channel)
        self.usage = usage_pb2_grpc.UsageStub(channel)

    @classmethod
    async def connect(cls, config: ConnectionConfig) -> "AsyncClient":
        loop = asyncio.get_running_loop()
        channels = _async_channels.setdefault(loop, {})
        key = _key(config)
        channel = channels.get(key)
        if channel is None:
            if config.remote is None:
                await loop.run_in_executor(None, _prepare, config)
            credentials = _credentials(config)
            channel = channels.get(key)
            if channel is None:
                if credentials is None:
                    channel = aio.insecure_channel(config.target, _options(config))
                else:
                    channel = aio.secure_channel(config.target, credentials, _options(config))
                channels[key] = channel
        return cls(config, channel)

    def timeout(self, request_timeout: Optional[float]) -> Optional[float]:
        return self.config.timeout(request_timeout)

    @property
    def endpoint(self) -> str:
        return self.config.endpoint

    async def call(
        self,
        method: Method[Q, Awaitable[T]],
        request: Q,
        request_timeout: Optional[float] = None,
        *,
        timed: bool = True,
    ) -> T:
        """`method` with `request` and the key, awaited within
        ``request_timeout`` (else the configured default; ``timed=False``:
        no deadline)."""
        async with arpc(self.endpoint):
            if not timed:
                return await method(request, metadata=self.metadata)
            return await method(request, metadata=self.metadata, timeout=self.timeout(request_timeout))

    def open(self, method: Method[Q, T], request: Q) -> T:
        """`method`'s call with `request` and the key, its answers to be
        read (in :func:`airlock._errors.arpc`)."""
        return method(request, metadata=self.metadata)
