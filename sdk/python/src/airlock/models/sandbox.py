"""Sandboxes as data: :class:`SandboxInfo`, :class:`SandboxState`,
:class:`SandboxQuery` for listing, :class:`SandboxMetrics`, and the
:class:`Secret` a sandbox can be created with."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Dict, List, Optional, Sequence


class SandboxState(str, enum.Enum):
    """Where a sandbox is in its life."""

    RUNNING = "running"
    #: CPUs stopped, memory kept; the next call resumes it.
    PAUSED = "paused"
    #: Saved to disk, no VM process; the next call restores it.
    ON_DISK = "on_disk"
    #: Gone; ``SandboxInfo.end_reason`` says why.
    ENDED = "ended"


@dataclass
class SandboxInfo:
    """One sandbox. The first fields are E2B's; the rest are Airlock's."""

    sandbox_id: str
    #: The template it started from ("" for the image's own).
    template_id: str
    #: The root image ("" for none: busybox).
    name: Optional[str]
    metadata: Dict[str, str]
    started_at: datetime
    #: When it will be killed (``None``: never).
    end_at: Optional[datetime]
    state: SandboxState
    cpu_count: int
    memory_mb: int
    end_reason: str = ""
    #: Whether it has a network (allow rules or secrets).
    network: bool = False
    #: How it started: "cold", "clone", "pool", "fork", "restored".
    origin: str = ""
    #: The key that owns it ("" for the server machine's owner).
    owner: str = ""
    #: The names of the environment variables it was created with.
    env_names: List[str] = field(default_factory=list)
    #: Milliseconds since it started, not paused, and its guest's CPU time.
    wall_ms: int = 0
    running_ms: int = 0
    guest_cpu_ms: int = 0
    #: Guest ports the server's HTTP ingress serves without the traffic
    #: token (``create(public_ports=...)``).
    public_ports: List[int] = field(default_factory=list)

    @property
    def image(self) -> Optional[str]:
        """The root image's name (E2B's ``name``)."""
        return self.name


@dataclass
class SandboxQuery:
    """Filters for ``Sandbox.list``: every label in ``metadata``, and any of
    ``state`` (none: every state)."""

    metadata: Optional[Dict[str, str]] = None
    state: Optional[Sequence[SandboxState]] = None


@dataclass
class SandboxMetrics:
    """A sandbox's figures now. E2B's ``cpu_used_pct`` is the guest's CPU
    time over its running time since it started (all vCPUs);
    ``disk_used``/``disk_total`` are the guest's writable root in bytes,
    ``None`` while it is paused or where its agent does not measure them."""

    timestamp: datetime
    cpu_count: int
    cpu_used_pct: float
    #: The guest's memory (MemTotal) and what it uses (MemTotal minus
    #: MemAvailable), in bytes; 0 while it is paused (not woken to measure).
    mem_total: int
    mem_used: int
    #: CPU time and memory of the programs started in it.
    programs_cpu_ms: int
    programs_memory_bytes: int
    wall_ms: int
    running_ms: int
    guest_cpu_ms: int
    disk_used: Optional[int] = None
    disk_total: Optional[int] = None


@dataclass
class Secret:
    """A credential the guest may use but never sees: the guest's ``$name``
    holds a placeholder, and the host puts ``value`` into HTTP(S) requests to
    ``hosts`` (which also need an ``allow_net`` rule)."""

    name: str
    value: str
    hosts: Sequence[str]

    def __repr__(self) -> str:
        return f"Secret(name={self.name!r}, value=<hidden>, hosts={list(self.hosts)!r})"
