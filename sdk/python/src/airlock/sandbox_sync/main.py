""":class:`Sandbox`: a microVM running untrusted code, blocking flavour, in
E2B's vocabulary.

``Sandbox.create()`` starts one (``with Sandbox.create() as sbx:`` kills it
on the way out), ``Sandbox.connect(id)`` reaches one that runs (resuming a
paused one), ``Sandbox.list()`` lists yours. The instance has
``commands``, ``files``, ``pty``, ``network``, ``run_code`` and the code
contexts, and the lifecycle: ``kill``, ``set_timeout``, ``get_info``,
``get_metrics``, ``is_running``, ``pause``, ``resume``, ``fork``, the
ingress: ``get_host``, ``expose``, ``rotate_traffic_token``, and the
snapshots: ``create_snapshot``, ``list_snapshots``, ``get_snapshot``,
``delete_snapshot``. The lifecycle and snapshot calls also work on the
class with a sandbox id first (``Sandbox.kill(sandbox_id)``), as E2B's do.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Union

from typing_extensions import Self, Unpack

from .._client import Client
from ..api.v1 import sandboxes_pb2
from ..connection import ConnectionConfig
from ..exceptions import NotFoundException
from ..models.ingress import ExposedPort
from ..models.snapshot import SnapshotInfo
from ..models.sandbox import (
    SandboxInfo,
    SandboxMetrics,
    SandboxQuery,
    SandboxState,
    Secret,
)
from ..sandbox import lifecycle as core
from ..sandbox.dual import either
from ..sandbox.lifecycle import ConnectionOpts, Pages, split_create
from . import ingress, snapshots
from .snapshots import SnapshotPaginator
from .code import CodeRunner
from .commands import Commands
from .files import Filesystem
from .network import Network
from .pty import Pty


def _client(opts: ConnectionOpts) -> Client:
    return Client(core.config(opts))


def _get(client: Client, sandbox_id: str, request_timeout: Optional[float] = None) -> SandboxInfo:
    request = sandboxes_pb2.GetSandboxRequest(sandbox_id=sandbox_id)
    return core.sandbox_info(client.call(client.sandboxes.Get, request, request_timeout))


def _kill(client: Client, sandbox_id: str, request_timeout: Optional[float] = None) -> bool:
    request = sandboxes_pb2.KillSandboxRequest(sandbox_id=sandbox_id)
    try:
        client.call(client.sandboxes.Kill, request, request_timeout)
    except NotFoundException:
        return False
    return True


def _set_timeout(client: Client, sandbox_id: str, timeout: int, request_timeout: Optional[float] = None) -> None:
    request = sandboxes_pb2.SetTimeoutRequest(sandbox_id=sandbox_id, timeout_secs=int(timeout))
    client.call(client.sandboxes.SetTimeout, request, request_timeout)


def _metrics(client: Client, sandbox_id: str, vcpus: int, request_timeout: Optional[float] = None) -> List[SandboxMetrics]:
    request = sandboxes_pb2.GetMetricsRequest(sandbox_id=sandbox_id)
    return core.metrics(client.call(client.sandboxes.GetMetrics, request, request_timeout), vcpus)


def _pause(client: Client, sandbox_id: str, to_disk: bool, request_timeout: Optional[float] = None) -> bool:
    if not core.should_pause(_get(client, sandbox_id, request_timeout).state, to_disk):
        return False
    request = sandboxes_pb2.PauseSandboxRequest(sandbox_id=sandbox_id, to_disk=to_disk)
    client.call(client.sandboxes.Pause, request, request_timeout)
    return True


def _resume(client: Client, sandbox_id: str, request_timeout: Optional[float] = None) -> SandboxInfo:
    request = sandboxes_pb2.ResumeSandboxRequest(sandbox_id=sandbox_id)
    return core.sandbox_info(client.call(client.sandboxes.Resume, request, request_timeout))


def _create(client: Client, request: sandboxes_pb2.CreateSandboxRequest) -> SandboxInfo:
    return core.sandbox_info(snapshots.create(client, request))


class SandboxPaginator(Pages):
    """Pages of ``Sandbox.list``: ``next_items()`` fetches the next page
    while ``has_next``; iterating it goes through every page."""

    def __init__(self, client: Client, request: sandboxes_pb2.ListSandboxesRequest) -> None:
        super().__init__(request)
        self._client = client

    def next_items(self) -> List[SandboxInfo]:
        request = self._next_request()
        if request is None:
            return []
        return self._take(self._client.call(self._client.sandboxes.List, request, timed=False))

    def __iter__(self) -> Iterator[SandboxInfo]:
        while self.has_next:
            yield from self.next_items()


class Sandbox:
    """A running sandbox."""

    def __init__(
        self,
        template: Optional[str] = None,
        timeout: Optional[int] = None,
        metadata: Optional[Mapping[str, str]] = None,
        envs: Optional[Mapping[str, str]] = None,
        *,
        _connected: Optional["tuple[Client, SandboxInfo]"] = None,
        **kwargs: Any,
    ) -> None:
        """Prefer :meth:`create`; ``Sandbox(...)`` creates one too, as E2B's
        older constructor did, with every argument of :meth:`create` (an
        unknown keyword argument raises ``TypeError``)."""
        if _connected is None:
            create, opts = split_create("Sandbox()", kwargs)
            client = _client(opts)
            request = core.create_request(
                template=template, timeout=timeout, metadata=metadata, envs=envs, **create
            )
            info = _create(client, request)
        else:
            client, info = _connected
        self._client = client
        self._info = info
        self._sandbox_id = info.sandbox_id
        self._commands = Commands(client, self._sandbox_id)
        self._files = Filesystem(client, self._sandbox_id)
        self._pty = Pty(client, self._sandbox_id, self._commands)
        self._network = Network(client, self._sandbox_id)
        self._code = CodeRunner(client, self._sandbox_id)
        self.run_code = self._code.run_code
        self.create_code_context = self._code.create_code_context
        self.list_code_contexts = self._code.list_code_contexts
        self.restart_code_context = self._code.restart_code_context
        self.remove_code_context = self._code.remove_code_context
        self.interrupt_code_context = self._code.interrupt_code_context

    @property
    def sandbox_id(self) -> str:
        return self._sandbox_id

    @property
    def commands(self) -> Commands:
        """Shell commands and programs."""
        return self._commands

    @property
    def files(self) -> Filesystem:
        """The guest's filesystem."""
        return self._files

    @property
    def pty(self) -> Pty:
        """Interactive terminals."""
        return self._pty

    @property
    def network(self) -> Network:
        """Airlock: the egress rules and their audit."""
        return self._network

    @property
    def connection_config(self) -> ConnectionConfig:
        return self._client.config

    def __repr__(self) -> str:
        return f"Sandbox(sandbox_id={self._sandbox_id!r}, endpoint={self._client.endpoint!r})"

    @classmethod
    def create(
        cls,
        template: Optional[str] = None,
        timeout: Optional[int] = None,
        metadata: Optional[Mapping[str, str]] = None,
        envs: Optional[Mapping[str, str]] = None,
        *,
        image: Optional[str] = None,
        no_image: bool = False,
        memory_mb: Optional[int] = None,
        vcpus: Optional[int] = None,
        allow_net: Optional[Sequence[str]] = None,
        secrets: Optional[Sequence[Secret]] = None,
        cold: bool = False,
        workspace: Optional[str] = None,
        ca_certs: Optional[Sequence[str]] = None,
        allow_internet_access: Optional[bool] = None,
        public_ports: Optional[Sequence[int]] = None,
        network: Optional[Mapping[str, Any]] = None,
        snapshot: Optional[str] = None,
        **opts: Unpack[ConnectionOpts],
    ) -> Self:
        """Starts a sandbox and returns once it runs.

        ``template``: a template by name (default: the image's own, made on
        first use), or a snapshot of yours by name when there is no template
        of that name (E2B's ``Sandbox.create(snapshot_id)``); ``snapshot``:
        a snapshot of yours by name, explicitly (the sandbox starts as a
        clone of it, with its memory, programs and files, at its size);
        ``image``: a root image from the server's store (default
        ``default``, Debian with Python), or ``no_image=True`` for busybox
        alone (fast, tiny); ``timeout``: seconds until it is killed (default
        300, as E2B's); ``metadata``: labels to list by; ``envs``:
        every program's and code context's environment; ``memory_mb``,
        ``vcpus``; ``allow_net``: egress rules (without them or ``secrets``
        it has no network at all); ``secrets``: credentials bound to hosts,
        never inside the guest; ``cold``: boot from the kernel;
        ``workspace``: a persistent disk by name; ``public_ports``: guest
        ports the server's HTTP ingress serves without the traffic token
        (see :meth:`expose`; at most 16). Connection options (``host``,
        ``api_key``, ``ca_cert``, ...) default to the environment.
        """
        request = core.create_request(
            template=template,
            timeout=timeout,
            metadata=metadata,
            envs=envs,
            image=image,
            no_image=no_image,
            memory_mb=memory_mb,
            vcpus=vcpus,
            allow_net=allow_net,
            secrets=secrets,
            cold=cold,
            workspace=workspace,
            ca_certs=ca_certs,
            allow_internet_access=allow_internet_access,
            public_ports=public_ports,
            network=network,
            snapshot=snapshot,
        )
        client = _client(opts)
        return cls(_connected=(client, _create(client, request)))

    def _connect(self, timeout: Optional[int] = None, request_timeout: Optional[float] = None) -> Self:
        """Reaches this sandbox again (E2B's instance ``connect``): resumes it
        if it was paused or saved to disk; ``timeout`` also sets its timeout
        from now."""
        info = _get(self._client, self._sandbox_id, request_timeout)
        if core.should_resume(info.state):
            info = _resume(self._client, self._sandbox_id, request_timeout)
        if timeout is not None:
            _set_timeout(self._client, self._sandbox_id, timeout, request_timeout)
        self._info = info
        return self

    @classmethod
    def _cls_connect(cls, sandbox_id: str, timeout: Optional[int] = None, **opts: Unpack[ConnectionOpts]) -> Self:
        """The sandbox ``sandbox_id``, resumed if it was paused or saved to
        disk; ``timeout`` also sets its timeout from now."""
        client = _client(opts)
        info = _get(client, sandbox_id)
        if core.should_resume(info.state):
            info = _resume(client, sandbox_id)
        if timeout is not None:
            _set_timeout(client, sandbox_id, timeout)
        return cls(_connected=(client, info))

    connect = either(_connect, _cls_connect)

    @classmethod
    def list(
        cls,
        metadata: Optional[Dict[str, str]] = None,
        state: Optional[Union[SandboxState, str, Sequence[Union[SandboxState, str]]]] = None,
        *,
        query: Optional[SandboxQuery] = None,
        limit: Optional[int] = None,
        next_token: Optional[str] = None,
        **opts: Unpack[ConnectionOpts],
    ) -> SandboxPaginator:
        """Your sandboxes carrying every label of ``metadata``, in any of
        ``state`` (default: running, paused and on disk, as E2B lists; pass
        ``SandboxState.ENDED`` for ended ones), in pages of ``limit``
        (default 100)."""
        request = core.list_request(metadata, state, query, limit, next_token)
        return SandboxPaginator(_client(opts), request)

    def _kill(self, request_timeout: Optional[float] = None) -> bool:
        """Kills the sandbox; ``False`` when it was not there."""
        return _kill(self._client, self._sandbox_id, request_timeout)

    @staticmethod
    def _cls_kill(sandbox_id: str, **opts: Unpack[ConnectionOpts]) -> bool:
        return _kill(_client(opts), sandbox_id)

    kill = either(_kill, _cls_kill)

    def _set_timeout(self, timeout: int, request_timeout: Optional[float] = None) -> None:
        """Kills the sandbox ``timeout`` seconds from now (0: never; only the
        server machine's owner may)."""
        _set_timeout(self._client, self._sandbox_id, timeout, request_timeout)

    @staticmethod
    def _cls_set_timeout(sandbox_id: str, timeout: int, **opts: Unpack[ConnectionOpts]) -> None:
        _set_timeout(_client(opts), sandbox_id, timeout)

    set_timeout = either(_set_timeout, _cls_set_timeout)

    def _get_info(self, request_timeout: Optional[float] = None) -> SandboxInfo:
        """The sandbox's state, labels, size, times and usage."""
        self._info = _get(self._client, self._sandbox_id, request_timeout)
        return self._info

    @staticmethod
    def _cls_get_info(sandbox_id: str, **opts: Unpack[ConnectionOpts]) -> SandboxInfo:
        return _get(_client(opts), sandbox_id)

    get_info = either(_get_info, _cls_get_info)

    def _get_metrics(self, request_timeout: Optional[float] = None) -> List[SandboxMetrics]:
        """Its figures now, as a list of one (E2B gives a series)."""
        return _metrics(self._client, self._sandbox_id, self._info.cpu_count, request_timeout)

    @staticmethod
    def _cls_get_metrics(sandbox_id: str, **opts: Unpack[ConnectionOpts]) -> List[SandboxMetrics]:
        client = _client(opts)
        return _metrics(client, sandbox_id, _get(client, sandbox_id).cpu_count)

    get_metrics = either(_get_metrics, _cls_get_metrics)

    def _pause(self, to_disk: bool = False, request_timeout: Optional[float] = None) -> bool:
        """Stops its CPUs (memory kept), or with ``to_disk`` saves it to disk
        and ends its VM process; the next call resumes it. ``False`` when it
        was paused already."""
        return _pause(self._client, self._sandbox_id, to_disk, request_timeout)

    @staticmethod
    def _cls_pause(sandbox_id: str, to_disk: bool = False, **opts: Unpack[ConnectionOpts]) -> bool:
        return _pause(_client(opts), sandbox_id, to_disk)

    pause = either(_pause, _cls_pause)
    #: E2B's older name of :meth:`pause`.
    beta_pause = either(_pause, _cls_pause)

    def _resume(self, request_timeout: Optional[float] = None) -> None:
        """Starts a paused or saved sandbox again (any call does too)."""
        self._info = _resume(self._client, self._sandbox_id, request_timeout)

    @classmethod
    def _cls_resume(cls, sandbox_id: str, **opts: Unpack[ConnectionOpts]) -> "Sandbox":
        client = _client(opts)
        return cls(_connected=(client, _resume(client, sandbox_id)))

    resume = either(_resume, _cls_resume)

    def is_running(self, request_timeout: Optional[float] = None) -> bool:
        """Whether it runs (not paused, on disk or ended)."""
        try:
            return self._get_info(request_timeout).state == SandboxState.RUNNING
        except NotFoundException:
            return False

    def get_host(self, port: int, request_timeout: Optional[float] = None) -> str:
        """The host through which guest ``port`` is reached from outside the
        sandbox: ``8000-ID.airlock.localhost:7480``, for a request's ``Host``
        (a browser or curl resolves ``*.localhost`` to loopback). E2B's
        ``get_host`` computes its host locally; Airlock's asks the server,
        whose HTTP ingress (``airlock serve --ingress``) serves it, and
        unless the port was made public at create a request also needs the
        sandbox's traffic token: :meth:`expose` gives both, and the other
        ways in. A server without ingress raises ``SandboxException``
        (reason ``UNSUPPORTED``) saying how to serve it; a port outside 1 to
        65535 raises ``InvalidArgumentException``. Nothing needs to listen
        on the port yet."""
        return (self.expose(port, request_timeout)).host

    def expose(self, port: int, request_timeout: Optional[float] = None) -> ExposedPort:
        """Airlock: everything needed to reach guest ``port`` through the
        server's HTTP ingress, as an :class:`~airlock.ExposedPort`: ``url``
        for a browser (with the token), ``host``, ``token`` and ``headers``
        (``X-Airlock-Token``, none for a public port), ``public``,
        ``address`` (connect there with ``Host: host``) and ``path_url``
        (``http://ADDRESS/_sandbox/ID/PORT/``, for clients that cannot
        resolve ``*.localhost``, such as Python's ``urllib``). What the
        CLI's ``airlock sandbox expose ID PORT`` prints. It only reads:
        the server's ingress serves every port already. Raises as
        :meth:`get_host` does."""
        return ingress.expose(self._client, self._sandbox_id, port, request_timeout)

    def rotate_traffic_token(self, request_timeout: Optional[float] = None) -> str:
        """Airlock: replaces the sandbox's traffic token and returns the new
        one. The old token is refused (401) from the next request on;
        connections already open stay open. Ports made public at create
        need no token either way."""
        return ingress.rotate_token(self._client, self._sandbox_id, request_timeout)

    def fork(self, count: int = 1, request_timeout: Optional[float] = None) -> List[Self]:
        """Airlock: ``count`` new sandboxes with this one's memory, programs
        and files, each with its own id, hostname and entropy."""
        request = sandboxes_pb2.ForkSandboxRequest(sandbox_id=self._sandbox_id, count=count)
        forked = self._client.call(self._client.sandboxes.Fork, request, request_timeout)
        return [type(self)(_connected=(self._client, info)) for info in core.forked(forked)]

    # -- snapshots -----------------------------------------------------------

    def _create_snapshot(
        self, name: Optional[str] = None, *, mode: Optional[str] = None, request_timeout: Optional[float] = None
    ) -> SnapshotInfo:
        """Saves the sandbox (running, paused or on disk) as a snapshot of
        yours named ``name`` (default: ``snapshot-`` and 16 hex digits): its
        memory, running programs and files. A running sandbox is stopped
        only while its memory is copied (``paused_ms``), then runs on.
        ``Sandbox.create(info.snapshot_id)`` starts clones of it. A name you
        have taken raises :class:`~airlock.AlreadyExistsException`; the key's
        quota, :class:`~airlock.RateLimitException`. ``mode="filesystem"``
        (E2B's files-only snapshot) is refused: Airlock's keep memory."""
        return snapshots.take(self._client, self._sandbox_id, name, mode, request_timeout)

    @staticmethod
    def _cls_create_snapshot(
        sandbox_id: str, name: Optional[str] = None, *, mode: Optional[str] = None, **opts: Unpack[ConnectionOpts]
    ) -> SnapshotInfo:
        return snapshots.take(_client(opts), sandbox_id, name, mode)

    create_snapshot = either(_create_snapshot, _cls_create_snapshot)

    def _list_snapshots(
        self, limit: Optional[int] = None, next_token: Optional[str] = None, name: Optional[str] = None
    ) -> SnapshotPaginator:
        """The snapshots of yours taken of this sandbox, as E2B's paginator
        (``has_next``, ``next_items()``; iterate it for all)."""
        return SnapshotPaginator(self._client, self._sandbox_id, name, limit, next_token)

    @staticmethod
    def _cls_list_snapshots(
        sandbox_id: Optional[str] = None,
        limit: Optional[int] = None,
        next_token: Optional[str] = None,
        name: Optional[str] = None,
        **opts: Unpack[ConnectionOpts],
    ) -> SnapshotPaginator:
        """Your snapshots (of ``sandbox_id`` only, if given), as E2B's
        paginator; ``name`` keeps the one of that name."""
        return SnapshotPaginator(_client(opts), sandbox_id, name, limit, next_token)

    list_snapshots = either(_list_snapshots, _cls_list_snapshots)

    @staticmethod
    def get_snapshot(snapshot_id: str, **opts: Unpack[ConnectionOpts]) -> SnapshotInfo:
        """Airlock: a snapshot of yours by name;
        :class:`~airlock.NotFoundException` when you have none by that name
        (another key's does not exist for you)."""
        return snapshots.get(_client(opts), snapshot_id)

    @staticmethod
    def delete_snapshot(snapshot_id: str, **opts: Unpack[ConnectionOpts]) -> bool:
        """Deletes a snapshot of yours: its name at once, its files once no
        sandbox started from it needs them (they run on). ``False`` when you
        have none by that name."""
        return snapshots.delete(_client(opts), snapshot_id)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self._kill()

