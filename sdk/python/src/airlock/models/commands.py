"""What running a command gives back: :class:`CommandResult`,
:class:`ProcessInfo` for a listed program, :class:`PtySize` for a
terminal."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional


class CommandResult:
    """A finished command: its whole ``stdout`` and ``stderr`` (decoded as
    UTF-8), ``exit_code`` (-1 when a signal killed it) and ``error`` (why it
    ended other than by exiting: a signal, a timeout, the OOM killer).
    Airlock adds ``signal``, ``timed_out``, ``oom_killed`` and
    ``duration_ms``."""

    def __init__(
        self,
        stdout: str,
        stderr: str,
        exit_code: int,
        error: Optional[str] = None,
        *,
        signal: int = 0,
        timed_out: bool = False,
        oom_killed: bool = False,
        duration_ms: int = 0,
    ) -> None:
        self.stdout = stdout
        self.stderr = stderr
        self.exit_code = exit_code
        self.error = error
        self.signal = signal
        self.timed_out = timed_out
        self.oom_killed = oom_killed
        self.duration_ms = duration_ms

    def __repr__(self) -> str:
        return (
            f"CommandResult(exit_code={self.exit_code}, error={self.error!r}, "
            f"stdout={self.stdout[-200:]!r}, stderr={self.stderr[-200:]!r})"
        )


@dataclass
class ProcessInfo:
    """A program the guest knows of (running, or recently ended)."""

    pid: int
    tag: Optional[str]
    cmd: str
    args: List[str] = field(default_factory=list)
    running: bool = True
    #: Its exit code once it ended (-1 for a signal), else ``None``.
    exit_code: Optional[int] = None
    #: Whether a client is attached to its output now.
    attached: bool = False
    #: Output written so far, and the oldest offset the guest still holds
    #: (what ``commands.connect`` can replay).
    output_bytes: int = 0
    held_from: int = 0


@dataclass
class PtySize:
    """A terminal's size."""

    rows: int
    cols: int
