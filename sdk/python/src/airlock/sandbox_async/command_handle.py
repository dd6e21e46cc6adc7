""":class:`AsyncCommandHandle`: a program running in the background (or a
terminal), asyncio flavour.

A task of the handle's reads the program's events as they come (a program
that writes a lot never waits for the caller), decodes and keeps the output,
awaits the callbacks given at the start (plain functions or coroutines), and
records each piece so that ``async for`` over the handle yields them from the
beginning. A stream a save to disk interrupted is resumed from the last
offset; one another client took over ends, and ``wait()`` then asks the
server for the exit. What the handle knows and decides is
:class:`airlock.sandbox.command_handle.HandleState`; this module makes the
calls.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, AsyncIterator, Awaitable, Callable, Optional, Union

import grpc

from .._client import AsyncClient
from ..api.v1 import processes_pb2
from ..exceptions import NotFoundException, SandboxException, from_rpc_error
from ..models.commands import CommandResult
from ..sandbox import commands as core
from ..sandbox.command_handle import HandleState
from ..sandbox.files import text_bytes
from ..sandbox.output import Chunk, CommandOutput, route

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
            if not core.resumable(failure, resumes):
                raise failure from None
            resumes += 1
            call = client.open(
                client.processes.Connect, core.connect_request(sandbox_id, pid, output.offset)
            )


async def wait_exit(client: AsyncClient, sandbox_id: str, pid: int) -> processes_pb2.ProcessExit:
    """The program's exit, once it ends (``Wait``: no deadline)."""
    return await client.call(client.processes.Wait, core.wait_request(sandbox_id, pid), timed=False)


class AsyncCommandHandle(HandleState):
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
        super().__init__(sandbox_id, pid, output, (on_stdout, on_stderr, on_pty), timeout)
        self._client = client
        self._call = call
        self._writable = writable
        self._changed = asyncio.Condition()
        self._task = asyncio.get_running_loop().create_task(self._pump())

    async def _record(self, chunk: Chunk) -> None:
        async with self._changed:
            self._chunks.append(chunk)
            self._changed.notify_all()
        await call_back(*self._route(chunk))

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
        except Exception as error:  # noqa: BLE001 - the SDK's, or a callback's
            failure = self._failed(error)
        finally:
            self._writable = False
            async with self._changed:
                self._end(failure)
                self._changed.notify_all()

    async def __aiter__(self) -> AsyncIterator[Chunk]:
        index = 0
        while True:
            async with self._changed:
                await self._changed.wait_for(lambda: self._ready(index))
                pending, finished = self._after(index)
            index += len(pending)
            for chunk in pending:
                yield chunk
            if self._done(index, finished):
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
        async for chunk in self:
            await call_back(*route(chunk, on_stdout, on_stderr, on_pty))
        await asyncio.shield(self._task)
        exit = self._exit
        if exit is None:
            exit = await wait_exit(self._client, self._sandbox_id, self._pid)
        return self._result(exit)

    async def kill(self) -> bool:
        return await kill(self._client, self._sandbox_id, self._pid)

    async def send_stdin(self, data: "str | bytes", request_timeout: Optional[float] = None) -> None:
        payload = text_bytes(data)
        if self._writable:
            for message in core.stdin_inputs(payload):
                await self._call.write(message)
            return
        await send_stdin(self._client, self._sandbox_id, self._pid, payload, False, request_timeout)

    async def close_stdin(self, request_timeout: Optional[float] = None) -> None:
        if self._writable:
            await self._call.write(core.close_input())
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
        await client.call(client.processes.SendSignal, core.kill_request(sandbox_id, pid), request_timeout)
    except SandboxException as error:
        if not core.kill_missed(error):
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
    for request in core.stdin_requests(sandbox_id, pid, data, close):
        await client.call(client.processes.SendStdin, request, request_timeout)
