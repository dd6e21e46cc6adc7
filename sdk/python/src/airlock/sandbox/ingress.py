"""Guest ports reached from outside through the server's HTTP ingress
(the ``Ingress`` service): the port checked before any call, the
``GetHost`` request, its answer as an
:class:`~airlock.models.ingress.ExposedPort`, and any port's host from
one port's (what lets the asyncio ``get_host`` answer without a call)."""

from __future__ import annotations

from ..api.v1 import ingress_pb2
from ..exceptions import InvalidArgumentException
from ..models.ingress import ExposedPort

PORT_MIN, PORT_MAX = 1, 65535


def guest_port(port: object, field: str = "port") -> int:
    """`port` as the API's guest port, refused here when it cannot be one
    (the server would refuse it too, with less to go on)."""
    if isinstance(port, bool) or not isinstance(port, int):
        raise InvalidArgumentException(
            f"{field}: {port!r} is not a port number; give an int from {PORT_MIN} to {PORT_MAX}",
            field=field,
        )
    if not PORT_MIN <= port <= PORT_MAX:
        raise InvalidArgumentException(
            f"{field}: {port} is not a TCP port; give one from {PORT_MIN} to {PORT_MAX}",
            field=field,
        )
    return port


def get_host_request(sandbox_id: str, port: int) -> ingress_pb2.GetHostRequest:
    return ingress_pb2.GetHostRequest(sandbox_id=sandbox_id, port=guest_port(port))


def exposed_port(port: int, found: ingress_pb2.GetHostResponse) -> ExposedPort:
    return ExposedPort(
        port=port,
        host=found.host,
        url=found.url,
        token=found.token,
        public=found.public,
        path_url=found.path_url,
        address=found.address,
    )


#: The port whose host a sandbox learns when it is created or connected;
#: :func:`host_of_port` makes any other port's from it.
KNOWN_PORT = 1


def host_of_port(known_host: str, port: int) -> str:
    """The ingress host of guest `port`, from :data:`KNOWN_PORT`'s as the
    server named it (``1-ID.airlock.localhost:7480``): the port is what
    leads its first label."""
    return f"{guest_port(port)}-{known_host.partition('-')[2]}"
