""":class:`CommandHandle`: a program running in the background (or a
terminal), blocking flavour.

A thread of the handle's reads the program's events as they come, so a
program that writes a lot never waits for the caller: it decodes the output,
keeps it whole (``stdout``, ``stderr``), calls the callbacks given at the
start, and records each piece so that iterating the handle yields them from
the beginning. A stream the sandbox's save to disk interrupted is resumed
from the last offset seen; one another client took over ends, and ``wait()``
then asks the server for the exit. What the handle knows and decides is
:class:`airlock.sandbox.command_handle.HandleState`; this module makes the
calls.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable, Iterator, Optional

import grpc

from .._client import Client
from ..api.v1 import processes_pb2
from ..exceptions import NotFoundException, SandboxException, from_rpc_error
from ..models.commands import CommandResult
from ..sandbox import commands as core
from ..sandbox.command_handle import HandleState

# Defined here before the core was shared; still importable from here.
from ..sandbox.commands import MAX_RESUMES as MAX_RESUMES
from ..sandbox.commands import check as check
from ..sandbox.files import text_bytes
from ..sandbox.output import Chunk, CommandOutput, route

OutputCallback = Callable[[str], object]
PtyCallback = Callable[[bytes], object]


class Inputs:
    """The client side of a ``Start`` stream: messages queued for gRPC's
    sending thread, ended by :meth:`close`."""

    def __init__(self, first: processes_pb2.ProcessInput) -> None:
        self._queue: "queue.Queue[Optional[processes_pb2.ProcessInput]]" = queue.Queue()
        self._queue.put(first)
        self.closed = False

    def __iter__(self) -> Iterator[processes_pb2.ProcessInput]:
        while True:
            item = self._queue.get()
            if item is None:
                return
            yield item

    def stdin(self, data: bytes) -> None:
        for message in core.stdin_inputs(data):
            self.send(message)

    def send(self, message: processes_pb2.ProcessInput) -> None:
        if self.closed:
            raise SandboxException("this command's input is closed")
        self._queue.put(message)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._queue.put(None)


def events(
    client: Client,
    sandbox_id: str,
    pid: int,
    call: Iterator[processes_pb2.ProcessEvent],
    output: CommandOutput,
    cancelled: Callable[[], bool],
) -> Iterator[processes_pb2.ProcessEvent]:
    """A program's events from `call`, resumed with ``Connect`` from the last
    offset when a save to disk or a fork interrupted the stream."""
    resumes = 0
    while True:
        try:
            for event in call:
                yield event
            return
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


def wait_exit(client: Client, sandbox_id: str, pid: int) -> processes_pb2.ProcessExit:
    """The program's exit, once it ends (``Wait``: no deadline)."""
    return client.call(client.processes.Wait, core.wait_request(sandbox_id, pid), timed=False)


class CommandHandle(HandleState):
    """A running program: its ``pid``, its output so far, ``wait()``,
    ``kill()``, ``send_stdin()``, and iteration over its output as
    ``(stdout, stderr, pty)`` tuples, one of them set."""

    def __init__(
        self,
        client: Client,
        sandbox_id: str,
        pid: int,
        call: Any,
        inputs: Optional[Inputs],
        output: CommandOutput,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
        on_pty: Optional[PtyCallback] = None,
        timeout: Optional[float] = None,
    ) -> None:
        super().__init__(sandbox_id, pid, output, (on_stdout, on_stderr, on_pty), timeout)
        self._client = client
        self._call = call
        self._inputs = inputs
        self._changed = threading.Condition()
        self._thread = threading.Thread(
            target=self._pump, name=f"airlock-command-{pid}", daemon=True
        )
        self._thread.start()

    def _record(self, chunk: Chunk) -> None:
        with self._changed:
            self._chunks.append(chunk)
            self._changed.notify_all()
        callback, value = self._route(chunk)
        if callback:
            callback(value)

    def _pump(self) -> None:
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
            for event in stream:
                chunk = self._output.feed(event)
                if chunk is not None:
                    self._record(chunk)
            for chunk in self._output.flush():
                self._record(chunk)
        except Exception as error:  # noqa: BLE001 - the SDK's, or a callback's
            failure = self._failed(error)
        finally:
            if self._inputs is not None:
                self._inputs.close()
            with self._changed:
                self._end(failure)
                self._changed.notify_all()

    def __iter__(self) -> Iterator[Chunk]:
        """Its output from the start, as it comes, until it ends."""
        index = 0
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._ready(index))
                pending, finished = self._after(index)
            index += len(pending)
            yield from pending
            if self._done(index, finished):
                return

    def wait(
        self,
        on_pty: Optional[PtyCallback] = None,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
    ) -> CommandResult:
        """Waits for the end and returns the result (output from the start);
        raises :class:`CommandExitException` for a non-zero exit and
        :class:`TimeoutException` when its timeout killed it. Callbacks given
        here see all of its output, from the start."""
        for chunk in self:
            callback, value = route(chunk, on_stdout, on_stderr, on_pty)
            if callback:
                callback(value)
        self._thread.join()
        exit = self._exit
        if exit is None:
            # Another client took the stream over, or we hung up: ask.
            exit = wait_exit(self._client, self._sandbox_id, self._pid)
        return self._result(exit)

    def kill(self) -> bool:
        """Kills its whole process tree (SIGKILL); ``False`` when it is not
        there any more."""
        return kill(self._client, self._sandbox_id, self._pid)

    def send_stdin(self, data: "str | bytes", request_timeout: Optional[float] = None) -> None:
        """Bytes (text as UTF-8) for its stdin."""
        payload = text_bytes(data)
        if self._inputs is not None and not self._inputs.closed:
            self._inputs.stdin(payload)
            return
        send_stdin(self._client, self._sandbox_id, self._pid, payload, False, request_timeout)

    def close_stdin(self, request_timeout: Optional[float] = None) -> None:
        """Ends its stdin (after what was sent)."""
        if self._inputs is not None and not self._inputs.closed:
            self._inputs.send(core.close_input())
            return
        send_stdin(self._client, self._sandbox_id, self._pid, b"", True, request_timeout)

    def disconnect(self) -> None:
        """Stops following it; it runs on (``commands.connect(pid)`` attaches
        again and replays what it wrote)."""
        self._disconnected = True
        self._call.cancel()
        if self._inputs is not None:
            self._inputs.close()
        self._thread.join(timeout=5)


def kill(client: Client, sandbox_id: str, pid: int, request_timeout: Optional[float] = None) -> bool:
    try:
        client.call(client.processes.SendSignal, core.kill_request(sandbox_id, pid), request_timeout)
    except SandboxException as error:
        if not core.kill_missed(error):
            raise
        return False
    return True


def send_stdin(
    client: Client,
    sandbox_id: str,
    pid: int,
    data: bytes,
    close: bool,
    request_timeout: Optional[float] = None,
) -> None:
    for request in core.stdin_requests(sandbox_id, pid, data, close):
        client.call(client.processes.SendStdin, request, request_timeout)
