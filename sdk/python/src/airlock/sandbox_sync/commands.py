"""``sandbox.commands``: shell commands in the sandbox, blocking flavour.

A command line runs as ``/bin/sh -c CMD``. ``run()`` waits for it and
returns its :class:`CommandResult` (calling ``on_stdout``/``on_stderr`` as
output arrives); ``run(background=True)`` returns a :class:`CommandHandle`
at once. Programs outlive their clients: ``connect(pid)`` attaches to one
again and replays the output the guest still holds (its newest 1 MiB), which
E2B cannot do for a detached command after a while. The requests and
decisions are :mod:`airlock.sandbox.commands`'.
"""

from __future__ import annotations

from typing import Any, Iterator, List, Mapping, Optional, Sequence, Union, overload

from typing_extensions import Literal

from .._client import Client
from .._errors import rpc
from ..exceptions import SandboxException
from ..models.commands import CommandResult, ProcessInfo, PtySize
from ..sandbox import commands as core
from ..sandbox.commands import DEFAULT_TIMEOUT, Stdin
from ..sandbox.files import text_bytes
from ..sandbox.output import CommandOutput, route
from .command_handle import (
    CommandHandle,
    Inputs,
    OutputCallback,
    PtyCallback,
    events,
    kill,
    send_stdin,
    wait_exit,
)


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
        inputs = Inputs(first)
        if not stdin and pty is None:
            inputs.close()
        call = self._client.open(self._client.processes.Start, iter(inputs))
        with rpc(self._client.endpoint):
            pid = core.started_pid(next(call, None))
        if pid is None:
            inputs.close()
            raise SandboxException(core.NOT_STARTED)
        return call, inputs, pid

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
        plan = core.plan_run(stdin, background, timeout)
        call, inputs, pid = self._open(
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
            for message in core.whole_stdin(plan.data):
                inputs.send(message)
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
                timeout=plan.timeout,
            )
        output = CommandOutput()
        try:
            for event in events(self._client, self._sandbox_id, pid, call, output, lambda: False):
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
            exit = wait_exit(self._client, self._sandbox_id, pid)
        return core.check(output.result(exit), plan.timeout)

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
        call = self._client.open(
            self._client.processes.Connect, core.connect_request(self._sandbox_id, pid, offset)
        )
        with rpc(self._client.endpoint):
            started = core.started_pid(next(call, None))
        if started is None:
            raise core.not_attached(pid)
        return CommandHandle(
            self._client,
            self._sandbox_id,
            started,
            call,
            None,
            CommandOutput(),
            on_stdout=on_stdout,
            on_stderr=on_stderr,
            timeout=timeout,
        )

    def list(self, request_timeout: Optional[float] = None) -> List[ProcessInfo]:
        """Running and recently ended programs."""
        listed = self._client.call(
            self._client.processes.List, core.list_request(self._sandbox_id), request_timeout
        )
        return core.processes(listed)

    def kill(self, pid: int, request_timeout: Optional[float] = None) -> bool:
        """Kills a program's whole process tree (SIGKILL); ``False`` when
        there is no such program."""
        return kill(self._client, self._sandbox_id, pid, request_timeout)

    def send_stdin(
        self, pid: int, data: "str | bytes", request_timeout: Optional[float] = None
    ) -> None:
        """Bytes (text as UTF-8) for a program's stdin."""
        send_stdin(self._client, self._sandbox_id, pid, text_bytes(data), False, request_timeout)

    def close_stdin(self, pid: int, request_timeout: Optional[float] = None) -> None:
        """Ends a program's stdin."""
        send_stdin(self._client, self._sandbox_id, pid, b"", True, request_timeout)


def _deliver(
    chunk: "tuple[Optional[str], Optional[str], Optional[bytes]]",
    on_stdout: Optional[OutputCallback],
    on_stderr: Optional[OutputCallback],
) -> None:
    callback, value = route(chunk, on_stdout, on_stderr)
    if callback:
        callback(value)


__all__ = ["Commands", "CommandHandle", "Iterator"]
