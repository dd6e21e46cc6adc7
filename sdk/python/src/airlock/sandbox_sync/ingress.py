"""Ingress calls of one sandbox, blocking flavour: where a guest port is
reached from outside through the server's HTTP ingress (``Ingress.GetHost``)
and the replacement of its traffic token (``Ingress.RotateToken``). The
:class:`~airlock.Sandbox` methods ``get_host``, ``expose`` and
``rotate_traffic_token`` are these."""

from __future__ import annotations

from typing import Optional

from .. import _convert
from .._client import Client
from .._errors import rpc
from ..api.v1 import ingress_pb2
from ..models.ingress import ExposedPort


def expose(client: Client, sandbox_id: str, port: int, request_timeout: Optional[float] = None) -> ExposedPort:
    request = _convert.get_host_request(sandbox_id, port)
    with rpc(client.endpoint):
        found = client.ingress.GetHost(
            request,
            metadata=client.metadata,
            timeout=client.timeout(request_timeout),
        )
    return _convert.exposed_port(request.port, found)


def rotate_token(client: Client, sandbox_id: str, request_timeout: Optional[float] = None) -> str:
    with rpc(client.endpoint):
        rotated = client.ingress.RotateToken(
            ingress_pb2.RotateTokenRequest(sandbox_id=sandbox_id),
            metadata=client.metadata,
            timeout=client.timeout(request_timeout),
        )
    return rotated.token
