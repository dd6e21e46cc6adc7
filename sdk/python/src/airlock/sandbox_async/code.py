"""``sandbox.run_code`` and code contexts, asyncio flavour (callbacks may be coroutine functions): cells of Python
or bash in interpreters that keep their variables, as E2B's code
interpreter runs them."""

from __future__ import annotations

from typing import Any, Callable, List, Mapping, Optional

from .. import _code_args, _convert
from .._client import AsyncClient
from .._errors import arpc
from .._output import CellOutput
from ..api.v1 import code_pb2
from .command_handle import call_back
from ..models.code import Context, Execution, ExecutionError, OutputMessage, Result


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
        request = _code_args.run_request(self._sandbox_id, code, language, context, envs, timeout)
        output = CellOutput()
        call = self._client.code.RunCode(request, metadata=self._client.metadata)
        async with arpc(self._client.endpoint):
            async for event in call:
                told = output.feed(event)
                if isinstance(told, OutputMessage):
                    callback = on_stderr if told.error else on_stdout
                    await call_back(callback, told)
                elif isinstance(told, Result):
                    await call_back(on_result, told)
                elif isinstance(told, ExecutionError):
                    await call_back(on_error, told)
        if output.done is not None and output.done.timed_out:
            raise _code_args.timed_out(output.execution, timeout)
        return output.execution

    async def create_code_context(
        self,
        cwd: Optional[str] = None,
        language: Optional[str] = None,
        envs: Optional[Mapping[str, str]] = None,
        request_timeout: Optional[float] = None,
        user: Optional[str] = None,
        context_id: Optional[str] = None,
    ) -> Context:
        request = _code_args.context_request(self._sandbox_id, cwd, language, envs, user, context_id)
        async with arpc(self._client.endpoint):
            made = await self._client.code.CreateContext(
                request, metadata=self._client.metadata, timeout=self._client.timeout(request_timeout)
            )
        return _convert.context(made, cwd)

    async def list_code_contexts(self, request_timeout: Optional[float] = None) -> List[Context]:
        async with arpc(self._client.endpoint):
            listed = await self._client.code.ListContexts(
                code_pb2.ListContextsRequest(sandbox_id=self._sandbox_id),
                metadata=self._client.metadata,
                timeout=self._client.timeout(request_timeout),
            )
        return [_convert.context(c) for c in listed.contexts]

    async def _context_call(self, name: str, context: "Context | str", request_timeout: Optional[float]) -> None:
        request = code_pb2.ContextRequest(
            sandbox_id=self._sandbox_id, context_id=_convert.context_id(context)
        )
        async with arpc(self._client.endpoint):
            await getattr(self._client.code, name)(
                request, metadata=self._client.metadata, timeout=self._client.timeout(request_timeout)
            )

    async def restart_code_context(self, context: "Context | str", request_timeout: Optional[float] = None) -> None:
        await self._context_call("RestartContext", context, request_timeout)

    async def remove_code_context(self, context: "Context | str", request_timeout: Optional[float] = None) -> None:
        await self._context_call("RemoveContext", context, request_timeout)

    async def interrupt_code_context(self, context: "Context | str", request_timeout: Optional[float] = None) -> None:
        await self._context_call("InterruptContext", context, request_timeout)
