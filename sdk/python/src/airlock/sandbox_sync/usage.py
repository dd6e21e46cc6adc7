""":class:`Usage`: the server's usage ledger, blocking (the request and
the rows: :mod:`airlock.sandbox.usage`)."""

from __future__ import annotations

from typing import List, Optional

from typing_extensions import Unpack

from .._client import Client
from ..models.usage import UsageRow
from ..sandbox import usage as core
from ..sandbox.lifecycle import ConnectionOpts, config


class Usage:
    """What sandboxes used, from the server's usage ledger (Airlock's):
    ``Usage.query(by="day", since=timedelta(days=7))``."""

    @classmethod
    def query(
        cls,
        key: Optional[str] = None,
        since: Optional[core.When] = None,
        until: Optional[core.When] = None,
        by: core.UsageBy = "sandbox",
        **opts: Unpack[ConnectionOpts],
    ) -> List[UsageRow]:
        """The ledger's rows for the period (the hours starting from
        ``since`` up to ``until``; None: from the first, up to now), one per
        sandbox, key, or key and UTC day. A key sees its own usage; the
        owner (on the Unix socket) every key's, or ``key``'s (``"_owner"``:
        the owner's own sandboxes)."""
        request = core.query_request(key, since, until, by)
        client = Client(config(opts, "Usage.query"))
        answer = client.call(client.usage.Query, request, opts.get("request_timeout"))
        return [core.usage_row(row) for row in answer.rows]
