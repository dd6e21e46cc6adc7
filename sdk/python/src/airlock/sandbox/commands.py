"""Programs in a sandbox (the ``Processes`` service): the requests that
start, attach to, feed, signal and wait for one, what ``commands.run``
makes of its arguments, a program's end as a
:class:`~airlock.models.commands.CommandResult` (or the exception E2B
raises for it), and when a stream cut short is resumed."""

from __future__ import annotations

from typing import List, Mapping, NamedTuple, Optional, Sequence, Union

from ..api.v1 import processes_pb2
from ..exceptions import (
    CommandExitException,
    NotFoundException,
    SandboxException,
    TimeoutException,
)
from ..models.commands import CommandResult, ProcessInfo, PtySize
from .files import text_bytes
from .limits import CHUNK_BYTES, STDIN_PIECE_BYTES

#: E2B's default: a foreground command is killed after a minute.
DEFAULT_TIMEOUT = 60.0
#: How often an interrupted stream is resumed before the error is raised.
MAX_RESUMES = 8

Stdin = Union[bool, str, bytes, None]

#: What ``start`` raises when the first event is not the program's start.
NOT_STARTED = "the server ended the program's stream before it started"


#: Runs ``$1`` as E2B does, with ``bash -l -c`` (bash's ``[[ ]]``, a login
#: shell's PATH), or with ``/bin/sh -c`` in an image without bash (busybox).
BASH_OR_SH = 'command -v bash >/dev/null 2>&1 && exec bash -l -c "$1"; exec /bin/sh -c "$1"'


def shell(cmd: str) -> List[str]:
    """A command line as the API runs one: E2B's ``bash -l -c``, through a
    ``/bin/sh`` that falls back to itself where bash is missing."""
    return ["/bin/sh", "-c", BASH_OR_SH, "sh", cmd]


def shown_argv(argv: List[str]) -> List[str]:
    """A program's argv as E2B reports a command's (``/bin/bash -l -c
    CMD``), the fallback wrapper of :func:`shell` left out."""
    if len(argv) == 5 and argv[:4] == ["/bin/sh", "-c", BASH_OR_SH, "sh"]:
        return ["/bin/bash", "-l", "-c", argv[4]]
    return argv


class RunPlan(NamedTuple):
    """What ``commands.run`` makes of its ``stdin``, ``background`` and
    ``timeout``."""

    #: The whole stdin, sent at once and then closed; ``None``: none.
    data: Optional[bytes]
    #: Whether stdin stays open for ``send_stdin``.
    keep_open: bool
    #: The program's timeout (a background command has none unless told).
    timeout: Optional[float]

    @property
    def stdin(self) -> bool:
        """Whether the program reads a stdin of ours."""
        return self.keep_open or self.data is not None


def plan_run(stdin: Stdin, background: bool, timeout: Optional[float]) -> RunPlan:
    data = None if isinstance(stdin, bool) or stdin is None else text_bytes(stdin)
    keep_open = stdin is True or (stdin is None and background)
    if background and timeout == DEFAULT_TIMEOUT:
        timeout = None
    return RunPlan(data=data, keep_open=keep_open, timeout=timeout)


# -- requests ---------------------------------------------------------------


def start_request(
    *,
    sandbox_id: str,
    argv: Sequence[str],
    envs: Optional[Mapping[str, str]],
    cwd: Optional[str],
    user: Optional[str],
    timeout: Optional[float],
    stdin: bool,
    pty: Optional[PtySize] = None,
    tag: Optional[str] = None,
    kill_on_disconnect: bool = False,
) -> processes_pb2.ProcessInput:
    start = processes_pb2.StartProcess(
        sandbox_id=sandbox_id,
        argv=list(argv),
        envs=dict(envs or {}),
        cwd=cwd or "",
        user=user or "",
        stdin=stdin,
        tag=tag or "",
        kill_on_disconnect=kill_on_disconnect,
    )
    if timeout:
        start.timeout_secs = float(timeout)
    if pty is not None:
        start.pty.CopyFrom(processes_pb2.TerminalSize(rows=pty.rows, cols=pty.cols))
    return processes_pb2.ProcessInput(start=start)


def selector(pid: int) -> processes_pb2.ProcessSelector:
    return processes_pb2.ProcessSelector(pid=pid)


def connect_request(sandbox_id: str, pid: int, offset: int) -> processes_pb2.ConnectProcessRequest:
    return processes_pb2.ConnectProcessRequest(
        sandbox_id=sandbox_id, process=selector(pid), offset=offset
    )


def wait_request(sandbox_id: str, pid: int) -> processes_pb2.WaitRequest:
    return processes_pb2.WaitRequest(sandbox_id=sandbox_id, process=selector(pid))


def kill_request(sandbox_id: str, pid: int) -> processes_pb2.SendSignalRequest:
    """SIGKILL to the program's whole process tree."""
    return processes_pb2.SendSignalRequest(sandbox_id=sandbox_id, process=selector(pid), signal=9)


def kill_missed(error: SandboxException) -> bool:
    """Whether a kill's error means there is no such program, or it has
    exited already (the kill answers ``False``, as E2B's does), rather than
    no such sandbox or another failure (it raises)."""
    if isinstance(error, NotFoundException):
        return error.reason != "SANDBOX_NOT_FOUND"
    # The guest refuses a signal to a program that has exited.
    return error.reason == "GUEST_REFUSED" and "exited" in error.message


def list_request(sandbox_id: str) -> processes_pb2.ListProcessesRequest:
    return processes_pb2.ListProcessesRequest(sandbox_id=sandbox_id)


def stdin_inputs(data: bytes) -> List[processes_pb2.ProcessInput]:
    """`data` for stdin on the program's own stream, in pieces."""
    return [
        processes_pb2.ProcessInput(stdin=data[start : start + STDIN_PIECE_BYTES])
        for start in range(0, len(data), STDIN_PIECE_BYTES)
    ]


def close_input() -> processes_pb2.ProcessInput:
    """Ends stdin, after what was sent, on the program's own stream."""
    return processes_pb2.ProcessInput(close_stdin=True)


def whole_stdin(data: bytes) -> List[processes_pb2.ProcessInput]:
    """A program's whole stdin on its own stream, then its end."""
    return [*stdin_inputs(data), close_input()]


def stdin_requests(
    sandbox_id: str, pid: int, data: bytes, close: bool
) -> List[processes_pb2.SendStdinRequest]:
    """`data` for a program's stdin by pid (``SendStdin``), in chunks the
    server accepts (one, empty, for no data); ``close`` ends stdin with the
    last."""
    pieces = [data[i : i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)] or [b""]
    return [
        processes_pb2.SendStdinRequest(
            sandbox_id=sandbox_id,
            process=selector(pid),
            data=piece,
            close=close and index == len(pieces) - 1,
        )
        for index, piece in enumerate(pieces)
    ]


# -- answers ----------------------------------------------------------------


def started_pid(event: object) -> Optional[int]:
    """The pid a stream's first event announces; ``None`` when the stream
    ended or began otherwise."""
    if not isinstance(event, processes_pb2.ProcessEvent) or event.WhichOneof("event") != "started":
        return None
    return event.started.pid


def not_attached(pid: int) -> SandboxException:
    """What ``connect`` raises when the stream ends before it began."""
    return SandboxException(f"the server ended the stream of process {pid} at once")


def resumable(failure: SandboxException, resumes: int) -> bool:
    """Whether a program's stream that failed so is resumed with ``Connect``
    (a save to disk or a fork interrupted it), after `resumes` resumes."""
    return failure.reason == "INTERRUPTED" and resumes < MAX_RESUMES


def exit_error(exit: processes_pb2.ProcessExit) -> Optional[str]:
    """Why a program ended other than by exiting, as words."""
    if exit.timed_out:
        return "timed out"
    if exit.oom_killed:
        return "killed by the out-of-memory killer"
    if exit.signal:
        return f"signal: {exit.signal}"
    return None


def command_result(stdout: str, stderr: str, exit: processes_pb2.ProcessExit) -> CommandResult:
    return CommandResult(
        stdout=stdout,
        stderr=stderr,
        exit_code=exit.exit_code,
        error=exit_error(exit),
        signal=exit.signal,
        timed_out=exit.timed_out,
        oom_killed=exit.oom_killed,
        duration_ms=exit.duration_ms,
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


def process_info(info: processes_pb2.ProcessInfo) -> ProcessInfo:
    argv = shown_argv(list(info.argv))
    return ProcessInfo(
        pid=info.pid,
        tag=info.tag or None,
        cmd=argv[0] if argv else "",
        args=argv[1:],
        running=info.running,
        exit_code=info.exit.exit_code if info.HasField("exit") else None,
        attached=info.attached,
        output_bytes=info.output_bytes,
        held_from=info.held_from,
    )


def processes(listed: processes_pb2.ListProcessesResponse) -> List[ProcessInfo]:
    return [process_info(info) for info in listed.processes]
