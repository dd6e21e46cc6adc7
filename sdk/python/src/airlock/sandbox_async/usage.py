""":class:`AsyncUsage`: the server's usage ledger, asyncio (the request
and the rows: :mod:`airlock.sandbox.usage`)."""

from __future__ import annotations

from typing import List, Optional

from typing_extensions import Unpack

from .._client import AsyncClient
from ..models.usage import UsageRow
from ..sandbox import usage as core
from ..sandbox.lifecycle import ConnectionOpts, config


class AsyncUsage:
    """What sandboxes used, from the server's usage ledger (Airlock's):
    ``await AsyncUsage.query(by="day", since=timedelta(days=7))``."""

    @classmethod
    async def query(
        cls,
        key: Optional[str] = None,
        since: Optional[core.When] = None,
        until: Optional[core.When] = None,
        by: core.UsageBy = "sandbox",
        **opts: Unpack[ConnectionOpts],
    ) -> List[UsageRow]:
        """The ledger's rows for the period, as :meth:`Usage.query`."""
        request = core.query_request(key, since, until, by)
        client = await AsyncClient.connect(config(opts, "AsyncUsage.query"))
        answer = await client.call(client.usage.Query, request, opts.get("request_timeout"))
        return [core.usage_row(row) for row in answer.rows]
