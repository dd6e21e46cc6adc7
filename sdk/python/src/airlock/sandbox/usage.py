"""The usage ledger (``Usage.Query``, API revision 7): the request from
``Usage.query``'s arguments and its rows as
:class:`~airlock.models.usage.UsageRow`, for both clients."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Dict, Optional, Union

from typing_extensions import Literal

from ..api.v1 import usage_pb2
from ..exceptions import InvalidArgumentException
from ..models.usage import UsageRow
from .clock import from_ms

#: How rows are grouped: one per sandbox, per key, or per key and UTC day.
UsageBy = Literal["sandbox", "key", "day"]

#: A point in time: an aware ``datetime`` (a naive one is taken as UTC), or
#: a ``timedelta`` meaning that long ago.
When = Union[datetime, timedelta]

_BY: Dict[str, "usage_pb2.UsageGrouping.ValueType"] = {
    "sandbox": usage_pb2.USAGE_GROUPING_SANDBOX,
    "key": usage_pb2.USAGE_GROUPING_KEY,
    "day": usage_pb2.USAGE_GROUPING_DAY,
}


def _ms(field: str, when: Optional[When]) -> int:
    if when is None:
        return 0
    if isinstance(when, timedelta):
        when = datetime.now(timezone.utc) - when
    if not isinstance(when, datetime):
        raise InvalidArgumentException(
            f"{field}={when!r}: a datetime, or a timedelta for that long ago", field=field
        )
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0, int(when.timestamp() * 1000))


def query_request(
    key: Optional[str], since: Optional[When], until: Optional[When], by: str
) -> usage_pb2.UsageQueryRequest:
    grouping = _BY.get(by)
    if grouping is None:
        raise InvalidArgumentException(f"by={by!r}: one of 'sandbox', 'key', 'day'", field="by")
    return usage_pb2.UsageQueryRequest(
        key=key or "",
        since_ms=_ms("since", since),
        until_ms=_ms("until", until),
        by=grouping,
    )


def usage_row(row: usage_pb2.UsageRow) -> UsageRow:
    return UsageRow(
        sandbox_id=row.sandbox_id,
        key=row.key,
        day=row.day,
        sandboxes=row.sandboxes,
        period_start=from_ms(row.from_ms),
        period_end=from_ms(row.to_ms),
        running_ms=row.running_ms,
        paused_ms=row.paused_ms,
        on_disk_ms=row.on_disk_ms,
        guest_cpu_ms=row.guest_cpu_ms,
        vcpu_ms=row.vcpu_ms,
        memory_mib_ms=row.memory_mib_ms,
        disk_mib_ms=row.disk_mib_ms,
        egress_sent_bytes=row.egress_sent_bytes,
        egress_received_bytes=row.egress_received_bytes,
        ingress_received_bytes=row.ingress_received_bytes,
        ingress_sent_bytes=row.ingress_sent_bytes,
        memory_mb=row.memory_mib,
        cpu_count=row.vcpus,
        created_at=from_ms(row.created_at_ms) if row.created_at_ms else None,
        ended_at=from_ms(row.ended_at_ms) if row.ended_at_ms else None,
    )
