"""Interactive terminals: the shell a terminal runs, its environment, and
the ``Resize`` request."""

from __future__ import annotations

from typing import Dict, Mapping, Optional

from ..api.v1 import processes_pb2
from ..models.commands import PtySize
from .commands import selector

#: The shell a terminal runs: bash if there is one, else the image's sh.
SHELL = ["/bin/sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash -i -l; else exec sh -i -l; fi"]


def terminal_env(envs: Optional[Mapping[str, str]]) -> Dict[str, str]:
    """A terminal's environment: ``TERM`` is ``xterm-256color`` unless
    ``envs`` says."""
    return {"TERM": "xterm-256color", **dict(envs or {})}


def resize_request(sandbox_id: str, pid: int, size: PtySize) -> processes_pb2.ResizeRequest:
    return processes_pb2.ResizeRequest(
        sandbox_id=sandbox_id,
        process=selector(pid),
        size=processes_pb2.TerminalSize(rows=size.rows, cols=size.cols),
    )
