"""Cells and code contexts (the ``Code`` service): ``run_code``'s
arguments checked and its request built, the contexts' requests, and the
results, errors and contexts the server sends as models."""

from __future__ import annotations

import base64
import json
import pprint
import re
from typing import Dict, List, Mapping, Optional

from ..api.v1 import code_pb2
from ..exceptions import InvalidArgumentException, TimeoutException
from ..models.code import Context, Execution, ExecutionError, Result

#: E2B's code interpreter gives a cell five minutes unless told.
DEFAULT_TIMEOUT = 300.0


def run_request(
    sandbox_id: str,
    code: str,
    language: Optional[str],
    context: "Context | str | None",
    envs: Optional[Mapping[str, str]],
    timeout: Optional[float],
) -> code_pb2.RunCodeRequest:
    if language and context:
        raise InvalidArgumentException(
            "give run_code a context or a language, not both", field="language"
        )
    if envs:
        raise InvalidArgumentException(
            "run_code(envs=...) is not supported by Airlock: give a context its environment "
            "with create_code_context(envs=...), or every program with Sandbox.create(envs=...)",
            field="envs",
        )
    chosen = language or (context.language if isinstance(context, Context) else "")
    request = code_pb2.RunCodeRequest(
        sandbox_id=sandbox_id,
        code=shell_magics(code) if chosen in ("", "python", "python3") else code,
        # A context runs its own language (E2B names one or the other).
        language=language or (context.language if isinstance(context, Context) else ""),
        context_id=context_id(context),
    )
    seconds = DEFAULT_TIMEOUT if timeout is None else timeout
    if seconds:
        request.timeout_secs = float(seconds)
    return request


#: A line of IPython's shell escapes: ``!cmd`` or ``%pip``/``%conda`` ...
_MAGIC = re.compile(r"^([ \t]*)(?:!|%(?=(?:pip|conda|sh|system)\b))(.*)$")


def shell_magics(code: str) -> str:
    """A cell's IPython shell lines (``!pip install x``, ``%pip install x``,
    which agent frameworks send) as Python that runs them with the shell and
    prints their output; IPython's other magics stay a SyntaxError. A line
    that starts with ``!`` is never Python, so nothing else changes (but a
    ``!`` line inside a triple-quoted string would)."""
    if "!" not in code and "%" not in code:
        return code
    lines = []
    for line in code.split("\n"):
        match = _MAGIC.match(line)
        if match is None or line.lstrip().startswith("!="):
            lines.append(line)
            continue
        indent, command = match.groups()
        if line.lstrip().startswith("%") and command.startswith("system"):
            command = command[len("system"):]
        elif line.lstrip().startswith("%") and command.startswith("sh"):
            command = command[len("sh"):]
        # -1 and -2 are subprocess.PIPE and STDOUT: the output, both
        # streams in order, printed as the cell's stdout.
        lines.append(
            f"{indent}print(__import__('subprocess').run({command.strip()!r}, shell=True, "
            "stdout=-1, stderr=-2, text=True).stdout, end='')"
        )
    return "\n".join(lines)


def timed_out(execution: Execution, timeout: Optional[float]) -> TimeoutException:
    error = TimeoutException(
        f"the cell was interrupted at its timeout of {timeout or DEFAULT_TIMEOUT} s (its "
        "context and variables are kept); pass a larger timeout= (0: none)",
        reason="TIMEOUT",
    )
    error.execution = execution  # type: ignore[attr-defined]
    return error


def create_context_request(
    sandbox_id: str,
    cwd: Optional[str],
    language: Optional[str],
    envs: Optional[Mapping[str, str]],
    user: Optional[str],
    context_id: Optional[str],
) -> code_pb2.CreateContextRequest:
    return code_pb2.CreateContextRequest(
        sandbox_id=sandbox_id,
        language=language or "",
        context_id=context_id or "",
        cwd=cwd or "",
        envs=dict(envs or {}),
        user=user or "",
    )


def context_request(sandbox_id: str, context: "Context | str") -> code_pb2.ContextRequest:
    """The request of ``restart``, ``remove`` and ``interrupt``."""
    return code_pb2.ContextRequest(sandbox_id=sandbox_id, context_id=context_id(context))


def list_contexts_request(sandbox_id: str) -> code_pb2.ListContextsRequest:
    return code_pb2.ListContextsRequest(sandbox_id=sandbox_id)


def contexts(listed: code_pb2.ListContextsResponse) -> List[Context]:
    return [context(c) for c in listed.contexts]


# -- answers ----------------------------------------------------------------

_TEXT_FIELDS = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "text/latex": "latex",
    "application/javascript": "javascript",
}
_BINARY_FIELDS = {"image/png": "png", "image/jpeg": "jpeg", "application/pdf": "pdf"}


def code_result(result: code_pb2.CodeResult) -> Result:
    out = Result(is_main_result=result.is_main_result)
    extra: Dict[str, str] = {}
    for item in result.items:
        mime, data = item.mime_type, bytes(item.data)
        if mime in _TEXT_FIELDS:
            setattr(out, _TEXT_FIELDS[mime], data.decode(errors="replace"))
        elif mime in _BINARY_FIELDS:
            setattr(out, _BINARY_FIELDS[mime], base64.b64encode(data).decode())
        elif mime == "application/json":
            try:
                out.json = json.loads(data)
            except ValueError:
                extra[mime] = data.decode(errors="replace")
        else:
            try:
                extra[mime] = data.decode()
            except UnicodeDecodeError:
                extra[mime] = base64.b64encode(data).decode()
    if out.json is not None and out.text is not None and plain_json(out.json, out.text):
        # The interpreter also sends a plain value (42, a dict) as JSON;
        # IPython, and so E2B, gives JSON only for a value with _repr_json_.
        out.json = None
    out.extra = extra or None
    return out


def plain_json(value: object, text: str) -> bool:
    """Whether ``value`` is what the value's own ``repr`` says (42 and
    "42", a dict and its repr): JSON the interpreter added, not the value's
    ``_repr_json_``."""
    try:
        if isinstance(value, list) and text.startswith("("):
            value = tuple(value)  # JSON has no tuples
        return text in (repr(value), pprint.pformat(value))
    except Exception:  # noqa: BLE001 - a repr of parsed JSON does not fail
        return False


def execution_error(error: code_pb2.CodeError) -> ExecutionError:
    # The interpreter's lines end in newlines of their own (Python's
    # traceback module); E2B's traceback is its lines joined by one.
    lines = [line.rstrip("\n") for line in error.traceback]
    return ExecutionError(name=error.name, value=error.value, traceback="\n".join(lines))


def context(ctx: code_pb2.CodeContext, cwd: Optional[str] = None) -> Context:
    return Context(
        id=ctx.context_id,
        language=ctx.language,
        cwd=cwd,
        language_version=ctx.language_version,
        busy=ctx.busy,
        execution_count=ctx.execution_count,
    )


def context_id(ctx: "Context | str | None") -> str:
    if ctx is None:
        return ""
    return ctx if isinstance(ctx, str) else ctx.id
