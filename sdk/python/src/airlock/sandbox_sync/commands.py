"""``sandbox.commands``: shell commands in the sandbox, blocking flavour.

A command line runs as ``/bin/sh -c CMD``. ``run()`` waits for it and
returns its :class:`CommandResult` (calling ``on_stdout``/``on_stderr`` as
output arrives); ``run(background=True)`` returns a :class:`CommandHandle`
at once. Programs outlive their clients: ``connect(pid)`` attaches to one
again and replays the output the guest still holds (its newest 1 MiB), which
E2B cannot do for a detached command after a while.
"""

from __future__ import annotations

from typing import Any, Iterator, List, Mapping, Optional, Sequence, Union, overload

from typing_extensions import Literal

from .. import _convert
from .._client import Client
from .._errors import rpc
from .._output import CommandOutput
from ..api.v1 import processes_pb2
from ..exceptions import SandboxException
from ..models.commands import CommandResult, ProcessInfo, PtySize
from .command_handle import (
    CommandHandle,
    Inputs,
    OutputCallback,
    PtyCallback,
    check,
    events,
    kill,
    send_stdin,
)

#: E2B's default: a foreground command is killed after a minute.
DEFAULT_TIMEOUT = 60.0

Stdin = Union[bool, str, bytes, None]


class Commands:
    """Runs and manages programs in one sandbox."""

    def __init__(self, client: Client, sandbox_id: str) -> None:
        self._client = client
        self._sandbox_id = sandbox_id

    def _open(
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
    ) -> "tuple[Any, Inputs, int]":
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
        inputs = Inputs(first)
        if not stdin and pty is None:
            inputs.close()
        call = self._client.processes.Start(iter(inputs), metadata=self._client.metadata)
        with rpc(self._client.endpoint):
            started = next(call, None)
        if started is None or started.WhichOneof("event") != "started":
            inputs.close()
            raise SandboxException("the server ended the program's stream before it started")
        return call, inputs, started.started.pid

    def start(
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
    ) -> CommandHandle:
        """Airlock: a program by its argv (no shell), in the background."""
        call, inputs, pid = self._open(
            argv, envs=envs, cwd=cwd, user=user, timeout=timeout, stdin=stdin, pty=pty, tag=tag
        )
        return CommandHandle(
            self._client,
            self._sandbox_id,
            pid,
            call,
            inputs,
            CommandOutput(pty=pty is not None),
            on_stdout=on_stdout,
            on_stderr=on_stderr,
            on_pty=on_pty,
            timeout=timeout,
        )

    @overload
    def run(
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
    def run(
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
    ) -> CommandHandle: ...

    def run(
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
    ) -> Union[CommandResult, CommandHandle]:
        """Runs ``cmd`` with ``/bin/sh -c``.

        Waits for it and returns its result, or with ``background=True``
        returns a :class:`CommandHandle` at once. ``timeout`` (seconds; 0 or
        ``None``: none) kills it in the guest; a foreground command has 60 s
        unless told, a background one no limit. ``stdin``: ``True`` keeps its
        stdin open for ``send_stdin`` (the default for a background command),
        text or bytes are its whole stdin, ``False`` (the default in the
        foreground) gives it an empty one. ``user`` defaults to root. ``tag``
        (Airlock) names it for ``connect``.
        """
        data = None if isinstance(stdin, bool) or stdin is None else _convert.text_bytes(stdin)
        keep_open = stdin is True or (stdin is None and background)
        if background and timeout == DEFAULT_TIMEOUT:
            timeout = None
        call, inputs, pid = self._open(
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
            inputs.stdin(data)
            inputs.send(processes_pb2.ProcessInput(close_stdin=True))
        if background:
            return CommandHandle(
                self._client,
                self._sandbox_id,
                pid,
                call,
                inputs,
                CommandOutput(),
                on_stdout=on_stdout,
                on_stderr=on_stderr,
                timeout=timeout,
            )
        output = CommandOutput()
        try:
            for event in events(
                self._client, self._sandbox_id, pid, call, output, lambda: False
            ):
                chunk = output.feed(event)
                if chunk is not None:
                    _deliver(chunk, on_stdout, on_stderr)
            for chunk in output.flush():
                _deliver(chunk, on_stdout, on_stderr)
        except BaseException:
            # Interrupted, or a callback failed: hang up, which ends the
            # program (a foreground command dies with its caller).
            call.cancel()
            raise
        finally:
            inputs.close()
        exit = output.exit
        if exit is None:
            with rpc(self._client.endpoint):
                exit = self._client.processes.Wait(
                    processes_pb2.WaitRequest(
                        sandbox_id=self._sandbox_id, process=_convert.selector(pid)
                    ),
                    metadata=self._client.metadata,
                )
        return check(output.result(exit), timeout)

    def connect(
        self,
        pid: int,
        timeout: Optional[float] = None,
        request_timeout: Optional[float] = None,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
        offset: int = 0,
    ) -> CommandHandle:
        """Attaches to a running (or recently ended) program, replaying its
        output from ``offset`` (0: everything the guest still holds, its
        newest 1 MiB), then following it. The previous client's stream ends:
        one client follows a program at a time."""
        call = self._client.processes.Connect(
            processes_pb2.ConnectProcessRequest(
                sandbox_id=self._sandbox_id, process=_convert.selector(pid), offset=offset
            ),
            metadata=self._client.metadata,
        )
        with rpc(self._client.endpoint):
            started = next(call, None)
        if started is None or started.WhichOneof("event") != "started":
            raise SandboxException(f"the server ended the stream of process {pid} at once")
        return CommandHandle(
            self._client,
            self._sandbox_id,
            started.started.pid,
            call,
            None,
            CommandOutput(),
            on_stdout=on_stdout,
            on_stderr=on_stderr,
            timeout=timeout,
        )

    def list(self, request_timeout: Optional[float] = None) -> List[ProcessInfo]:
        """Running and recently ended programs."""
        with rpc(self._client.endpoint):
            listed = self._client.processes.List(
                processes_pb2.ListProcessesRequest(sandbox_id=self._sandbox_id),
                metadata=self._client.metadata,
                timeout=self._client.timeout(request_timeout),
            )
        return [_convert.process_info(info) for info in listed.processes]

    def kill(self, pid: int, request_timeout: Optional[float] = None) -> bool:
        """Kills a program's whole process tree (SIGKILL); ``False`` when
        there is no such program."""
        return kill(self._client, self._sandbox_id, pid, request_timeout)

    def send_stdin(
        self, pid: int, data: "str | bytes", request_timeout: Optional[float] = None
    ) -> None:
        """Bytes (text as UTF-8) for a program's stdin."""
        send_stdin(self._client, self._sandbox_id, pid, _convert.text_bytes(data), False, request_timeout)

    def close_stdin(self, pid: int, request_timeout: Optional[float] = None) -> None:
        """Ends a program's stdin."""
        send_stdin(self._client, self._sandbox_id, pid, b"", True, request_timeout)


def _deliver(
    chunk: "tuple[Optional[str], Optional[str], Optional[bytes]]",
    on_stdout: Optional[OutputCallback],
    on_stderr: Optional[OutputCallback],
) -> None:
    stdout, stderr, _ = chunk
    if stdout is not None and on_stdout:
        on_stdout(stdout)
    elif stderr is not None and on_stderr:
        on_stderr(stderr)


__all__ = ["Commands", "CommandHandle", "Iterator"]
