"""``sandbox.pty``: interactive terminals, blocking flavour. A terminal runs
a login shell (bash where the image has it, else sh) on a pseudo-terminal;
what it shows arrives as bytes (``on_data``, or iterating the handle), what
is typed goes in with ``send_stdin``."""

from __future__ import annotations

from typing import Mapping, Optional

from .._client import Client
from ..models.commands import PtySize
from ..sandbox.files import text_bytes
from ..sandbox.pty import SHELL, resize_request, terminal_env
from .command_handle import CommandHandle, PtyCallback, kill, send_stdin
from .commands import Commands


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
        return self._commands.start(
            SHELL, envs=terminal_env(envs), cwd=cwd, user=user, timeout=timeout, pty=size, on_pty=on_data
        )

    def send_stdin(self, pid: int, data: "bytes | str", request_timeout: Optional[float] = None) -> None:
        """Types ``data`` at the terminal."""
        send_stdin(self._client, self._sandbox_id, pid, text_bytes(data), False, request_timeout)

    def resize(self, pid: int, size: PtySize, request_timeout: Optional[float] = None) -> None:
        """A new window size (the shell gets SIGWINCH)."""
        self._client.call(
            self._client.processes.Resize, resize_request(self._sandbox_id, pid, size), request_timeout
        )

    def kill(self, pid: int, request_timeout: Optional[float] = None) -> bool:
        """Kills the terminal's processes; ``False`` when it is gone."""
        return kill(self._client, self._sandbox_id, pid, request_timeout)
