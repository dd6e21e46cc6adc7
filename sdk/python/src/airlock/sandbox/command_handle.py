"""What a handle on a running program knows, in either client:
:class:`HandleState`, the base of :class:`~airlock.CommandHandle` and
:class:`~airlock.AsyncCommandHandle`.

A handle's reader (a thread of the blocking one, a task of the asyncio
one) records each piece of output here and, at the end, how the stream
ended; the handle's iterators take the pieces from the start. The two
handles guard this state with their own condition (a thread's, the
loop's) and decide everything else here: which callback a piece goes to,
when an iterator is done, what a failure of the reading becomes, and the
result.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

from ..api.v1 import processes_pb2
from ..exceptions import SandboxException
from ..models.commands import CommandResult
from .commands import check, exit_error
from .output import Callback, Chunk, CommandOutput, route


class HandleState:
    """A program's pid, its output so far, the pieces recorded for
    iteration, and how its stream ended."""

    def __init__(
        self,
        sandbox_id: str,
        pid: int,
        output: CommandOutput,
        callbacks: Tuple[Callback, Callback, Callback],
        timeout: Optional[float],
    ) -> None:
        self._sandbox_id = sandbox_id
        self._pid = pid
        self._output = output
        self._timeout = timeout
        #: ``on_stdout``, ``on_stderr`` and ``on_pty`` given at the start.
        self._callbacks = callbacks
        self._chunks: List[Chunk] = []
        self._finished = False
        self._failure: Optional[SandboxException] = None
        self._exit: Optional[processes_pb2.ProcessExit] = None
        self._disconnected = False

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
        return None if self._exit is None else exit_error(self._exit)

    def _route(self, chunk: Chunk) -> Tuple[Callback, Any]:
        """The callback given at the start that `chunk` goes to."""
        return route(chunk, *self._callbacks)

    def _ready(self, index: int) -> bool:
        """Whether an iterator that has taken `index` pieces has something
        to take: a piece, or the end."""
        return index < len(self._chunks) or self._finished

    def _after(self, index: int) -> Tuple[List[Chunk], bool]:
        """The pieces from `index` on, and whether the stream had ended."""
        return self._chunks[index:], self._finished

    def _done(self, index: int, finished: bool) -> bool:
        """Whether an iterator that has taken `index` pieces, having seen the
        stream `finished`, is done; raises how the stream failed, unless the
        caller hung up."""
        if not (finished and index >= len(self._chunks)):
            return False
        if self._failure is not None and not self._disconnected:
            raise self._failure
        return True

    def _failed(self, error: Exception) -> SandboxException:
        """A failure of the reading as the handle raises it: the SDK's own
        as it is, anything else (a callback's) wrapped."""
        if isinstance(error, SandboxException):
            return error
        return SandboxException(f"reading command {self._pid} failed: {error!r}")

    def _end(self, failure: Optional[SandboxException]) -> None:
        """Records the end of the stream (under the handle's condition)."""
        self._exit = self._output.exit
        self._failure = failure
        self._finished = True

    def _result(self, exit: processes_pb2.ProcessExit) -> CommandResult:
        """The result for `exit` (the stream's, or ``Wait``'s), or the
        exception E2B raises for it."""
        self._exit = exit
        return check(self._output.result(exit), self._timeout)
