"""What the blocking and the asyncio ``Sandbox`` share that is not a call:
connection options, the listing query, and the pause decision."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Union

from typing_extensions import TypedDict

from . import _convert
from .api.v1 import sandboxes_pb2
from .connection import ConnectionConfig
from .models.sandbox import SandboxQuery, SandboxState


class ConnectionOpts(TypedDict, total=False):
    """Where the server is, for calls that take a sandbox id (see
    :class:`airlock.connection.ConnectionConfig`); unset ones come from the
    environment."""

    host: Optional[str]
    api_key: Optional[str]
    ca_cert: Optional[str]
    socket: Optional[str]
    airlock_bin: Optional[str]
    request_timeout: Optional[float]


def config(opts: ConnectionOpts) -> ConnectionConfig:
    return ConnectionConfig.resolve(
        host=opts.get("host"),
        api_key=opts.get("api_key"),
        ca_cert=opts.get("ca_cert"),
        socket=opts.get("socket"),
        airlock_bin=opts.get("airlock_bin"),
        request_timeout=opts.get("request_timeout"),
    )


def list_request(
    metadata: Optional[Dict[str, str]],
    state: Optional[Union[SandboxState, str, Sequence[Union[SandboxState, str]]]],
    query: Optional[SandboxQuery],
    limit: Optional[int],
    next_token: Optional[str],
) -> sandboxes_pb2.ListSandboxesRequest:
    if query is not None:
        metadata = metadata or query.metadata
        state = state or query.state
    states: List[Union[SandboxState, str]] = []
    if isinstance(state, (SandboxState, str)):
        states = [state]
    elif state is not None:
        states = list(state)
    return sandboxes_pb2.ListSandboxesRequest(
        metadata=dict(metadata or {}),
        states=[_convert.state_value(s) for s in states],
        page_size=limit or 0,
        page_token=next_token or "",
    )


def should_pause(state: SandboxState, to_disk: bool) -> bool:
    """Whether a pause changes anything (E2B's ``pause`` says ``False``
    for a sandbox paused already)."""
    if state == SandboxState.RUNNING:
        return True
    return state == SandboxState.PAUSED and to_disk
