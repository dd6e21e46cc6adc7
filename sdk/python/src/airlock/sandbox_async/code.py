"""``sandbox.run_code`` and code contexts, asyncio flavour (callbacks may be coroutine functions): cells of Python
or bash in interpreters that keep their variables, as E2B's code
interpreter runs them."""

from __future__ import annotations

from typing import Any, Callable, List, Mapping, Optional

from .._client import AsyncClient
from .._errors import arpc
from ..models.code import Context, Execution, ExecutionError, OutputMessage, Result
from ..sandbox import code as core
from ..sandbox.output import CellOutput, route_cell
from .command_handle import call_back


class AsyncCodeRunner:
    """Cells and contexts of one sandbox."""

    def __init__(self, client: AsyncClient, sandbox_id: str) -> None:
        self._client = client
        self._sandbox_id = sandbox_id

    async def run_code(
        self,
        code: str,
        language: Optional[str] = None,
        context: "Context | str | None" = None,
        on_stdout: Optional[Callable[[OutputMessage], Any]] = None,
        on_stderr: Optional[Callable[[OutputMessage], Any]] = None,
        on_result: Optional[Callable[[Result], Any]] = None,
        on_error: Optional[Callable[[ExecutionError], Any]] = None,
        envs: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
        request_timeout: Optional[float] = None,
    ) -> Execution:
        request = core.run_request(self._sandbox_id, code, language, context, envs, timeout)
        output = CellOutput()
        call = self._client.open(self._client.code.RunCode, request)
        async with arpc(self._client.endpoint):
            async for event in call:
                told = output.feed(event)
                await call_back(route_cell(told, on_stdout, on_stderr, on_result, on_error), told)
        return output.finish(timeout)

    async def create_code_context(
        self,
        cwd: Optional[str] = None,
        language: Optional[str] = None,
        envs: Optional[Mapping[str, str]] = None,
        request_timeout: Optional[float] = None,
        user: Optional[str] = None,
        context_id: Optional[str] = None,
    ) -> Context:
        request = core.create_context_request(self._sandbox_id, cwd, language, envs, user, context_id)
        return core.context(await self._client.call(self._client.code.CreateContext, request, request_timeout), cwd)

    async def list_code_contexts(self, request_timeout: Optional[float] = None) -> List[Context]:
        request = core.list_contexts_request(self._sandbox_id)
        return core.contexts(await self._client.call(self._client.code.ListContexts, request, request_timeout))

    async def restart_code_context(self, context: "Context | str", request_timeout: Optional[float] = None) -> None:
        request = core.context_request(self._sandbox_id, context)
        await self._client.call(self._client.code.RestartContext, request, request_timeout)

    async def remove_code_context(self, context: "Context | str", request_timeout: Optional[float] = None) -> None:
        request = core.context_request(self._sandbox_id, context)
        await self._client.call(self._client.code.RemoveContext, request, request_timeout)

    async def interrupt_code_context(self, context: "Context | str", request_timeout: Optional[float] = None) -> None:
        request = core.context_request(self._sandbox_id, context)
        await self._client.call(self._client.code.InterruptContext, request, request_timeout)
