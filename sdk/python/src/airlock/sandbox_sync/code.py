"""``sandbox.run_code`` and code contexts, blocking flavour: cells of Python
or bash in interpreters that keep their variables, as E2B's code
interpreter runs them."""

from __future__ import annotations

from typing import Callable, List, Mapping, Optional

from .._client import Client
from .._errors import rpc
from ..models.code import Context, Execution, ExecutionError, OutputMessage, Result
from ..sandbox import code as core
from ..sandbox.output import CellOutput, route_cell


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
        request = core.run_request(self._sandbox_id, code, language, context, envs, timeout)
        output = CellOutput()
        call = self._client.open(self._client.code.RunCode, request)
        with rpc(self._client.endpoint):
            for event in call:
                told = output.feed(event)
                callback = route_cell(told, on_stdout, on_stderr, on_result, on_error)
                if callback is not None:
                    callback(told)
        return output.finish(timeout)

    def create_code_context(
        self,
        cwd: Optional[str] = None,
        language: Optional[str] = None,
        envs: Optional[Mapping[str, str]] = None,
        request_timeout: Optional[float] = None,
        user: Optional[str] = None,
        context_id: Optional[str] = None,
    ) -> Context:
        request = core.create_context_request(self._sandbox_id, cwd, language, envs, user, context_id)
        return core.context(self._client.call(self._client.code.CreateContext, request, request_timeout), cwd)

    def list_code_contexts(self, request_timeout: Optional[float] = None) -> List[Context]:
        request = core.list_contexts_request(self._sandbox_id)
        return core.contexts(self._client.call(self._client.code.ListContexts, request, request_timeout))

    def restart_code_context(self, context: "Context | str", request_timeout: Optional[float] = None) -> None:
        request = core.context_request(self._sandbox_id, context)
        self._client.call(self._client.code.RestartContext, request, request_timeout)

    def remove_code_context(self, context: "Context | str", request_timeout: Optional[float] = None) -> None:
        request = core.context_request(self._sandbox_id, context)
        self._client.call(self._client.code.RemoveContext, request, request_timeout)

    def interrupt_code_context(self, context: "Context | str", request_timeout: Optional[float] = None) -> None:
        request = core.context_request(self._sandbox_id, context)
        self._client.call(self._client.code.InterruptContext, request, request_timeout)
