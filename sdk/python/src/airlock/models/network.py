"""A sandbox's network as data: its :class:`NetworkPolicy` and the
:class:`AuditRecord` of every connection and DNS query it made, and of
every request the server's ingress let in or refused."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Dict, List

#: E2B's name for every address (``network={"deny_out": [ALL_TRAFFIC]}``);
#: an Airlock sandbox denies it unless rules allow more.
ALL_TRAFFIC = "0.0.0.0/0"

@dataclass
class NetworkPolicy:
    """The allow rules in order, and each bound secret's hosts by its name
    (never its value)."""

    rules: List[str] = field(default_factory=list)
    secrets: Dict[str, List[str]] = field(default_factory=dict)


@dataclass
class AuditRecord:
    """One decision of the host about the guest's traffic."""

    seq: int
    at: datetime
    #: "dns", "tcp", "tls", "http" or "proxy" for the guest's own traffic;
    #: "ingress" for a request from outside to a server in the guest
    #: (through ``get_host``/``expose``), whose ``name`` is "from CLIENT"
    #: and ``port`` the guest port.
    protocol: str
    #: The name the guest used, if known ("from CLIENT" for ingress).
    name: str
    #: The address dialed or asked for, if known.
    addr: str
    port: int
    allowed: bool
    #: "allowed", or "refused: " and why.
    verdict: str
