"""``sandbox.commands``: shell commands in the sandbox, asyncio flavour (see
:mod:`airlock.sandbox_sync.commands` for what each call does)."""

from __future__ import annotations

from typing import Any, List, Mapping, Optional, Sequence, Union, overload

from typing_extensions import Literal

from .. import _convert
from .._client import CHUNK_BYTES, AsyncClient
from .._errors import arpc
from .._output import CommandOutput
from ..api.v1 import processes_pb2
from ..exceptions import SandboxException
from ..models.commands import CommandResult, ProcessInfo, PtySize
from ..sandbox_sync.command_handle import check
from ..sandbox_sync.commands import DEFAULT_TIMEOUT, Stdin
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
        first = _convert.start_request(
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
            started = await call.read()
        if not isinstance(started, processes_pb2.ProcessEvent) or started.WhichOneof("event") != "started":
            call.cancel()
            raise SandboxException("the server ended the program's stream before it started")
        return call, started.started.pid

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
        data = None if isinstance(stdin, bool) or stdin is None else _convert.text_bytes(stdin)
        keep_open = stdin is True or (stdin is None and background)
        if background and timeout == DEFAULT_TIMEOUT:
            timeout = None
        call, pid = await self._open(
            _convert.shell(cmd),
            envs=envs,
            cwd=cwd,
            user=user,
            timeout=timeout,
            stdin=keep_open or data is not None,
            tag=tag,
            kill_on_disconnect=not background,
        )
        if data is not None:
            async with arpc(self._client.endpoint):
                for start in range(0, len(data), CHUNK_BYTES // 4):
                    await call.write(processes_pb2.ProcessInput(stdin=data[start : start + CHUNK_BYTES // 4]))
                await call.write(processes_pb2.ProcessInput(close_stdin=True))
                await call.done_writing()
        if background:
            return AsyncCommandHandle(
                self._client,
                self._sandbox_id,
                pid,
                call,
                keep_open,
                CommandOutput(),
                on_stdout=on_stdout,
                on_stderr=on_stderr,
                timeout=timeout,
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
        return check(output.result(exit), timeout)

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
        call = self._client.processes.Connect(
            processes_pb2.ConnectProcessRequest(
                sandbox_id=self._sandbox_id, process=_convert.selector(pid), offset=offset
            ),
            metadata=self._client.metadata,
        )
        async with arpc(self._client.endpoint):
            started = await call.read()
        if not isinstance(started, processes_pb2.ProcessEvent) or started.WhichOneof("event") != "started":
            raise SandboxException(f"the server ended the stream of process {pid} at once")
        return AsyncCommandHandle(
            self._client,
            self._sandbox_id,
            started.started.pid,
            call,
            False,
            CommandOutput(),
            on_stdout=on_stdout,
            on_stderr=on_stderr,
            timeout=timeout,
        )

    async def list(self, request_timeout: Optional[float] = None) -> List[ProcessInfo]:
        async with arpc(self._client.endpoint):
            listed = await self._client.processes.List(
                processes_pb2.ListProcessesRequest(sandbox_id=self._sandbox_id),
                metadata=self._client.metadata,
                timeout=self._client.timeout(request_timeout),
            )
        return [_convert.process_info(info) for info in listed.processes]

    async def kill(self, pid: int, request_timeout: Optional[float] = None) -> bool:
        return await kill(self._client, self._sandbox_id, pid, request_timeout)

    async def send_stdin(
        self, pid: int, data: "str | bytes", request_timeout: Optional[float] = None
    ) -> None:
        await send_stdin(
            self._client, self._sandbox_id, pid, _convert.text_bytes(data), False, request_timeout
        )

    async def close_stdin(self, pid: int, request_timeout: Optional[float] = None) -> None:
        await send_stdin(self._client, self._sandbox_id, pid, b"", True, request_timeout)


async def _deliver(
    chunk: "tuple[Optional[str], Optional[str], Optional[bytes]]",
    on_stdout: Optional[OutputCallback],
    on_stderr: Optional[OutputCallback],
) -> None:
    stdout, stderr, _ = chunk
    if stdout is not None:
        await call_back(on_stdout, stdout)
    elif stderr is not None:
        await call_back(on_stderr, stderr)
