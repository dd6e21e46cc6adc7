"""``sandbox.commands``: shell commands in the sandbox, asyncio flavour (see
:mod:`airlock.sandbox_sync.commands` for what each call does; the requests
and decisions are :mod:`airlock.sandbox.commands`')."""

from __future__ import annotations

from typing import Any, List, Mapping, Optional, Sequence, Union, overload

from typing_extensions import Literal

from .._client import AsyncClient
from .._errors import arpc
from ..exceptions import SandboxException
from ..models.commands import CommandResult, ProcessInfo, PtySize
from ..sandbox import commands as core
from ..sandbox.commands import DEFAULT_TIMEOUT, Stdin
from ..sandbox.files import text_bytes
from ..sandbox.output import CommandOutput, route
from .command_handle import (
    AsyncCommandHandle,
    OutputCallback,
    PtyCallback,
    call_back,
    events,
    kill,
    send_stdin,
    wait_exit,
)


class AsyncCommands:
    """Runs and manages programs in one sandbox."""

    def __init__(self, client: AsyncClient, sandbox_id: str) -> None:
        self._client = client
        self._sandbox_id = sandbox_id

    async def _open(
        self,
        argv: Sequence[str],
        *,
        envs: Optional[Mapping[str, str]],
        cwd: Optional[str],
        user: Optional[str],
        timeout: Optional[float],
        stdin: bool,
        pty: Optional[PtySize] = None,
        tag: Optional[str] = None,
        kill_on_disconnect: bool = False,
    ) -> "tuple[Any, int]":
        first = core.start_request(
            sandbox_id=self._sandbox_id,
            argv=argv,
            envs=envs,
            cwd=cwd,
            user=user,
            timeout=timeout,
            stdin=stdin,
            pty=pty,
            tag=tag,
            kill_on_disconnect=kill_on_disconnect,
        )
        call = self._client.processes.Start(metadata=self._client.metadata)
        async with arpc(self._client.endpoint):
            await call.write(first)
            if not stdin and pty is None:
                await call.done_writing()
            pid = core.started_pid(await call.read())
        if pid is None:
            call.cancel()
            raise SandboxException(core.NOT_STARTED)
        return call, pid

    async def start(
        self,
        argv: Sequence[str],
        *,
        envs: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        timeout: Optional[float] = None,
        stdin: bool = False,
        pty: Optional[PtySize] = None,
        tag: Optional[str] = None,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
        on_pty: Optional[PtyCallback] = None,
    ) -> AsyncCommandHandle:
        """Airlock: a program by its argv (no shell), in the background."""
        call, pid = await self._open(
            argv, envs=envs, cwd=cwd, user=user, timeout=timeout, stdin=stdin, pty=pty, tag=tag
        )
        return AsyncCommandHandle(
            self._client,
            self._sandbox_id,
            pid,
            call,
            stdin or pty is not None,
            CommandOutput(pty=pty is not None),
            on_stdout=on_stdout,
            on_stderr=on_stderr,
            on_pty=on_pty,
            timeout=timeout,
        )

    @overload
    async def run(
        self,
        cmd: str,
        background: Literal[False] = False,
        envs: Optional[Mapping[str, str]] = None,
        user: Optional[str] = None,
        cwd: Optional[str] = None,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
        stdin: Stdin = None,
        timeout: Optional[float] = DEFAULT_TIMEOUT,
        request_timeout: Optional[float] = None,
        tag: Optional[str] = None,
    ) -> CommandResult: ...

    @overload
    async def run(
        self,
        cmd: str,
        background: Literal[True],
        envs: Optional[Mapping[str, str]] = None,
        user: Optional[str] = None,
        cwd: Optional[str] = None,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
        stdin: Stdin = None,
        timeout: Optional[float] = None,
        request_timeout: Optional[float] = None,
        tag: Optional[str] = None,
    ) -> AsyncCommandHandle: ...

    async def run(
        self,
        cmd: str,
        background: bool = False,
        envs: Optional[Mapping[str, str]] = None,
        user: Optional[str] = None,
        cwd: Optional[str] = None,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
        stdin: Stdin = None,
        timeout: Optional[float] = DEFAULT_TIMEOUT,
        request_timeout: Optional[float] = None,
        tag: Optional[str] = None,
    ) -> Union[CommandResult, AsyncCommandHandle]:
        """Runs ``cmd`` with ``/bin/sh -c``; see the blocking ``run``."""
        plan = core.plan_run(stdin, background, timeout)
        call, pid = await self._open(
            core.shell(cmd),
            envs=envs,
            cwd=cwd,
            user=user,
            timeout=plan.timeout,
            stdin=plan.stdin,
            tag=tag,
            kill_on_disconnect=not background,
        )
        if plan.data is not None:
            async with arpc(self._client.endpoint):
                for message in core.whole_stdin(plan.data):
                    await call.write(message)
                await call.done_writing()
        if background:
            return AsyncCommandHandle(
                self._client,
                self._sandbox_id,
                pid,
                call,
                plan.keep_open,
                CommandOutput(),
                on_stdout=on_stdout,
                on_stderr=on_stderr,
                timeout=plan.timeout,
            )
        output = CommandOutput()
        try:
            async for event in events(self._client, self._sandbox_id, pid, call, output, lambda: False):
                chunk = output.feed(event)
                if chunk is not None:
                    await _deliver(chunk, on_stdout, on_stderr)
            for chunk in output.flush():
                await _deliver(chunk, on_stdout, on_stderr)
        except BaseException:
            call.cancel()
            raise
        exit = output.exit
        if exit is None:
            exit = await wait_exit(self._client, self._sandbox_id, pid)
        return core.check(output.result(exit), plan.timeout)

    async def connect(
        self,
        pid: int,
        timeout: Optional[float] = None,
        request_timeout: Optional[float] = None,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
        offset: int = 0,
    ) -> AsyncCommandHandle:
        """Attaches to a program again, replaying its output from ``offset``
        (0: all the guest holds), then following it."""
        call = self._client.open(
            self._client.processes.Connect, core.connect_request(self._sandbox_id, pid, offset)
        )
        async with arpc(self._client.endpoint):
            started = core.started_pid(await call.read())
        if started is None:
            raise core.not_attached(pid)
        return AsyncCommandHandle(
            self._client,
            self._sandbox_id,
            started,
            call,
            False,
            CommandOutput(),
            on_stdout=on_stdout,
            on_stderr=on_stderr,
            timeout=timeout,
        )

    async def list(self, request_timeout: Optional[float] = None) -> List[ProcessInfo]:
        listed = await self._client.call(
            self._client.processes.List, core.list_request(self._sandbox_id), request_timeout
        )
        return core.processes(listed)

    async def kill(self, pid: int, request_timeout: Optional[float] = None) -> bool:
        return await kill(self._client, self._sandbox_id, pid, request_timeout)

    async def send_stdin(
        self, pid: int, data: "str | bytes", request_timeout: Optional[float] = None
    ) -> None:
        await send_stdin(self._client, self._sandbox_id, pid, text_bytes(data), False, request_timeout)

    async def close_stdin(self, pid: int, request_timeout: Optional[float] = None) -> None:
        await send_stdin(self._client, self._sandbox_id, pid, b"", True, request_timeout)


async def _deliver(
    chunk: "tuple[Optional[str], Optional[str], Optional[bytes]]",
    on_stdout: Optional[OutputCallback],
    on_stderr: Optional[OutputCallback],
) -> None:
    await call_back(*route(chunk, on_stdout, on_stderr))
