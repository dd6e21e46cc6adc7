"""A program's output as it streams in, shared by the blocking and the
asyncio handles: :class:`CommandOutput` decodes stdout and stderr as UTF-8
piece by piece (a character split across chunks is kept for the next one),
keeps them whole for the result, remembers the output offset to resume
from, and the exit; :func:`route` says which callback a piece goes to.
:class:`CellOutput` does the same for a cell of code, building its
:class:`~airlock.models.code.Execution`."""

from __future__ import annotations

import codecs
from typing import Any, Callable, List, Optional, Tuple

from ..api.v1 import code_pb2, processes_pb2
from ..models.code import Execution, ExecutionError, OutputMessage, Result
from ..models.commands import CommandResult
from .clock import now_ns
from .code import code_result, execution_error, timed_out
from .commands import command_result

#: One piece of output as a handle yields it: (stdout, stderr, pty), one set.
Chunk = Tuple[Optional[str], Optional[str], Optional[bytes]]
#: A callback as :func:`route` hands it back (``None``: none given).
Callback = Optional[Callable[[Any], Any]]


def route(chunk: Chunk, on_stdout: Callback, on_stderr: Callback, on_pty: Callback = None) -> Tuple[Callback, Any]:
    """The callback a piece of output goes to, and what it is given."""
    stdout, stderr, pty = chunk
    if stdout is not None:
        return on_stdout, stdout
    if stderr is not None:
        return on_stderr, stderr
    if pty is not None:
        return on_pty, pty
    return None, None


def route_cell(
    told: "OutputMessage | Result | ExecutionError | None",
    on_stdout: Callback,
    on_stderr: Callback,
    on_result: Callback,
    on_error: Callback,
) -> Callback:
    """The callback what :meth:`CellOutput.feed` returned goes to."""
    if isinstance(told, OutputMessage):
        return on_stderr if told.error else on_stdout
    if isinstance(told, Result):
        return on_result
    if isinstance(told, ExecutionError):
        return on_error
    return None


class CommandOutput:
    """What a program has written so far, and how it ended."""

    def __init__(self, pty: bool = False) -> None:
        self.pty = pty
        self._decoders = (
            codecs.getincrementaldecoder("utf-8")(errors="replace"),
            codecs.getincrementaldecoder("utf-8")(errors="replace"),
        )
        self._stdout: List[str] = []
        self._stderr: List[str] = []
        self.exit: Optional[processes_pb2.ProcessExit] = None
        #: The output offset after the last byte seen (a Connect resumes
        #: from it).
        self.offset = 0
        #: Bytes the guest dropped while nobody was attached.
        self.dropped = 0

    @property
    def stdout(self) -> str:
        return "".join(self._stdout)

    @property
    def stderr(self) -> str:
        return "".join(self._stderr)

    def feed(self, event: processes_pb2.ProcessEvent) -> Optional[Chunk]:
        """Takes one event; returns the piece of output it carried, if any."""
        kind = event.WhichOneof("event")
        if kind == "stdout" or kind == "stderr":
            output = event.stdout if kind == "stdout" else event.stderr
            data = bytes(output.data)
            self.offset = max(self.offset, output.offset + len(data))
            if self.pty:
                return (None, None, data) if data else None
            index = 0 if kind == "stdout" else 1
            text = self._decoders[index].decode(data)
            if not text:
                return None
            (self._stdout if index == 0 else self._stderr).append(text)
            return (text, None, None) if index == 0 else (None, text, None)
        if kind == "dropped":
            self.dropped += event.dropped
        elif kind == "exited":
            self.exit = event.exited
        return None

    def flush(self) -> List[Chunk]:
        """What the decoders still hold (a cut character), at the end."""
        pieces: List[Chunk] = []
        for index, parts in ((0, self._stdout), (1, self._stderr)):
            rest = self._decoders[index].decode(b"", final=True)
            if rest:
                parts.append(rest)
                pieces.append((rest, None, None) if index == 0 else (None, rest, None))
        return pieces

    def result(self, exit: Optional[processes_pb2.ProcessExit] = None) -> CommandResult:
        ended = exit or self.exit
        if ended is None:
            ended = processes_pb2.ProcessExit(exit_code=-1)
        return command_result(self.stdout, self.stderr, ended)


class CellOutput:
    """A cell's execution as its events arrive."""

    def __init__(self) -> None:
        self.execution = Execution()
        self._decoders = (
            codecs.getincrementaldecoder("utf-8")(errors="replace"),
            codecs.getincrementaldecoder("utf-8")(errors="replace"),
        )
        self.done: Optional[code_pb2.CellDone] = None

    def feed(
        self, event: code_pb2.CodeEvent
    ) -> "OutputMessage | Result | ExecutionError | None":
        """Takes one event; returns what a callback is told of it."""
        kind = event.WhichOneof("event")
        logs = self.execution.logs
        if kind == "stdout" or kind == "stderr":
            index = 0 if kind == "stdout" else 1
            text = self._decoders[index].decode(bytes(getattr(event, kind)))
            if not text:
                return None
            (logs.stdout if index == 0 else logs.stderr).append(text)
            return OutputMessage(line=text, timestamp=now_ns(), error=index == 1)
        if kind == "result":
            result = code_result(event.result)
            self.execution.results.append(result)
            return result
        if kind == "error":
            error = execution_error(event.error)
            self.execution.error = error
            return error
        if kind == "done":
            done = event.done
            self.done = done
            self.execution.execution_count = done.execution_count
            self.execution.interrupted = done.status == code_pb2.CELL_STATUS_INTERRUPTED
            self.execution.context_restarted = done.context_restarted
            self.execution.duration_ms = done.duration_ms
        return None

    def finish(self, timeout: Optional[float]) -> Execution:
        """The cell's execution, once its stream ended; raises
        :class:`~airlock.TimeoutException` (carrying it) when its timeout
        interrupted it."""
        if self.done is not None and self.done.timed_out:
            raise timed_out(self.execution, timeout)
        return self.execution
