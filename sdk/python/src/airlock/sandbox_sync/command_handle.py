""":class:`CommandHandle`: a program running in the background (or a
terminal), blocking flavour.

A thread of the handle's reads the program's events as they come, so a
program that writes a lot never waits for the caller: it decodes the output,
keeps it whole (``stdout``, ``stderr``), calls the callbacks given at the
start, and records each piece so that iterating the handle yields them from
the beginning. A stream the sandbox's save to disk interrupted is resumed
from the last offset seen; one another client took over ends, and ``wait()``
then asks the server for the exit.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable, Iterator, List, Optional

import grpc

from .. import _convert
from .._client import CHUNK_BYTES, Client
from .._errors import rpc
from .._output import Chunk, CommandOutput
from ..api.v1 import processes_pb2
from ..exceptions import (
    CommandExitException,
    NotFoundException,
    SandboxException,
    TimeoutException,
    from_rpc_error,
)
from ..models.commands import CommandResult

#: How often an interrupted stream is resumed before the error is raised.
MAX_RESUMES = 8

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
        for start in range(0, len(data), CHUNK_BYTES // 4):
            self.send(processes_pb2.ProcessInput(stdin=data[start : start + CHUNK_BYTES // 4]))

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
            if failure.reason != "INTERRUPTED" or resumes >= MAX_RESUMES:
                raise failure from None
            resumes += 1
            call = client.processes.Connect(
                processes_pb2.ConnectProcessRequest(
                    sandbox_id=sandbox_id, process=_convert.selector(pid), offset=output.offset
                ),
                metadata=client.metadata,
            )


def check(result: CommandResult, timeout: Optional[float]) -> CommandResult:
    """The result, or the exception E2B raises for it."""
    if result.timed_out:
        raise TimeoutException(
            f"the command was killed at its timeout of {timeout} s; pass a larger timeout= "
            "(0: none) or background=True",
            reason="TIMEOUT",
        )
    if result.exit_code != 0:
        raise CommandExitException(result)
    return result


class CommandHandle:
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
        self._client = client
        self._sandbox_id = sandbox_id
        self._pid = pid
        self._call = call
        self._inputs = inputs
        self._output = output
        self._timeout = timeout
        self._callbacks = (on_stdout, on_stderr, on_pty)
        self._chunks: List[Chunk] = []
        self._changed = threading.Condition()
        self._finished = False
        self._failure: Optional[SandboxException] = None
        self._exit: Optional[processes_pb2.ProcessExit] = None
        self._disconnected = False
        self._thread = threading.Thread(
            target=self._pump, name=f"airlock-command-{pid}", daemon=True
        )
        self._thread.start()

    @property
    def pid(self) -> int:
        """The program's pid in the guest."""
        return self._pid

    @property
    def stdout(self) -> str:
        """Its stdout so far."""
        return self._output.stdout

    @property
    def stderr(self) -> str:
        """Its stderr so far."""
        return self._output.stderr

    @property
    def exit_code(self) -> Optional[int]:
        """Its exit code once it ended, else ``None``."""
        return None if self._exit is None else self._exit.exit_code

    @property
    def error(self) -> Optional[str]:
        return None if self._exit is None else _convert.exit_error(self._exit)

    def _record(self, chunk: Chunk) -> None:
        on_stdout, on_stderr, on_pty = self._callbacks
        stdout, stderr, pty = chunk
        with self._changed:
            self._chunks.append(chunk)
            self._changed.notify_all()
        if stdout is not None and on_stdout:
            on_stdout(stdout)
        elif stderr is not None and on_stderr:
            on_stderr(stderr)
        elif pty is not None and on_pty:
            on_pty(pty)

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
        except SandboxException as error:
            failure = error
        except Exception as error:  # noqa: BLE001 - a callback failed
            failure = SandboxException(f"reading command {self._pid} failed: {error!r}")
        finally:
            if self._inputs is not None:
                self._inputs.close()
            with self._changed:
                self._exit = self._output.exit
                self._failure = failure
                self._finished = True
                self._changed.notify_all()

    def __iter__(self) -> Iterator[Chunk]:
        """Its output from the start, as it comes, until it ends."""
        index = 0
        while True:
            with self._changed:
                while index >= len(self._chunks) and not self._finished:
                    self._changed.wait()
                pending = self._chunks[index:]
                index += len(pending)
                finished = self._finished
            yield from pending
            if finished and index >= len(self._chunks):
                if self._failure is not None and not self._disconnected:
                    raise self._failure
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
        for stdout, stderr, pty in self:
            if stdout is not None and on_stdout:
                on_stdout(stdout)
            elif stderr is not None and on_stderr:
                on_stderr(stderr)
            elif pty is not None and on_pty:
                on_pty(pty)
        self._thread.join()
        exit = self._exit
        if exit is None:
            # Another client took the stream over, or we hung up: ask.
            with rpc(self._client.endpoint):
                exit = self._client.processes.Wait(
                    processes_pb2.WaitRequest(
                        sandbox_id=self._sandbox_id, process=_convert.selector(self._pid)
                    ),
                    metadata=self._client.metadata,
                )
            self._exit = exit
        return check(self._output.result(exit), self._timeout)

    def kill(self) -> bool:
        """Kills its whole process tree (SIGKILL); ``False`` when it is not
        there any more."""
        return kill(self._client, self._sandbox_id, self._pid)

    def send_stdin(self, data: "str | bytes", request_timeout: Optional[float] = None) -> None:
        """Bytes (text as UTF-8) for its stdin."""
        payload = _convert.text_bytes(data)
        if self._inputs is not None and not self._inputs.closed:
            self._inputs.stdin(payload)
            return
        send_stdin(self._client, self._sandbox_id, self._pid, payload, False, request_timeout)

    def close_stdin(self, request_timeout: Optional[float] = None) -> None:
        """Ends its stdin (after what was sent)."""
        if self._inputs is not None and not self._inputs.closed:
            self._inputs.send(processes_pb2.ProcessInput(close_stdin=True))
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
        with rpc(client.endpoint):
            client.processes.SendSignal(
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


def send_stdin(
    client: Client,
    sandbox_id: str,
    pid: int,
    data: bytes,
    close: bool,
    request_timeout: Optional[float] = None,
) -> None:
    step = CHUNK_BYTES
    pieces = [data[i : i + step] for i in range(0, len(data), step)] or [b""]
    for index, piece in enumerate(pieces):
        with rpc(client.endpoint):
            client.processes.SendStdin(
                processes_pb2.SendStdinRequest(
                    sandbox_id=sandbox_id,
                    process=_convert.selector(pid),
                    data=piece,
                    close=close and index == len(pieces) - 1,
                ),
                metadata=client.metadata,
                timeout=client.timeout(request_timeout),
            )
