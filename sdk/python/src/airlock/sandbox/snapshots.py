"""Named snapshots (``Sandboxes.Snapshot``, ``ListSnapshots``,
``GetSnapshot``, ``DeleteSnapshot``, and a create's ``snapshot``): the
requests, the answers as :class:`~airlock.models.snapshot.SnapshotInfo`,
the paging of a listing (the server answers it whole), E2B's ``mode``
refused, and the rule that lets ``Sandbox.create(snapshot_id)`` (E2B's
form) start from a snapshot: a create whose ``template`` the server does
not know is tried again as a snapshot of that name."""

from __future__ import annotations

from typing import List, Optional

from ..api.v1 import sandboxes_pb2
from ..exceptions import InvalidArgumentException, NotFoundException, SandboxNotFoundException
from ..models.snapshot import SnapshotInfo
from .clock import from_ms


def check_mode(mode: Optional[str]) -> None:
    """E2B's ``mode``: ``"full"`` (or none) is what Airlock's snapshots
    always are; ``"filesystem"`` (files only, clones boot cold) is refused."""
    if mode is None or mode == "full":
        return
    if mode == "filesystem":
        raise InvalidArgumentException(
            "mode='filesystem': an Airlock snapshot always keeps the sandbox's memory and "
            "running programs with its files, and its clones resume them (no cold boot); "
            "leave mode out (or pass 'full')",
            field="mode",
        )
    raise InvalidArgumentException(
        f"mode={mode!r}: a snapshot's mode is 'full' (Airlock's only one)", field="mode"
    )


def snapshot_request(sandbox_id: str, name: Optional[str]) -> sandboxes_pb2.SnapshotSandboxRequest:
    return sandboxes_pb2.SnapshotSandboxRequest(sandbox_id=sandbox_id, name=name or "")


def snapshot_info(info: sandboxes_pb2.SnapshotInfo) -> SnapshotInfo:
    return SnapshotInfo(
        snapshot_id=info.name,
        names=[info.name],
        content_id=info.id,
        source_sandbox_id=info.source_sandbox_id,
        image=info.image,
        template=info.template,
        parent_snapshot=info.parent_snapshot,
        memory_mb=info.memory_mib,
        cpu_count=info.vcpus,
        created_at=from_ms(info.created_at_ms),
        paused_ms=info.paused_ms,
        took_ms=info.took_ms,
        size_bytes=info.size_bytes,
        owner=info.owner,
        sandboxes=info.sandboxes,
    )


class SnapshotPages:
    """What a snapshot listing's paginator keeps between pages, as E2B's
    paginator pages (``has_next``, ``next_token``, ``next_items()``): the
    server answers the whole list in one call, which the first page asks
    for; ``limit`` cuts it into pages here, ``next_token`` is where the next
    page begins. ``name`` keeps only that snapshot (E2B's filter)."""

    def __init__(
        self,
        sandbox_id: Optional[str],
        name: Optional[str],
        limit: Optional[int],
        next_token: Optional[str],
    ) -> None:
        if limit is not None and limit < 1:
            raise InvalidArgumentException(f"limit={limit}: at least 1", field="limit")
        try:
            self._offset = int(next_token or 0)
        except ValueError:
            raise InvalidArgumentException(
                f"next_token={next_token!r}: not a token a listing of snapshots gave",
                field="next_token",
            ) from None
        self.request = sandboxes_pb2.ListSnapshotsRequest(sandbox_id=sandbox_id or "")
        self._name = name
        self._limit = limit
        self._all: Optional[List[SnapshotInfo]] = None
        self.has_next = True
        self.next_token: Optional[str] = next_token or None

    def __bool__(self) -> bool:
        return True

    def __len__(self) -> int:
        raise TypeError(self._not_a_list())

    def __getitem__(self, index: object) -> SnapshotInfo:
        raise TypeError(self._not_a_list())

    def _not_a_list(self) -> str:
        return (
            f"{type(self).__name__} is not a list (nor is E2B's): page with has_next and "
            "next_items(), or iterate it for every snapshot (list(...) of it on the blocking "
            "client, `async for` on the asyncio one)"
        )

    def _needs_fetch(self) -> bool:
        return self._all is None and self.has_next

    def _fetched(self, answer: sandboxes_pb2.ListSnapshotsResponse) -> None:
        found = [snapshot_info(info) for info in answer.snapshots]
        if self._name:
            found = [s for s in found if s.snapshot_id == self._name]
        self._all = found

    def _page(self) -> List[SnapshotInfo]:
        if not self.has_next or self._all is None:
            return []
        end = len(self._all) if self._limit is None else self._offset + self._limit
        page = self._all[self._offset : end]
        self._offset = min(end, len(self._all))
        self.has_next = self._offset < len(self._all)
        self.next_token = str(self._offset) if self.has_next else None
        return page


# -- a create that names a snapshot as its template (E2B's form) ------------


def missing(error: NotFoundException) -> bool:
    """Whether the server found no image, template or snapshot by a name
    (not a missing sandbox)."""
    return error.reason == "NOT_FOUND" and not isinstance(error, SandboxNotFoundException)


def as_snapshot(
    request: sandboxes_pb2.CreateSandboxRequest, error: NotFoundException
) -> Optional[sandboxes_pb2.CreateSandboxRequest]:
    """The create to try when the server found no template ``X`` for one
    that named ``template=X`` (E2B passes a snapshot's id as the template):
    the same request starting from the snapshot ``X``. ``None`` when that
    is not what happened."""
    if not request.template or request.snapshot or not missing(error):
        return None
    retry = sandboxes_pb2.CreateSandboxRequest()
    retry.CopyFrom(request)
    retry.snapshot = request.template
    retry.template = ""
    retry.image = ""
    return retry


def neither(name: str, as_template: NotFoundException) -> NotFoundException:
    """The error of a create whose ``template`` named neither a template
    nor a snapshot."""
    return NotFoundException(
        f"{as_template.message}; nor is there a snapshot of yours named {name} "
        "(Template.list() lists the templates, Sandbox.list_snapshots() your snapshots)",
        reason=as_template.reason,
        code=as_template.code,
        field="template",
    )
