"""Cells and code contexts (the ``Code`` service): ``run_code``'s
arguments checked and its request built, the contexts' requests, and the
results, errors and contexts the server sends as models."""

from __future__ import annotations

import base64
import json
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
    request = code_pb2.RunCodeRequest(
        sandbox_id=sandbox_id,
        code=code,
        # A context runs its own language (E2B names one or the other).
        language=language or (context.language if isinstance(context, Context) else ""),
        context_id=context_id(context),
    )
    seconds = DEFAULT_TIMEOUT if timeout is None else timeout
    if seconds:
        request.timeout_secs = float(seconds)
    return request


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
    out.extra = extra or None
    return out


def execution_error(error: code_pb2.CodeError) -> ExecutionError:
    return ExecutionError(name=error.name, value=error.value, traceback="\n".join(error.traceback))


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
