"""Arguments of ``run_code`` checked once for both clients."""

from __future__ import annotations

from typing import Mapping, Optional

from . import _convert
from .api.v1 import code_pb2
from .exceptions import InvalidArgumentException, TimeoutException
from .models.code import Context, Execution

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
        context_id=_convert.context_id(context),
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


def context_request(
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
