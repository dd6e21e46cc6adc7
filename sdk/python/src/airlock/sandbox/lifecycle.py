"""Sandboxes themselves (the ``Sandboxes`` service): the connection options
of the calls that take a sandbox id, the create and list requests, a
sandbox's info and figures as models, the paging of a listing, and the
decisions around a pause and a connect."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from typing_extensions import TypedDict

from ..api.v1 import sandboxes_pb2
from ..connection import ConnectionConfig
from ..exceptions import InvalidArgumentException
from ..models.network import ALL_TRAFFIC
from ..models.sandbox import SandboxInfo, SandboxMetrics, SandboxQuery, SandboxState, Secret
from .clock import from_ms
from .ingress import guest_port


class ConnectionOpts(TypedDict, total=False):
    """Where the server is, for calls that take a sandbox id (see
    :class:`airlock.connection.ConnectionConfig`); unset ones come from the
    environment."""

    host: Optional[str]
    api_key: Optional[str]
    ca_cert: Optional[str]
    socket: Optional[str]
    airlock_bin: Optional[str]
    request_timeout: Optional[float]


#: E2B's default lifetime of a sandbox, seconds (the server's own is an hour).
DEFAULT_TIMEOUT = 300

#: What a listing shows unless told: E2B lists running and paused sandboxes,
#: never ended ones.
LISTED_STATES = (SandboxState.RUNNING, SandboxState.PAUSED, SandboxState.ON_DISK)

_E2B_ONLY = {
    "domain": "point host= (or AIRLOCK_HOST) at the Airlock server instead",
    "api_url": "point host= (or AIRLOCK_HOST) at the Airlock server instead",
    "sandbox_url": "point host= (or AIRLOCK_HOST) at the Airlock server instead",
    "access_token": "pass api_key= (or AIRLOCK_API_KEY)",
}


def check_opts(call: str, opts: Mapping[str, Any]) -> None:
    """Refuses a keyword argument that is neither the call's own nor a
    connection option, rather than dropping it."""
    known = ConnectionOpts.__annotations__
    for name in opts:
        if name in known:
            continue
        hint = _E2B_ONLY.get(name)
        detail = (
            f"; {hint}"
            if hint
            else f"; the connection options are {', '.join(sorted(known))}"
        )
        raise TypeError(f"{call} got an unexpected keyword argument {name!r}{detail}")


#: The keyword arguments of ``create`` besides the connection options.
CREATE_ARGS = (
    "template", "timeout", "metadata", "envs", "image", "no_image", "memory_mb", "vcpus",
    "allow_net", "secrets", "cold", "workspace", "ca_certs", "allow_internet_access",
    "public_ports", "network", "snapshot",
)


def split_create(call: str, kwargs: Mapping[str, Any]) -> "tuple[Dict[str, Any], ConnectionOpts]":
    """``Sandbox(...)``'s keyword arguments as ``create``'s and the
    connection options; anything else is refused."""
    create: Dict[str, Any] = {}
    opts: Dict[str, Any] = {}
    for name, value in kwargs.items():
        (create if name in CREATE_ARGS else opts)[name] = value
    check_opts(call, opts)
    return create, ConnectionOpts(**opts)  # type: ignore[typeddict-item]


def config(opts: ConnectionOpts, call: str = "Sandbox") -> ConnectionConfig:
    check_opts(call, opts)
    return ConnectionConfig.resolve(
        host=opts.get("host"),
        api_key=opts.get("api_key"),
        ca_cert=opts.get("ca_cert"),
        socket=opts.get("socket"),
        airlock_bin=opts.get("airlock_bin"),
        request_timeout=opts.get("request_timeout"),
    )


# -- states ---------------------------------------------------------------

_STATES: Dict[int, SandboxState] = {
    sandboxes_pb2.SANDBOX_STATE_RUNNING: SandboxState.RUNNING,
    sandboxes_pb2.SANDBOX_STATE_PAUSED: SandboxState.PAUSED,
    sandboxes_pb2.SANDBOX_STATE_ON_DISK: SandboxState.ON_DISK,
    sandboxes_pb2.SANDBOX_STATE_ENDED: SandboxState.ENDED,
}
_STATE_VALUES: Dict[SandboxState, "sandboxes_pb2.SandboxState.ValueType"] = {
    SandboxState.RUNNING: sandboxes_pb2.SANDBOX_STATE_RUNNING,
    SandboxState.PAUSED: sandboxes_pb2.SANDBOX_STATE_PAUSED,
    SandboxState.ON_DISK: sandboxes_pb2.SANDBOX_STATE_ON_DISK,
    SandboxState.ENDED: sandboxes_pb2.SANDBOX_STATE_ENDED,
}


def state(value: int) -> SandboxState:
    return _STATES.get(value, SandboxState.ENDED)


def state_value(value: "SandboxState | str") -> "sandboxes_pb2.SandboxState.ValueType":
    try:
        return _STATE_VALUES[SandboxState(value)]
    except ValueError:
        names = ", ".join(s.value for s in SandboxState)
        raise InvalidArgumentException(
            f"state {value!r} is not one of {names}", field="state"
        ) from None


def should_pause(state: SandboxState, to_disk: bool) -> bool:
    """Whether a pause changes anything (E2B's ``pause`` says ``False``
    for a sandbox paused already)."""
    if state == SandboxState.RUNNING:
        return True
    return state == SandboxState.PAUSED and to_disk


def should_resume(state: SandboxState) -> bool:
    """Whether ``connect`` resumes the sandbox first."""
    return state in (SandboxState.PAUSED, SandboxState.ON_DISK)


# -- answers ----------------------------------------------------------------


def sandbox_info(info: sandboxes_pb2.SandboxInfo) -> SandboxInfo:
    return SandboxInfo(
        sandbox_id=info.sandbox_id,
        # E2B always names the template a sandbox came from; one made from
        # an image alone names its image.
        template_id=info.template or info.image,
        name=info.image or None,
        metadata=dict(info.metadata),
        started_at=from_ms(info.created_at_ms),
        end_at=from_ms(info.ends_at_ms) if info.ends_at_ms else None,
        state=state(info.state),
        cpu_count=info.vcpus,
        memory_mb=info.memory_mib,
        end_reason=info.end_reason,
        network=info.network,
        origin=info.origin,
        owner=info.owner,
        env_names=list(info.env_names),
        wall_ms=info.usage.wall_ms,
        running_ms=info.usage.running_ms,
        guest_cpu_ms=info.usage.guest_cpu_ms,
        public_ports=list(info.public_ports),
    )


def metrics(figures: sandboxes_pb2.SandboxMetrics, vcpus: int) -> List[SandboxMetrics]:
    """The figures now, as a list of one (E2B gives a series)."""
    usage = figures.usage
    running = max(usage.running_ms, 1)
    cpus = max(vcpus, 1)
    return [
        SandboxMetrics(
            timestamp=from_ms(figures.at_ms),
            cpu_count=vcpus,
            cpu_used_pct=round(100.0 * usage.guest_cpu_ms / running / cpus, 2),
            mem_total=figures.memory_total_bytes,
            mem_used=max(figures.memory_total_bytes - figures.memory_available_bytes, 0),
            programs_cpu_ms=figures.programs_cpu_ms,
            programs_memory_bytes=figures.programs_memory_bytes,
            wall_ms=usage.wall_ms,
            running_ms=usage.running_ms,
            guest_cpu_ms=usage.guest_cpu_ms,
            disk_used=figures.disk_used_bytes if figures.disk_total_bytes else None,
            disk_total=figures.disk_total_bytes or None,
        )
    ]


def forked(answer: sandboxes_pb2.ForkSandboxResponse) -> List[SandboxInfo]:
    return [sandbox_info(info) for info in answer.sandboxes]


# -- requests ---------------------------------------------------------------


def create_request(
    *,
    template: Optional[str] = None,
    image: Optional[str] = None,
    timeout: Optional[int] = None,
    metadata: Optional[Mapping[str, str]] = None,
    envs: Optional[Mapping[str, str]] = None,
    memory_mb: Optional[int] = None,
    vcpus: Optional[int] = None,
    allow_net: Optional[Sequence[str]] = None,
    secrets: Optional[Sequence[Secret]] = None,
    no_image: bool = False,
    cold: bool = False,
    workspace: Optional[str] = None,
    ca_certs: Optional[Sequence[str]] = None,
    allow_internet_access: Optional[bool] = None,
    public_ports: Optional[Sequence[int]] = None,
    network: Optional[Mapping[str, Any]] = None,
    snapshot: Optional[str] = None,
) -> sandboxes_pb2.CreateSandboxRequest:
    if network is not None:
        allow_net = list(allow_net or []) + network_rules(network)
    if allow_internet_access:
        raise InvalidArgumentException(
            "allow_internet_access=True: an Airlock sandbox has no network unless rules "
            "allow it; pass allow_net=['example.com', '*.example.org:443', ...] instead",
            field="allow_net",
        )
    request = sandboxes_pb2.CreateSandboxRequest(
        image=image or default_image(template or snapshot, no_image),
        no_image=no_image,
        template=template or "",
        memory_mib=memory_mb or 0,
        vcpus=vcpus or 0,
        cold=cold,
        metadata=dict(metadata or {}),
        envs=dict(envs or {}),
        allow_net=list(allow_net or []),
        workspace=workspace or "",
        ca_certs=list(ca_certs or []),
        public_ports=[guest_port(p, "public_ports") for p in public_ports or []],
        snapshot=snapshot or "",
    )
    request.timeout_secs = DEFAULT_TIMEOUT if timeout is None else int(timeout)
    for secret in secrets or []:
        request.secrets.append(
            sandboxes_pb2.Secret(name=secret.name, value=secret.value, hosts=list(secret.hosts))
        )
    return request


#: The image ``create`` uses when the code names none (no ``image``,
#: ``template``, ``snapshot`` or ``no_image``): E2B code that expects E2B's tools (pip,
#: numpy, a ``user`` account) runs unchanged on an image that has them.
IMAGE_ENV = "AIRLOCK_IMAGE"


def default_image(template: Optional[str], no_image: bool) -> str:
    if template or no_image:
        return ""
    return os.environ.get(IMAGE_ENV, "").strip()


def network_rules(network: Mapping[str, Any]) -> List[str]:
    """E2B's ``network={"allow_out": [...], "deny_out": [ALL_TRAFFIC]}`` as
    Airlock's allow rules: an Airlock sandbox denies everything its rules do
    not allow, so ``deny_out`` can only say what is denied already."""
    for key in network:
        if key not in ("allow_out", "deny_out"):
            raise InvalidArgumentException(
                f"network={{{key!r}: ...}} is not supported by Airlock: give allow_out "
                "(hosts, *.suffix or CIDRs), or allow_net=[...]",
                field="network",
            )
    deny = [str(rule) for rule in network.get("deny_out") or []]
    if any(rule != ALL_TRAFFIC for rule in deny):
        raise InvalidArgumentException(
            "network deny_out: an Airlock sandbox denies everything its rules do not allow; "
            "list what it may reach in allow_out (or allow_net=[...]) instead of what it may not",
            field="network",
        )
    allow = [str(rule) for rule in network.get("allow_out") or []]
    if ALL_TRAFFIC in allow:
        raise InvalidArgumentException(
            "network allow_out ALL_TRAFFIC: Airlock allows egress rule by rule; "
            "list the hosts the sandbox may reach ('example.com', '*.example.org:443')",
            field="network",
        )
    return allow


def list_request(
    metadata: Optional[Dict[str, str]],
    state: Optional[Union[SandboxState, str, Sequence[Union[SandboxState, str]]]],
    query: Optional[SandboxQuery],
    limit: Optional[int],
    next_token: Optional[str],
) -> sandboxes_pb2.ListSandboxesRequest:
    if query is not None:
        metadata = metadata or query.metadata
        state = state or query.state
    states: List[Union[SandboxState, str]] = []
    if isinstance(state, (SandboxState, str)):
        states = [state]
    elif state is not None:
        states = list(state)
    if not states:
        states = list(LISTED_STATES)
    return sandboxes_pb2.ListSandboxesRequest(
        metadata=dict(metadata or {}),
        states=[state_value(s) for s in states],
        page_size=limit or 0,
        page_token=next_token or "",
    )


class Pages:
    """What a listing's paginator keeps between pages: ``has_next`` and
    ``next_token``. The blocking and the asyncio paginators fetch the pages;
    :meth:`_next_request` says what to ask for (``None``: nothing left) and
    :meth:`_take` reads a page."""

    def __init__(self, request: sandboxes_pb2.ListSandboxesRequest) -> None:
        self._request = request
        self.has_next = True
        self.next_token: Optional[str] = request.page_token or None

    def __bool__(self) -> bool:
        return True

    def __len__(self) -> int:
        raise TypeError(self._not_a_list())

    def __getitem__(self, index: object) -> SandboxInfo:
        raise TypeError(self._not_a_list())

    def _not_a_list(self) -> str:
        return (
            f"{type(self).__name__} is not a list (nor is E2B's): page with has_next and "
            "next_items(), or iterate it for every sandbox (list(...) of it on the blocking "
            "client, `async for` on the asyncio one)"
        )

    def _next_request(self) -> Optional[sandboxes_pb2.ListSandboxesRequest]:
        if not self.has_next:
            return None
        self._request.page_token = self.next_token or ""
        return self._request

    def _take(self, page: sandboxes_pb2.ListSandboxesResponse) -> List[SandboxInfo]:
        self.next_token = page.next_page_token or None
        self.has_next = self.next_token is not None
        return [sandbox_info(info) for info in page.sandboxes]
