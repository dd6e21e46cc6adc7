"""``sandbox.pty``: interactive terminals, asyncio flavour. A terminal runs
a login shell (bash where the image has it, else sh) on a pseudo-terminal;
what it shows arrives as bytes (``on_data``, or iterating the handle), what
is typed goes in with ``send_stdin``."""

from __future__ import annotations

from typing import Mapping, Optional

from .._client import AsyncClient
from ..models.commands import PtySize
from ..sandbox.files import text_bytes
from ..sandbox.pty import SHELL, resize_request, terminal_env
from .command_handle import AsyncCommandHandle, PtyCallback, kill, send_stdin
from .commands import AsyncCommands


class AsyncPty:
    """Terminals in one sandbox."""

    def __init__(self, client: AsyncClient, sandbox_id: str, commands: AsyncCommands) -> None:
        self._client = client
        self._sandbox_id = sandbox_id
        self._commands = commands

    async def create(
        self,
        size: PtySize,
        on_data: Optional[PtyCallback] = None,
        user: Optional[str] = None,
        cwd: Optional[str] = None,
        envs: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
        request_timeout: Optional[float] = None,
    ) -> AsyncCommandHandle:
        """Opens a terminal of ``size``; ``on_data`` gets its output as it
        comes. ``TERM`` is ``xterm-256color`` unless ``envs`` says."""
        return await self._commands.start(
            SHELL, envs=terminal_env(envs), cwd=cwd, user=user, timeout=timeout, pty=size, on_pty=on_data
        )

    async def send_stdin(self, pid: int, data: "bytes | str", request_timeout: Optional[float] = None) -> None:
        """Types ``data`` at the terminal."""
        await send_stdin(self._client, self._sandbox_id, pid, text_bytes(data), False, request_timeout)

    async def resize(self, pid: int, size: PtySize, request_timeout: Optional[float] = None) -> None:
        """A new window size (the shell gets SIGWINCH)."""
        await self._client.call(
            self._client.processes.Resize, resize_request(self._sandbox_id, pid, size), request_timeout
        )

    async def kill(self, pid: int, request_timeout: Optional[float] = None) -> bool:
        """Kills the terminal's processes; ``False`` when it is gone."""
        return await kill(self._client, self._sandbox_id, pid, request_timeout)
