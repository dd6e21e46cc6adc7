"""Named snapshots as data: :class:`SnapshotInfo`, what
``sandbox.create_snapshot()`` answers and ``Sandbox.list_snapshots()``
lists."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import List


@dataclass
class SnapshotInfo:
    """A snapshot of yours: a sandbox's memory, programs and files saved
    under a name, which ``Sandbox.create(snapshot_id)`` starts clones of.
    The first two fields are E2B's; the rest are Airlock's."""

    #: Its name: what ``Sandbox.create`` (``template=`` or ``snapshot=``),
    #: ``Sandbox.get_snapshot`` and ``Sandbox.delete_snapshot`` take.
    snapshot_id: str
    #: Its names (E2B's field): the name alone.
    names: List[str]
    #: What it holds, by content: the SHA-256 (hex) of the saved machine.
    #: Two names may share one.
    content_id: str
    #: The sandbox it was taken from (which may have ended since).
    source_sandbox_id: str
    #: That sandbox's root image and template ("" for none), and the
    #: snapshot it itself started from ("" for none).
    image: str
    template: str
    parent_snapshot: str
    memory_mb: int
    cpu_count: int
    created_at: datetime
    #: How long the source sandbox was stopped while its memory was copied
    #: (0 when it was paused or on disk already), and how long the call took.
    paused_ms: int
    took_ms: int
    #: Bytes it takes on the server's disk (counted in a key's storage quota).
    size_bytes: int
    #: The key that owns it ("" for the server machine's owner).
    owner: str
    #: Live sandboxes started from it now.
    sandboxes: int = 0

    @property
    def name(self) -> str:
        """Its name (the same as :attr:`snapshot_id`)."""
        return self.snapshot_id
