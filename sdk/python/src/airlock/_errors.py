"""Turning failed gRPC calls into the SDK's exceptions at the call sites:
:func:`rpc` for blocking calls and :func:`arpc` for asyncio ones, both
context managers around the call."""

from __future__ import annotations

import contextlib
from typing import AsyncIterator, Iterator

import grpc

from .exceptions import from_rpc_error


@contextlib.contextmanager
def rpc(endpoint: str) -> Iterator[None]:
    try:
        yield
    except grpc.RpcError as error:
        raise from_rpc_error(error, endpoint) from None


@contextlib.asynccontextmanager
async def arpc(endpoint: str) -> AsyncIterator[None]:
    try:
        yield
    except grpc.RpcError as error:
        raise from_rpc_error(error, endpoint) from None
