"""``sandbox.pty``: interactive terminals, blocking flavour. A terminal runs
a login shell (bash where the image has it, else sh) on a pseudo-terminal;
what it shows arrives as bytes (``on_data``, or iterating the handle), what
is typed goes in with ``send_stdin``."""

from __future__ import annotations

from typing import Mapping, Optional

from .. import _convert
from .._client import Client
from .._errors import rpc
from ..api.v1 import processes_pb2
from ..models.commands import PtySize
from .command_handle import CommandHandle, PtyCallback, kill, send_stdin
from .commands import Commands

#: The shell a terminal runs: bash if there is one, else the image's sh.
SHELL = ["/bin/sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash -i -l; else exec sh -i -l; fi"]


class Pty:
    """Terminals in one sandbox."""

    def __init__(self, client: Client, sandbox_id: str, commands: Commands) -> None:
        self._client = client
        self._sandbox_id = sandbox_id
        self._commands = commands

    def create(
        self,
        size: PtySize,
        on_data: Optional[PtyCallback] = None,
        user: Optional[str] = None,
        cwd: Optional[str] = None,
        envs: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
        request_timeout: Optional[float] = None,
    ) -> CommandHandle:
        """Opens a terminal of ``size``; ``on_data`` gets its output as it
        comes. ``TERM`` is ``xterm-256color`` unless ``envs`` says."""
        env = {"TERM": "xterm-256color", **dict(envs or {})}
        return self._commands.start(
            SHELL, envs=env, cwd=cwd, user=user, timeout=timeout, pty=size, on_pty=on_data
        )

    def send_stdin(self, pid: int, data: "bytes | str", request_timeout: Optional[float] = None) -> None:
        """Types ``data`` at the terminal."""
        send_stdin(self._client, self._sandbox_id, pid, _convert.text_bytes(data), False, request_timeout)

    def resize(self, pid: int, size: PtySize, request_timeout: Optional[float] = None) -> None:
        """A new window size (the shell gets SIGWINCH)."""
        with rpc(self._client.endpoint):
            self._client.processes.Resize(
                processes_pb2.ResizeRequest(
                    sandbox_id=self._sandbox_id,
                    process=_convert.selector(pid),
                    size=processes_pb2.TerminalSize(rows=size.rows, cols=size.cols),
                ),
                metadata=self._client.metadata,
                timeout=self._client.timeout(request_timeout),
            )

    def kill(self, pid: int, request_timeout: Optional[float] = None) -> bool:
        """Kills the terminal's processes; ``False`` when it is gone."""
        return kill(self._client, self._sandbox_id, pid, request_timeout)
