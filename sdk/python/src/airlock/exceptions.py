"""One hierarchy of errors, mapped once from the server's gRPC statuses.

Every failed call raises a :class:`SandboxException` subclass. The server
sends a status code, a message for people, and two metadata entries for
programs: ``airlock-error`` (an ``ErrorReason`` name such as
``SANDBOX_NOT_FOUND``) and, for a bad argument, ``airlock-field`` (the
request field at fault). :func:`from_rpc_error` turns them into an
exception here and nowhere else; ``reason``, ``code`` and ``field`` keep
them for programs.

| gRPC code | reasons | exception |
| --- | --- | --- |
| UNAUTHENTICATED, PERMISSION_DENIED | UNAUTHENTICATED, OWNER_ONLY | AuthenticationException |
| INVALID_ARGUMENT | INVALID_ARGUMENT | InvalidArgumentException |
| NOT_FOUND | SANDBOX_NOT_FOUND | SandboxNotFoundException (a NotFoundException) |
| FAILED_PRECONDITION | SANDBOX_ENDED | SandboxNotFoundException (the sandbox is gone) |
| NOT_FOUND | GUEST_NOT_FOUND | FileNotFoundException (a NotFoundException): no such guest file or program |
| NOT_FOUND | NOT_FOUND | NotFoundException (an image, template, process, context, tracker) |
| FAILED_PRECONDITION | NO_NETWORK, UNSUPPORTED (e.g. a server without ingress), PORT_CLOSED, GUEST_REFUSED | SandboxException (the server's message says what to do) |
| FAILED_PRECONDITION | GUEST_REFUSED, from ``Template.build`` (a step failed) | BuildException |
| RESOURCE_EXHAUSTED | RATE_LIMITED, SANDBOX_LIMIT, QUOTA_EXCEEDED | RateLimitException |
| DEADLINE_EXCEEDED | TIMEOUT (or the client's own deadline) | TimeoutException |
| ALREADY_EXISTS | ALREADY_EXISTS | AlreadyExistsException (a snapshot's name taken, a code context's id) |
| anything else | | SandboxException |
"""

from __future__ import annotations

from typing import Any, Iterable, Optional, Tuple, Union

from .models.commands import CommandResult

#: The metadata entries of a failed call that are meant for programs.
REASON_KEY = "airlock-error"
FIELD_KEY = "airlock-field"


class SandboxException(Exception):
    """Base class of every error the SDK raises.

    ``reason`` is the server's ``ErrorReason`` name (``None`` when the
    failure did not come from the service, e.g. a broken connection),
    ``code`` the gRPC status code's name, ``field`` the request field at
    fault for an invalid argument.
    """

    def __init__(
        self,
        message: str,
        *,
        reason: Optional[str] = None,
        code: Optional[str] = None,
        field: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.code = code
        self.field = field


class TimeoutException(SandboxException):
    """A deadline passed: a command's or a cell's ``timeout``, the guest not
    answering in time, or a call's ``request_timeout``."""


class InvalidArgumentException(SandboxException):
    """A request field is missing, malformed or out of bounds (``field``
    names it)."""


class NotFoundException(SandboxException):
    """No such sandbox (or it ended), image, template, process, code
    context, change tracker, guest file or program."""


class FileNotFoundException(NotFoundException):
    """No such file or directory in the guest (E2B's name; also a guest
    program that is not there, reason ``GUEST_NOT_FOUND``)."""


class SandboxNotFoundException(NotFoundException):
    """No such sandbox (or another key's), or it ended (E2B's name)."""


class AuthenticationException(SandboxException):
    """No API key, an unknown or removed key, or a call only the machine's
    owner may make."""


class RateLimitException(SandboxException):
    """Too many calls in flight or failed authentications, or a quota or the
    server's sandbox limit reached."""


class AlreadyExistsException(SandboxException):
    """A snapshot of yours by that name, or a code context by that id,
    exists already."""


class BuildException(SandboxException):
    """A template build failed: a step exited non-zero, or its ``START``
    program did not become ready (reason ``GUEST_REFUSED``; the message
    names the step and its exit status). E2B's name."""


class NotEnoughSpaceException(SandboxException):
    """Kept for E2B compatibility; Airlock reports a full guest as a
    ``SandboxException`` with reason ``GUEST_EXHAUSTED`` or ``GUEST_REFUSED``."""


class CommandExitException(SandboxException, CommandResult):
    """A command exited with a non-zero code: the exception is also its
    :class:`CommandResult` (``stdout``, ``stderr``, ``exit_code``,
    ``error``)."""

    def __init__(self, result: CommandResult) -> None:
        CommandResult.__init__(
            self,
            stdout=result.stdout,
            stderr=result.stderr,
            exit_code=result.exit_code,
            error=result.error,
            signal=result.signal,
            timed_out=result.timed_out,
            oom_killed=result.oom_killed,
            duration_ms=result.duration_ms,
        )
        detail = f": {result.error}" if result.error else ""
        hint = missing_tool_hint(result.exit_code, result.stderr)
        SandboxException.__init__(
            self,
            f"command exited with code {result.exit_code}{detail}; stderr: "
            f"{result.stderr[-500:]!r}{hint}",
            reason="COMMAND_EXIT",
        )

    def __str__(self) -> str:
        return self.message


#: Programs E2B's images have that an Airlock image may not.
_E2B_TOOLS = ("pip", "pip3", "python", "curl", "sudo")


def missing_tool_hint(exit_code: int, stderr: str) -> str:
    """What to do when a command failed for a program E2B's images have and
    this sandbox's image does not (``pip: not found``), or for Debian's
    refusal of a system-wide ``pip install``."""
    if "externally-managed-environment" in stderr:
        return (
            "; Debian's Python refuses pip installs into the system (PEP 668; E2B's image "
            "allows them): pip install --target DIR, a venv, or --break-system-packages"
        )
    if exit_code != 127:
        return ""
    for tool in _E2B_TOOLS:
        if f"{tool}: not found" in stderr or f"{tool}: command not found" in stderr:
            return (
                f"; this sandbox's image has no {tool} (E2B's images do): create the sandbox "
                "from an image or template that has it (image=, or AIRLOCK_IMAGE for "
                "code that names none)"
                + ("; `python3` is the default image's Python" if tool == "python" else "")
            )
    return ""


def guest_hint(message: str) -> str:
    """What to do when E2B's default user or home is missing from the image."""
    if "user not found" in message:
        return (
            "; E2B's default user `user` is not in this image: leave user= out (root, "
            "home /root) or create the sandbox from an image that has the account"
        )
    if "not found: /home/user" in message:
        return (
            "; E2B's home /home/user is not in this image: Airlock's default user is root, "
            "home /root (relative paths resolve there)"
        )
    return ""


_BY_CODE = {
    "UNAUTHENTICATED": AuthenticationException,
    "PERMISSION_DENIED": AuthenticationException,
    "INVALID_ARGUMENT": InvalidArgumentException,
    "NOT_FOUND": NotFoundException,
    "ALREADY_EXISTS": AlreadyExistsException,
    "RESOURCE_EXHAUSTED": RateLimitException,
    "DEADLINE_EXCEEDED": TimeoutException,
}

_BY_REASON = {
    "SANDBOX_NOT_FOUND": SandboxNotFoundException,
    "SANDBOX_ENDED": SandboxNotFoundException,
    "GUEST_NOT_FOUND": FileNotFoundException,
    "GUEST_EXHAUSTED": SandboxException,
    # Nothing listens on the guest port: the sandbox is there, and its
    # message names the sandbox and port and says to start a server there.
    "PORT_CLOSED": SandboxException,
}

_HINTS = {
    "UNAUTHENTICATED": "check the API key (AIRLOCK_API_KEY or api_key=); "
    "`airlock key create NAME` on the server makes one",
    "OWNER_ONLY": "make this call on the server's machine, over its Unix socket",
    "INTERRUPTED": "the sandbox was saved or forked during the call; call again",
    "SHUTTING_DOWN": "the server is stopping; call again once it is back",
}


def _metadata(error: Any) -> Iterable[Tuple[str, Union[str, bytes]]]:
    try:
        trailing = error.trailing_metadata()
    except Exception:  # noqa: BLE001 - a status without metadata
        return ()
    return tuple((str(k), v) for k, v in (trailing or ()))


def _first(entries: Iterable[Tuple[str, Union[str, bytes]]], key: str) -> Optional[str]:
    for name, value in entries:
        if name == key:
            return value.decode() if isinstance(value, bytes) else value
    return None


def from_rpc_error(error: Any, endpoint: str = "the server") -> SandboxException:
    """The SDK's exception for a failed gRPC call (sync or asyncio)."""
    try:
        code = str(error.code().name)
        details = str(error.details() or "")
    except Exception:  # noqa: BLE001 - not a status at all
        return SandboxException(f"call to {endpoint} failed: {error}")
    entries = _metadata(error)
    reason = _first(entries, REASON_KEY)
    field = _first(entries, FIELD_KEY)
    message = details or code.lower().replace("_", " ")
    if reason is None:
        if code == "UNAVAILABLE":
            message = (
                f"cannot reach the Airlock server at {endpoint}: {message}; is it "
                "running (AIRLOCK_HOST, or the local server's socket)?"
            )
        elif code == "DEADLINE_EXCEEDED":
            message = f"request timed out ({message}); pass a larger request_timeout"
    elif reason in _HINTS:
        message = f"{message}; {_HINTS[reason]}"
    elif reason == "GUEST_NOT_FOUND":
        message += guest_hint(message)
    cls = _BY_REASON.get(reason or "") or _BY_CODE.get(code, SandboxException)
    return cls(message, reason=reason, code=code, field=field)
