"""Reaching a server a program started in a sandbox: :class:`ExposedPort`,
where the server's HTTP ingress (``airlock serve --ingress``) serves one
guest port, and with which token."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

#: The header that carries a sandbox's traffic token to the ingress.
TOKEN_HEADER = "X-Airlock-Token"


@dataclass(frozen=True)
class ExposedPort:
    """Where guest port ``port`` of a sandbox is reached through the
    server's HTTP ingress (``sandbox.expose(port)``; the CLI's ``airlock
    sandbox expose``). Nothing needs to listen on the port yet.

    Three ways in, for three kinds of client:

    - ``url`` for a browser: ``http://8000-ID.airlock.localhost:7480/``,
      with ``?airlock_token=TOKEN`` unless the port is public (the ingress
      answers it with a cookie and a redirect to the URL without it);
    - ``address`` to connect to, with the ``Host`` header set to ``host``
      and the token in ``headers``, for clients that cannot resolve
      ``*.localhost`` names (glibc, so Python's ``urllib``, does not);
    - ``path_url`` (``http://ADDRESS/_sandbox/ID/8000/``, the prefix taken
      off before the request reaches the guest), with ``headers``.

    Its ``repr`` leaves the token out.
    """

    #: The guest port.
    port: int
    #: The Host a request names: ``8000-ID.airlock.localhost:7480``.
    host: str
    #: A URL to open in a browser, with the token unless the port is public.
    url: str
    #: The sandbox's traffic token ("" when the port is public):
    #: ``rotate_traffic_token()`` replaces it.
    token: str
    #: Whether the port was made public at create (``public_ports``).
    public: bool
    #: The same port by path, on the ingress's own address.
    path_url: str
    #: The ingress's own address (``127.0.0.1:7480``), to connect to.
    address: str

    @property
    def headers(self) -> Dict[str, str]:
        """The headers a request needs besides its ``Host``: the token's,
        or none for a public port."""
        return {TOKEN_HEADER: self.token} if self.token else {}

    def __repr__(self) -> str:
        # The token opens the sandbox's every private port: kept out of
        # logs, as a Secret's value is.
        url = self.url.replace(self.token, "<hidden>") if self.token else self.url
        return (
            f"ExposedPort(port={self.port}, host={self.host!r}, url={url!r}, "
            f"public={self.public}, path_url={self.path_url!r}, address={self.address!r})"
        )
