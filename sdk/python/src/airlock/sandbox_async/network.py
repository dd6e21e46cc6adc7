"""``sandbox.network`` (Airlock), asyncio flavour: the sandbox's egress rules and the audit
of what its guest tried. Every connection and DNS query of the guest is
decided on the host; a sandbox created without ``allow_net`` or
``secrets`` has no network at all (its policy calls here fail with reason
``NO_NETWORK``; its audit holds the ingress records alone)."""

from __future__ import annotations

from typing import List, Optional

from .._client import AsyncClient
from ..api.v1 import network_pb2
from ..models.network import AuditRecord, NetworkPolicy
from ..sandbox import network as core


class AsyncNetwork:
    """The network policy of one sandbox."""

    def __init__(self, client: AsyncClient, sandbox_id: str) -> None:
        self._client = client
        self._sandbox_id = sandbox_id

    async def policy(self, request_timeout: Optional[float] = None) -> NetworkPolicy:
        """The rules and the bound secrets' hosts."""
        request = network_pb2.GetPolicyRequest(sandbox_id=self._sandbox_id)
        return core.policy(await self._client.call(self._client.network.GetPolicy, request, request_timeout))

    async def rules(self, request_timeout: Optional[float] = None) -> List[str]:
        """The allow rules, in order."""
        return (await self.policy(request_timeout)).rules

    async def _change(self, allow: List[str], deny: List[str], request_timeout: Optional[float]) -> List[str]:
        request = network_pb2.ChangePolicyRequest(sandbox_id=self._sandbox_id, allow=allow, deny=deny)
        return list((await self._client.call(self._client.network.ChangePolicy, request, request_timeout)).rules)

    async def allow(self, *rules: str, request_timeout: Optional[float] = None) -> List[str]:
        """Adds rules ("example.com", "*.example.com:443", "10.0.0.0/8") for
        new connections; returns the rules now."""
        return await self._change(list(rules), [], request_timeout)

    async def deny(self, *rules: str, request_timeout: Optional[float] = None) -> List[str]:
        """Removes rules (each must be one of the policy's); open
        connections stay open. Returns the rules now."""
        return await self._change([], list(rules), request_timeout)

    async def replace(self, rules: List[str], request_timeout: Optional[float] = None) -> List[str]:
        """Sets every rule at once."""
        request = network_pb2.ReplacePolicyRequest(sandbox_id=self._sandbox_id, rules=list(rules))
        return list((await self._client.call(self._client.network.ReplacePolicy, request, request_timeout)).rules)

    async def audit(self, after_seq: int = 0, request_timeout: Optional[float] = None) -> List[AuditRecord]:
        """The host's decisions on the guest's connections and DNS queries,
        and on requests from outside through the server's ingress
        (protocol "ingress"), oldest first (the newest 4096 are kept),
        after ``after_seq``. A sandbox without network has the ingress
        records alone."""
        request = network_pb2.AuditRequest(sandbox_id=self._sandbox_id, after_seq=after_seq)
        found = await self._client.call(self._client.network.Audit, request, request_timeout)
        return [core.audit_record(r) for r in found.records]
