"""The usage ledger as data: :class:`UsageRow`, what ``Usage.query()``
answers (one per sandbox, key, or key and day)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Optional


@dataclass
class UsageRow:
    """What a sandbox, a key or a key's UTC day used in the period asked
    for, from the server's usage ledger (Airlock's; E2B has none). Times are
    milliseconds; the products are of MiB or vCPUs and milliseconds, exact;
    the properties give the billing units."""

    #: By sandbox: the sandbox ("" otherwise).
    sandbox_id: str
    #: The key ("" for the server machine's owner).
    key: str
    #: By day: the UTC day, ``YYYY-MM-DD`` ("" otherwise).
    day: str
    #: How many sandboxes the row sums.
    sandboxes: int
    #: The start of the row's first hour and the end of its last.
    period_start: datetime
    period_end: datetime
    #: Running (not paused), paused in memory, and saved to disk.
    running_ms: int
    paused_ms: int
    on_disk_ms: int
    #: CPU time its virtual CPUs used.
    guest_cpu_ms: int
    #: vCPUs times running time.
    vcpu_ms: int
    #: Guest memory (MiB) times the time it was held (running and paused
    #: in memory).
    memory_mib_ms: int
    #: Disk held (MiB) times the time it was held: the named workspace's
    #: size while the sandbox lives, its saved files while on disk.
    disk_mib_ms: int
    #: Bytes on connections the guest opened: sent, and received.
    egress_sent_bytes: int
    egress_received_bytes: int
    #: Bytes on connections into its ports (the ingress): received from
    #: clients, and sent back.
    ingress_received_bytes: int
    ingress_sent_bytes: int
    #: By sandbox: its size and life (``ended_at`` None while it lives, lies
    #: on disk or was left for the next server).
    memory_mb: int = 0
    cpu_count: int = 0
    created_at: Optional[datetime] = None
    ended_at: Optional[datetime] = None

    @property
    def vcpu_seconds(self) -> float:
        return self.vcpu_ms / 1000

    @property
    def memory_gib_seconds(self) -> float:
        return self.memory_mib_ms / 1024 / 1000

    @property
    def disk_gib_seconds(self) -> float:
        return self.disk_mib_ms / 1024 / 1000
