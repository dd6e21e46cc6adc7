"""Ingress calls of one sandbox, blocking flavour: where a guest port is
reached from outside through the server's HTTP ingress (``Ingress.GetHost``)
and the replacement of its traffic token (``Ingress.RotateToken``). The
:class:`~airlock.Sandbox` methods ``get_host``, ``expose`` and
``rotate_traffic_token`` are these."""

from __future__ import annotations

from typing import Optional

from .._client import Client
from ..api.v1 import ingress_pb2
from ..models.ingress import ExposedPort
from ..sandbox.ingress import exposed_port, get_host_request


def expose(client: Client, sandbox_id: str, port: int, request_timeout: Optional[float] = None) -> ExposedPort:
    request = get_host_request(sandbox_id, port)
    return exposed_port(request.port, client.call(client.ingress.GetHost, request, request_timeout))


def rotate_token(client: Client, sandbox_id: str, request_timeout: Optional[float] = None) -> str:
    request = ingress_pb2.RotateTokenRequest(sandbox_id=sandbox_id)
    return client.call(client.ingress.RotateToken, request, request_timeout).token
