""":class:`Template`: E2B's template builder and its build, blocking
(the builder and everything but the calls: :mod:`airlock.sandbox.templates`).

``Template.build(template, name, on_build_logs=...)`` sends the template
file and, when it copies anything, its context directory as a tar stream
(``Templates.Build``), hands each step, output line and phase to
``on_build_logs`` as they happen, and returns the
:class:`~airlock.models.template.TemplateInfo` that ``Sandbox.create(name)``
starts from. ``Template.list()``, ``Template.exists(name)`` and
``Template.delete(name)`` are Airlock's.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Callable, Iterator, List, Mapping, Optional, Sequence

from typing_extensions import Unpack

from .._client import Client
from .._errors import rpc
from ..api.v1 import sandboxes_pb2, templates_pb2
from ..exceptions import NotFoundException, SandboxException
from ..models.template import LogEntry, LogEntryEnd, LogEntryStart, TemplateInfo
from ..sandbox import templates as core
from ..sandbox.lifecycle import ConnectionOpts, config
from ..sandbox.tar import Packer

BuildLogsCallback = Callable[[LogEntry], object]


def _client(opts: ConnectionOpts, call: str) -> Client:
    return Client(config(opts, call))


def _requests(header: templates_pb2.BuildTemplateRequest, packer: Optional[Packer]) -> Iterator[templates_pb2.BuildTemplateRequest]:
    """The build's stream: the header, the context's chunks, then ``end``;
    a context that could not be packed is not ended (the server then
    refuses the build as cut short)."""
    yield header
    if packer is not None:
        try:
            for chunk in packer:
                yield core.context_request(chunk)
        except SandboxException:
            return
    yield core.end_request()


class Template(core.TemplateBase):
    """A template to build (E2B's ``Template``): chain the builder's calls
    (``Template().from_base_image().copy("app.py", "/srv/")...``) or start
    from a file (``Template(file_context_path=DIR).from_dockerfile("Dockerfile")``),
    then ``Template.build(template, name)``."""

    @classmethod
    def build(
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
        """Builds ``template`` on the server under ``name`` (a template of
        yours by that name is replaced once the build succeeds) and returns
        it. ``on_build_logs`` gets a :class:`~airlock.LogEntry` for each
        step as it begins, each line it prints and each phase after the
        steps, between a :class:`~airlock.LogEntryStart` and a
        :class:`~airlock.LogEntryEnd`. ``cpu_count`` and ``memory_mb`` size
        the build's VMs and the template's sandboxes (default: the
        server's); Airlock's ``build_args`` fill the file's ``ARG``s,
        ``allow_net`` lets ``RUN`` steps reach those hosts (none otherwise),
        ``timeout`` bounds the build in seconds (default 1800). A failed step
        raises :class:`~airlock.BuildException`; a file the server cannot
        read, :class:`~airlock.InvalidArgumentException` naming its line.
        Steps whose inputs did not change since a build are not run again."""
        chosen = core.build_name(name, alias)
        core.check_build(tags, skip_cache, min_free_disk_mb)
        text = template._to_dockerfile()
        header = core.build_header(
            chosen, text, cpu_count=cpu_count, memory_mb=memory_mb,
            build_args=build_args, allow_net=allow_net, timeout=timeout,
        )
        client = _client(opts, "Template.build")

        def log(entry: LogEntry) -> None:
            if on_build_logs is not None:
                on_build_logs(entry)

        log(LogEntryStart(datetime.now(timezone.utc), message=f"Build of template {chosen} started"))
        packer = template._packer(text)
        logs = core.BuildLogs()
        try:
            call = client.open(client.templates.Build, _requests(header, packer))
            with rpc(client.endpoint):
                for event in call:
                    for entry in logs.take(event):
                        log(entry)
                    if logs.done is not None:
                        return logs.done
            raise SandboxException(f"the server ended the build of {chosen} without its result")
        except SandboxException as error:
            if packer is not None:
                packer.check()
            raise core.build_error(error) from None
        finally:
            for entry in logs.flush():
                log(entry)
            log(LogEntryEnd(datetime.now(timezone.utc), message=f"Build of template {chosen} finished"))

    @classmethod
    def list(cls, **opts: Unpack[ConnectionOpts]) -> List[TemplateInfo]:
        """Airlock: the templates a create may name: the server's own and
        yours."""
        client = _client(opts, "Template.list")
        answer = client.call(client.sandboxes.ListTemplates, sandboxes_pb2.ListTemplatesRequest())
        return [core.template_info(info) for info in answer.templates]

    @classmethod
    def exists(cls, name: str, **opts: Unpack[ConnectionOpts]) -> bool:
        """Whether a template of that name is yours or the server's (E2B's)."""
        return any(info.name == name for info in cls.list(**opts))

    #: E2B's older name of :meth:`exists`.
    alias_exists = exists

    @classmethod
    def delete(cls, name: str, **opts: Unpack[ConnectionOpts]) -> bool:
        """Airlock: deletes a template of yours (sandboxes started from it run
        on); ``False`` when you have none by that name. The server's own are
        not a key's to delete."""
        client = _client(opts, "Template.delete")
        try:
            client.call(client.templates.DeleteTemplate, templates_pb2.DeleteTemplateRequest(name=name))
        except NotFoundException:
            return False
        return True
