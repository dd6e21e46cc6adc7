"""Named snapshots, blocking: the calls behind ``Sandbox.create_snapshot``,
``list_snapshots``, ``get_snapshot`` and ``delete_snapshot``, and
:class:`SnapshotPaginator` (requests and answers: :mod:`airlock.sandbox.snapshots`)."""

from __future__ import annotations

from typing import Iterator, List, Optional

from .._client import Client
from ..api.v1 import sandboxes_pb2
from ..exceptions import NotFoundException
from ..models.snapshot import SnapshotInfo
from ..sandbox import snapshots as core


def take(
    client: Client, sandbox_id: str, name: Optional[str], mode: Optional[str], request_timeout: Optional[float] = None
) -> SnapshotInfo:
    core.check_mode(mode)
    request = core.snapshot_request(sandbox_id, name)
    return core.snapshot_info(client.call(client.sandboxes.Snapshot, request, request_timeout))


def get(client: Client, name: str, request_timeout: Optional[float] = None) -> SnapshotInfo:
    request = sandboxes_pb2.GetSnapshotRequest(name=name)
    return core.snapshot_info(client.call(client.sandboxes.GetSnapshot, request, request_timeout))


def delete(client: Client, name: str, request_timeout: Optional[float] = None) -> bool:
    request = sandboxes_pb2.DeleteSnapshotRequest(name=name)
    try:
        client.call(client.sandboxes.DeleteSnapshot, request, request_timeout)
    except NotFoundException:
        return False
    return True


def create(client: Client, request: sandboxes_pb2.CreateSandboxRequest) -> sandboxes_pb2.SandboxInfo:
    """``Sandboxes.Create``; a ``template`` the server does not know is
    tried again as a snapshot of that name (E2B's
    ``Sandbox.create(snapshot_id)``)."""
    try:
        return client.call(client.sandboxes.Create, request)
    except NotFoundException as error:
        retry = core.as_snapshot(request, error)
        if retry is None:
            raise
        try:
            return client.call(client.sandboxes.Create, retry)
        except NotFoundException as again:
            if not core.missing(again):
                raise
            raise core.neither(request.template, error) from None


class SnapshotPaginator(core.SnapshotPages):
    """Pages of ``Sandbox.list_snapshots``, as E2B's: ``next_items()`` while
    ``has_next``; iterating it goes through every page."""

    def __init__(
        self,
        client: Client,
        sandbox_id: Optional[str] = None,
        name: Optional[str] = None,
        limit: Optional[int] = None,
        next_token: Optional[str] = None,
    ) -> None:
        super().__init__(sandbox_id, name, limit, next_token)
        self._client = client

    def next_items(self) -> List[SnapshotInfo]:
        if self._needs_fetch():
            self._fetched(self._client.call(self._client.sandboxes.ListSnapshots, self.request))
        return self._page()

    def __iter__(self) -> Iterator[SnapshotInfo]:
        while self.has_next:
            yield from self.next_items()
