"""Named snapshots, asyncio: the calls behind ``Sandbox.create_snapshot``,
``list_snapshots``, ``get_snapshot`` and ``delete_snapshot``, and
:class:`AsyncSnapshotPaginator` (requests and answers: :mod:`airlock.sandbox.snapshots`)."""

from __future__ import annotations

from typing import AsyncIterator, List, Optional, Union

from .._client import AsyncClient
from ..api.v1 import sandboxes_pb2
from ..exceptions import NotFoundException
from ..models.snapshot import SnapshotInfo
from ..sandbox import snapshots as core
from ..sandbox.lifecycle import ConnectionOpts, config


async def take(
    client: AsyncClient, sandbox_id: str, name: Optional[str], mode: Optional[str], request_timeout: Optional[float] = None
) -> SnapshotInfo:
    core.check_mode(mode)
    request = core.snapshot_request(sandbox_id, name)
    return core.snapshot_info(await client.call(client.sandboxes.Snapshot, request, request_timeout))


async def get(client: AsyncClient, name: str, request_timeout: Optional[float] = None) -> SnapshotInfo:
    request = sandboxes_pb2.GetSnapshotRequest(name=name)
    return core.snapshot_info(await client.call(client.sandboxes.GetSnapshot, request, request_timeout))


async def delete(client: AsyncClient, name: str, request_timeout: Optional[float] = None) -> bool:
    request = sandboxes_pb2.DeleteSnapshotRequest(name=name)
    try:
        await client.call(client.sandboxes.DeleteSnapshot, request, request_timeout)
    except NotFoundException:
        return False
    return True


async def create(client: AsyncClient, request: sandboxes_pb2.CreateSandboxRequest) -> sandboxes_pb2.SandboxInfo:
    """``Sandboxes.Create``; a ``template`` the server does not know is
    tried again as a snapshot of that name (E2B's
    ``Sandbox.create(snapshot_id)``)."""
    try:
        return await client.call(client.sandboxes.Create, request)
    except NotFoundException as error:
        retry = core.as_snapshot(request, error)
        if retry is None:
            raise
        try:
            return await client.call(client.sandboxes.Create, retry)
        except NotFoundException as again:
            if not core.missing(again):
                raise
            raise core.neither(request.template, error) from None


class AsyncSnapshotPaginator(core.SnapshotPages):
    """Pages of ``AsyncSandbox.list_snapshots``, as E2B's: ``await
    next_items()`` while ``has_next``; ``async for`` goes through every page."""

    def __init__(
        self,
        client: Union[AsyncClient, ConnectionOpts],
        sandbox_id: Optional[str] = None,
        name: Optional[str] = None,
        limit: Optional[int] = None,
        next_token: Optional[str] = None,
    ) -> None:
        super().__init__(sandbox_id, name, limit, next_token)
        # A class's listing connects on its first page (E2B's list_snapshots
        # is not awaited).
        self._client: Optional[AsyncClient] = client if isinstance(client, AsyncClient) else None
        self._opts: ConnectionOpts = {} if isinstance(client, AsyncClient) else client

    async def next_items(self) -> List[SnapshotInfo]:
        if self._needs_fetch():
            if self._client is None:
                self._client = await AsyncClient.connect(config(self._opts, "AsyncSandbox.list_snapshots"))
            self._fetched(await self._client.call(self._client.sandboxes.ListSnapshots, self.request))
        return self._page()

    async def __aiter__(self) -> AsyncIterator[SnapshotInfo]:
        while self.has_next:
            for info in await self.next_items():
                yield info
