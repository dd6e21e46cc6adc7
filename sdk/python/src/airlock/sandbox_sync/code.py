"""``sandbox.run_code`` and code contexts, blocking flavour: cells of Python
or bash in interpreters that keep their variables, as E2B's code
interpreter runs them."""

from __future__ import annotations

from typing import Callable, List, Mapping, Optional

from .. import _code_args, _convert
from .._client import Client
from .._errors import rpc
from .._output import CellOutput
from ..api.v1 import code_pb2
from ..models.code import Context, Execution, ExecutionError, OutputMessage, Result


class CodeRunner:
    """Cells and contexts of one sandbox."""

    def __init__(self, client: Client, sandbox_id: str) -> None:
        self._client = client
        self._sandbox_id = sandbox_id

    def run_code(
        self,
        code: str,
        language: Optional[str] = None,
        context: "Context | str | None" = None,
        on_stdout: Optional[Callable[[OutputMessage], object]] = None,
        on_stderr: Optional[Callable[[OutputMessage], object]] = None,
        on_result: Optional[Callable[[Result], object]] = None,
        on_error: Optional[Callable[[ExecutionError], object]] = None,
        envs: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
        request_timeout: Optional[float] = None,
    ) -> Execution:
        request = _code_args.run_request(self._sandbox_id, code, language, context, envs, timeout)
        output = CellOutput()
        call = self._client.code.RunCode(request, metadata=self._client.metadata)
        with rpc(self._client.endpoint):
            for event in call:
                told = output.feed(event)
                if isinstance(told, OutputMessage):
                    callback = on_stderr if told.error else on_stdout
                    if callback is not None:
                        callback(told)
                elif isinstance(told, Result) and on_result is not None:
                    on_result(told)
                elif isinstance(told, ExecutionError) and on_error is not None:
                    on_error(told)
        if output.done is not None and output.done.timed_out:
            raise _code_args.timed_out(output.execution, timeout)
        return output.execution

    def create_code_context(
        self,
        cwd: Optional[str] = None,
        language: Optional[str] = None,
        envs: Optional[Mapping[str, str]] = None,
        request_timeout: Optional[float] = None,
        user: Optional[str] = None,
        context_id: Optional[str] = None,
    ) -> Context:
        request = _code_args.context_request(self._sandbox_id, cwd, language, envs, user, context_id)
        with rpc(self._client.endpoint):
            made = self._client.code.CreateContext(
                request, metadata=self._client.metadata, timeout=self._client.timeout(request_timeout)
            )
        return _convert.context(made, cwd)

    def list_code_contexts(self, request_timeout: Optional[float] = None) -> List[Context]:
        with rpc(self._client.endpoint):
            listed = self._client.code.ListContexts(
                code_pb2.ListContextsRequest(sandbox_id=self._sandbox_id),
                metadata=self._client.metadata,
                timeout=self._client.timeout(request_timeout),
            )
        return [_convert.context(c) for c in listed.contexts]

    def _context_call(self, name: str, context: "Context | str", request_timeout: Optional[float]) -> None:
        request = code_pb2.ContextRequest(
            sandbox_id=self._sandbox_id, context_id=_convert.context_id(context)
        )
        with rpc(self._client.endpoint):
            getattr(self._client.code, name)(
                request, metadata=self._client.metadata, timeout=self._client.timeout(request_timeout)
            )

    def restart_code_context(self, context: "Context | str", request_timeout: Optional[float] = None) -> None:
        self._context_call("RestartContext", context, request_timeout)

    def remove_code_context(self, context: "Context | str", request_timeout: Optional[float] = None) -> None:
        self._context_call("RemoveContext", context, request_timeout)

    def interrupt_code_context(self, context: "Context | str", request_timeout: Optional[float] = None) -> None:
        self._context_call("InterruptContext", context, request_timeout)
