"""Ingress calls of one sandbox, asyncio flavour: where a guest port is
reached from outside through the server's HTTP ingress (``Ingress.GetHost``)
and the replacement of its traffic token (``Ingress.RotateToken``). The
:class:`~airlock.AsyncSandbox` methods ``get_host``, ``expose`` and
``rotate_traffic_token`` are these."""

from __future__ import annotations

from typing import Optional

from .. import _convert
from .._client import AsyncClient
from .._errors import arpc
from ..api.v1 import ingress_pb2
from ..models.ingress import ExposedPort


async def expose(client: AsyncClient, sandbox_id: str, port: int, request_timeout: Optional[float] = None) -> ExposedPort:
    request = _convert.get_host_request(sandbox_id, port)
    async with arpc(client.endpoint):
        found = await client.ingress.GetHost(
            request,
            metadata=client.metadata,
            timeout=client.timeout(request_timeout),
        )
    return _convert.exposed_port(request.port, found)


async def rotate_token(client: AsyncClient, sandbox_id: str, request_timeout: Optional[float] = None) -> str:
    async with arpc(client.endpoint):
        rotated = await client.ingress.RotateToken(
            ingress_pb2.RotateTokenRequest(sandbox_id=sandbox_id),
            metadata=client.metadata,
            timeout=client.timeout(request_timeout),
        )
    return rotated.token
