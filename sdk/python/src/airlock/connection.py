"""Where the Airlock server is: :class:`ConnectionConfig`.

A remote server comes from ``host=`` or ``AIRLOCK_HOST`` (``https://HOST:PORT``;
plain ``http://`` only to a loopback address), with its key from ``api_key=``
or ``AIRLOCK_API_KEY`` (sent as ``authorization: Bearer KEY``) and, for a
certificate from a private CA, ``ca_cert=`` or ``AIRLOCK_CA_CERT`` (a PEM
file). With no host, the SDK talks to the local server on its Unix socket,
``daemon.sock`` under ``$AIRLOCK_STATE_DIR``, else ``$XDG_RUNTIME_DIR/airlock``,
else ``$TMPDIR/airlock`` (``/tmp/airlock``), and starts that server when nobody
answers there, as the ``airlock`` CLI does (:mod:`airlock._local`).
"""

from __future__ import annotations

import ipaddress
import os
import tempfile
from dataclasses import dataclass
from typing import ClassVar, Optional, Tuple
from urllib.parse import urlsplit

from .exceptions import InvalidArgumentException

HOST_ENV = "AIRLOCK_HOST"
API_KEY_ENV = "AIRLOCK_API_KEY"
CA_CERT_ENV = "AIRLOCK_CA_CERT"
#: The ``airlock`` binary that serves the local socket (else found on PATH).
BIN_ENV = "AIRLOCK_BIN"
STATE_DIR_ENV = "AIRLOCK_STATE_DIR"
SOCKET_NAME = "daemon.sock"


def default_socket() -> str:
    """The local server's socket, as the CLI computes it."""
    base = os.environ.get(STATE_DIR_ENV)
    if not base:
        runtime = os.environ.get("XDG_RUNTIME_DIR")
        base = os.path.join(runtime, "airlock") if runtime else os.path.join(
            tempfile.gettempdir(), "airlock"
        )
    return os.path.join(base, SOCKET_NAME)


def _is_loopback(host: str) -> bool:
    bare = host.strip("[]")
    if bare == "localhost":
        return True
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Remote:
    """A server on TCP."""

    #: ``host:port`` as gRPC dials it.
    address: str
    hostname: str
    tls: bool
    url: str


def parse_host(host: str) -> Remote:
    """``https://HOST:PORT``, ``HOST:PORT`` (https) or ``http://`` to a
    loopback address."""
    text = host.strip()
    if "://" not in text:
        text = f"https://{text}"
    parts = urlsplit(text)
    if not parts.hostname:
        raise InvalidArgumentException(f"{HOST_ENV} {host!r} names no host", field="host")
    if parts.scheme == "https":
        tls = True
    elif parts.scheme == "http" and _is_loopback(parts.hostname):
        tls = False
    elif parts.scheme == "http":
        raise InvalidArgumentException(
            f"{host}: plain http only to a loopback address; use https://", field="host"
        )
    else:
        raise InvalidArgumentException(
            f"{host}: the scheme is https:// (or http:// to a loopback address)", field="host"
        )
    try:
        port = parts.port or (443 if tls else 80)
    except ValueError as error:
        raise InvalidArgumentException(f"{host}: {error}", field="host") from None
    name = parts.hostname
    dial = f"[{name}]:{port}" if ":" in name else f"{name}:{port}"
    return Remote(address=dial, hostname=name, tls=tls, url=f"{parts.scheme}://{dial}")


@dataclass(frozen=True)
class ConnectionConfig:
    """How to reach a server; :meth:`resolve` fills what the arguments leave
    out from the environment."""

    #: A remote server, or ``None`` for the local one.
    remote: Optional[Remote]
    api_key: Optional[str]
    ca_cert: Optional[str]
    #: The local server's socket.
    socket: str
    #: The binary that starts the local server (``None``: from PATH).
    airlock_bin: Optional[str]
    #: The default deadline of a call, in seconds (``None``: none).
    request_timeout: Optional[float]

    #: What :meth:`set_integration` set: added to the user agent of channels
    #: made from then on.
    _integration: ClassVar[Optional[str]] = None

    @classmethod
    def set_integration(cls, integration: Optional[str]) -> None:
        """Names a library wrapping the SDK (``"my-agent/1.0"``, E2B's call of
        the same name): sandboxes created or connected from then on call
        through a channel that adds it to its gRPC user agent (a channel's
        user agent is fixed when it is made). Call it once at start-up;
        ``None`` clears it."""
        ConnectionConfig._integration = integration or None

    @classmethod
    def integration(cls) -> Optional[str]:
        """What :meth:`set_integration` set, if anything."""
        return ConnectionConfig._integration

    @classmethod
    def resolve(
        cls,
        host: Optional[str] = None,
        api_key: Optional[str] = None,
        ca_cert: Optional[str] = None,
        socket: Optional[str] = None,
        airlock_bin: Optional[str] = None,
        request_timeout: Optional[float] = None,
    ) -> "ConnectionConfig":
        host = host if host is not None else os.environ.get(HOST_ENV)
        remote = parse_host(host) if host and host.strip() else None
        key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        ca = ca_cert if ca_cert is not None else os.environ.get(CA_CERT_ENV)
        return cls(
            remote=remote,
            api_key=key or None,
            ca_cert=ca or None,
            socket=os.path.abspath(socket or default_socket()),
            airlock_bin=airlock_bin or os.environ.get(BIN_ENV) or None,
            request_timeout=request_timeout,
        )

    @property
    def endpoint(self) -> str:
        """Where it points, for messages (never the key)."""
        return self.remote.url if self.remote else self.socket

    @property
    def target(self) -> str:
        """The gRPC target."""
        return self.remote.address if self.remote else f"unix:{self.socket}"

    @property
    def metadata(self) -> Tuple[Tuple[str, str], ...]:
        """What every call carries: the key, if any."""
        if self.api_key is None:
            return ()
        return (("authorization", f"Bearer {self.api_key}"),)

    def timeout(self, request_timeout: Optional[float]) -> Optional[float]:
        """A call's deadline: its own, else the configured default."""
        return request_timeout if request_timeout is not None else self.request_timeout

    def __repr__(self) -> str:
        key = "<key>" if self.api_key else None
        return f"ConnectionConfig(endpoint={self.endpoint!r}, api_key={key}, ca_cert={self.ca_cert!r})"
