""":class:`AsyncCommandHandle`: a program running in the background (or a
terminal), asyncio flavour.

A task of the handle's reads the program's events as they come (a program
that writes a lot never waits for the caller), decodes and keeps the output,
awaits the callbacks given at the start (plain functions or coroutines), and
records each piece so that ``async for`` over the handle yields them from the
beginning. A stream a save to disk interrupted is resumed from the last
offset; one another client took over ends, and ``wait()`` then asks the
server for the exit.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, AsyncIterator, Awaitable, Callable, List, Optional, Union

import grpc

from .. import _convert
from .._client import CHUNK_BYTES, AsyncClient
from .._errors import arpc
from .._output import Chunk, CommandOutput
from ..api.v1 import processes_pb2
from ..exceptions import NotFoundException, SandboxException, from_rpc_error
from ..models.commands import CommandResult
from ..sandbox_sync.command_handle import MAX_RESUMES, check

OutputCallback = Callable[[str], Union[object, Awaitable[object]]]
PtyCallback = Callable[[bytes], Union[object, Awaitable[object]]]


async def call_back(callback: Optional[Callable[[Any], Any]], value: Any) -> None:
    """Calls `callback` (a function or a coroutine function) with `value`."""
    if callback is None:
        return
    result = callback(value)
    if inspect.isawaitable(result):
        await result


async def events(
    client: AsyncClient,
    sandbox_id: str,
    pid: int,
    call: Any,
    output: CommandOutput,
    cancelled: Callable[[], bool],
) -> AsyncIterator[processes_pb2.ProcessEvent]:
    """A program's events from `call`, resumed with ``Connect`` from the last
    offset when a save to disk or a fork interrupted the stream."""
    resumes = 0
    while True:
        try:
            while True:
                event = await call.read()
                if not isinstance(event, processes_pb2.ProcessEvent):
                    return  # grpc.aio.EOF: the stream ended
                yield event
        except grpc.RpcError as error:
            if cancelled():
                return
            failure = from_rpc_error(error, client.endpoint)
            if failure.reason != "INTERRUPTED" or resumes >= MAX_RESUMES:
                raise failure from None
            resumes += 1
            call = client.processes.Connect(
                processes_pb2.ConnectProcessRequest(
                    sandbox_id=sandbox_id, process=_convert.selector(pid), offset=output.offset
                ),
                metadata=client.metadata,
            )


async def wait_exit(client: AsyncClient, sandbox_id: str, pid: int) -> processes_pb2.ProcessExit:
    async with arpc(client.endpoint):
        return await client.processes.Wait(
            processes_pb2.WaitRequest(sandbox_id=sandbox_id, process=_convert.selector(pid)),
            metadata=client.metadata,
        )


class AsyncCommandHandle:
    """A running program: its ``pid``, its output so far, ``await wait()``,
    ``kill()``, ``send_stdin()``, and ``async for`` over its output as
    ``(stdout, stderr, pty)`` tuples, one of them set."""

    def __init__(
        self,
        client: AsyncClient,
        sandbox_id: str,
        pid: int,
        call: Any,
        writable: bool,
        output: CommandOutput,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
        on_pty: Optional[PtyCallback] = None,
        timeout: Optional[float] = None,
    ) -> None:
        self._client = client
        self._sandbox_id = sandbox_id
        self._pid = pid
        self._call = call
        self._writable = writable
        self._output = output
        self._timeout = timeout
        self._callbacks = (on_stdout, on_stderr, on_pty)
        self._chunks: List[Chunk] = []
        self._changed = asyncio.Condition()
        self._finished = False
        self._failure: Optional[SandboxException] = None
        self._exit: Optional[processes_pb2.ProcessExit] = None
        self._disconnected = False
        self._task = asyncio.get_running_loop().create_task(self._pump())

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def stdout(self) -> str:
        return self._output.stdout

    @property
    def stderr(self) -> str:
        return self._output.stderr

    @property
    def exit_code(self) -> Optional[int]:
        return None if self._exit is None else self._exit.exit_code

    @property
    def error(self) -> Optional[str]:
        return None if self._exit is None else _convert.exit_error(self._exit)

    async def _record(self, chunk: Chunk) -> None:
        async with self._changed:
            self._chunks.append(chunk)
            self._changed.notify_all()
        on_stdout, on_stderr, on_pty = self._callbacks
        stdout, stderr, pty = chunk
        if stdout is not None:
            await call_back(on_stdout, stdout)
        elif stderr is not None:
            await call_back(on_stderr, stderr)
        elif pty is not None:
            await call_back(on_pty, pty)

    async def _pump(self) -> None:
        failure: Optional[SandboxException] = None
        try:
            stream = events(
                self._client,
                self._sandbox_id,
                self._pid,
                self._call,
                self._output,
                lambda: self._disconnected,
            )
            async for event in stream:
                chunk = self._output.feed(event)
                if chunk is not None:
                    await self._record(chunk)
            for chunk in self._output.flush():
                await self._record(chunk)
        except asyncio.CancelledError:
            self._call.cancel()
        except SandboxException as error:
            failure = error
        except Exception as error:  # noqa: BLE001 - a callback failed
            failure = SandboxException(f"reading command {self._pid} failed: {error!r}")
        finally:
            self._writable = False
            async with self._changed:
                self._exit = self._output.exit
                self._failure = failure
                self._finished = True
                self._changed.notify_all()

    async def __aiter__(self) -> AsyncIterator[Chunk]:
        index = 0
        while True:
            async with self._changed:
                while index >= len(self._chunks) and not self._finished:
                    await self._changed.wait()
                pending = self._chunks[index:]
                index += len(pending)
                finished = self._finished
            for chunk in pending:
                yield chunk
            if finished and index >= len(self._chunks):
                if self._failure is not None and not self._disconnected:
                    raise self._failure
                return

    async def wait(
        self,
        on_pty: Optional[PtyCallback] = None,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
    ) -> CommandResult:
        """Waits for the end and returns the result; raises
        :class:`CommandExitException` for a non-zero exit and
        :class:`TimeoutException` when its timeout killed it."""
        async for stdout, stderr, pty in self:
            if stdout is not None:
                await call_back(on_stdout, stdout)
            elif stderr is not None:
                await call_back(on_stderr, stderr)
            elif pty is not None:
                await call_back(on_pty, pty)
        await asyncio.shield(self._task)
        exit = self._exit
        if exit is None:
            exit = self._exit = await wait_exit(self._client, self._sandbox_id, self._pid)
        return check(self._output.result(exit), self._timeout)

    async def kill(self) -> bool:
        return await kill(self._client, self._sandbox_id, self._pid)

    async def send_stdin(self, data: "str | bytes", request_timeout: Optional[float] = None) -> None:
        payload = _convert.text_bytes(data)
        if self._writable:
            step = CHUNK_BYTES // 4
            for start in range(0, len(payload), step):
                await self._call.write(processes_pb2.ProcessInput(stdin=payload[start : start + step]))
            return
        await send_stdin(self._client, self._sandbox_id, self._pid, payload, False, request_timeout)

    async def close_stdin(self, request_timeout: Optional[float] = None) -> None:
        if self._writable:
            await self._call.write(processes_pb2.ProcessInput(close_stdin=True))
            return
        await send_stdin(self._client, self._sandbox_id, self._pid, b"", True, request_timeout)

    async def disconnect(self) -> None:
        """Stops following it; it runs on."""
        self._disconnected = True
        self._call.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), 5)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            pass


async def kill(
    client: AsyncClient, sandbox_id: str, pid: int, request_timeout: Optional[float] = None
) -> bool:
    try:
        async with arpc(client.endpoint):
            await client.processes.SendSignal(
                processes_pb2.SendSignalRequest(
                    sandbox_id=sandbox_id, process=_convert.selector(pid), signal=9
                ),
                metadata=client.metadata,
                timeout=client.timeout(request_timeout),
            )
    except NotFoundException as error:
        if error.reason == "SANDBOX_NOT_FOUND":
            raise
        return False
    return True


async def send_stdin(
    client: AsyncClient,
    sandbox_id: str,
    pid: int,
    data: bytes,
    close: bool,
    request_timeout: Optional[float] = None,
) -> None:
    step = CHUNK_BYTES
    pieces = [data[i : i + step] for i in range(0, len(data), step)] or [b""]
    for index, piece in enumerate(pieces):
        async with arpc(client.endpoint):
            await client.processes.SendStdin(
                processes_pb2.SendStdinRequest(
                    sandbox_id=sandbox_id,
                    process=_convert.selector(pid),
                    data=piece,
                    close=close and index == len(pieces) - 1,
                ),
                metadata=client.metadata,
                timeout=client.timeout(request_timeout),
            )
