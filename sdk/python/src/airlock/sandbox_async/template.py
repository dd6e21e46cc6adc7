""":class:`AsyncTemplate`: E2B's template builder and its build, asyncio
(see :mod:`airlock.sandbox_sync.template`; the builder and everything but
the calls: :mod:`airlock.sandbox.templates`). ``on_build_logs`` may be a
plain function or a coroutine function."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from typing import AsyncIterator, Awaitable, Callable, List, Mapping, Optional, Sequence, Union

from typing_extensions import Unpack

from .._client import AsyncClient
from .._errors import arpc
from ..api.v1 import sandboxes_pb2, templates_pb2
from ..exceptions import NotFoundException, SandboxException
from ..models.template import LogEntry, LogEntryEnd, LogEntryStart, TemplateInfo
from ..sandbox import templates as core
from ..sandbox.lifecycle import ConnectionOpts, config
from ..sandbox.tar import Packer
from .command_handle import call_back

BuildLogsCallback = Callable[[LogEntry], Union[object, Awaitable[object]]]


async def _client(opts: ConnectionOpts, call: str) -> AsyncClient:
    return await AsyncClient.connect(config(opts, call))


async def _requests(
    header: templates_pb2.BuildTemplateRequest, packer: Optional[Packer]
) -> AsyncIterator[templates_pb2.BuildTemplateRequest]:
    """The build's stream: the header, the context's chunks (packed in a
    thread), then ``end``; a context that could not be packed is not ended
    (the server then refuses the build as cut short)."""
    yield header
    if packer is not None:
        chunks = iter(packer)
        loop = asyncio.get_running_loop()
        while True:
            try:
                chunk = await loop.run_in_executor(None, next, chunks, None)
            except SandboxException:
                return
            if chunk is None:
                break
            yield core.context_request(chunk)
    yield core.end_request()


class AsyncTemplate(core.TemplateBase):
    """A template to build, asyncio (E2B's ``AsyncTemplate``): the same
    builder as :class:`~airlock.Template`, and ``await
    AsyncTemplate.build(template, name)``."""

    @classmethod
    async def build(
        cls,
        template: core.TemplateBase,
        name: Optional[str] = None,
        *,
        alias: Optional[str] = None,
        tags: Optional[List[str]] = None,
        cpu_count: Optional[int] = None,
        memory_mb: Optional[int] = None,
        min_free_disk_mb: Optional[int] = None,
        skip_cache: bool = False,
        on_build_logs: Optional[BuildLogsCallback] = None,
        build_args: Optional[Mapping[str, str]] = None,
        allow_net: Optional[Sequence[str]] = None,
        timeout: Optional[int] = None,
        **opts: Unpack[ConnectionOpts],
    ) -> TemplateInfo:
        """Builds ``template`` on the server under ``name`` and returns it;
        see :meth:`airlock.Template.build`."""
        chosen = core.build_name(name, alias)
        core.check_build(tags, skip_cache, min_free_disk_mb)
        text = template._to_dockerfile()
        header = core.build_header(
            chosen, text, cpu_count=cpu_count, memory_mb=memory_mb,
            build_args=build_args, allow_net=allow_net, timeout=timeout,
        )
        client = await _client(opts, "AsyncTemplate.build")

        async def log(entry: LogEntry) -> None:
            if on_build_logs is not None:
                await call_back(on_build_logs, entry)

        await log(LogEntryStart(datetime.now(timezone.utc), message=f"Build of template {chosen} started"))
        packer = template._packer(text)
        logs = core.BuildLogs()
        try:
            call = client.open(client.templates.Build, _requests(header, packer))
            async with arpc(client.endpoint):
                async for event in call:
                    for entry in logs.take(event):
                        await log(entry)
                    if logs.done is not None:
                        return logs.done
            raise SandboxException(f"the server ended the build of {chosen} without its result")
        except SandboxException as error:
            if packer is not None:
                packer.check()
            raise core.build_error(error) from None
        finally:
            for entry in logs.flush():
                await log(entry)
            await log(LogEntryEnd(datetime.now(timezone.utc), message=f"Build of template {chosen} finished"))

    @classmethod
    async def list(cls, **opts: Unpack[ConnectionOpts]) -> List[TemplateInfo]:
        """Airlock: the templates a create may name: the server's own and
        yours."""
        client = await _client(opts, "AsyncTemplate.list")
        answer = await client.call(client.sandboxes.ListTemplates, sandboxes_pb2.ListTemplatesRequest())
        return [core.template_info(info) for info in answer.templates]

    @classmethod
    async def exists(cls, name: str, **opts: Unpack[ConnectionOpts]) -> bool:
        """Whether a template of that name is yours or the server's (E2B's)."""
        return any(info.name == name for info in await cls.list(**opts))

    #: E2B's older name of :meth:`exists`.
    alias_exists = exists

    @classmethod
    async def delete(cls, name: str, **opts: Unpack[ConnectionOpts]) -> bool:
        """Airlock: deletes a template of yours (sandboxes started from it run
        on); ``False`` when you have none by that name."""
        client = await _client(opts, "AsyncTemplate.delete")
        try:
            await client.call(client.templates.DeleteTemplate, templates_pb2.DeleteTemplateRequest(name=name))
        except NotFoundException:
            return False
        return True
