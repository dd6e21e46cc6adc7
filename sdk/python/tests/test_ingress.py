"""HTTP ingress through the SDK, against the session's server (which serves
``--ingress 127.0.0.1:0``) with real sandboxes: ``get_host``/``expose``,
requests from the host with Python's own ``urllib`` (by address with a
``Host`` header and by path: glibc does not resolve ``*.localhost``), the
traffic token and its rotation, public ports, the audit of ingress
requests, a closed port, and a server without ingress. One sandbox of the
default image (``web``) runs ``python3 -m http.server`` for the module;
the public-port one is busybox's ``httpd``."""

from __future__ import annotations

import asyncio
import os
import time
import urllib.error
import urllib.request
from typing import Dict, Iterator, Tuple

import grpc
import pytest

from airlock import (
    AsyncSandbox,
    ExposedPort,
    InvalidArgumentException,
    Sandbox,
    SandboxException,
)
from airlock._errors import rpc
from airlock.api.v1 import ingress_pb2

from .conftest import Loop, Server

#: Where the guest's HTTP servers serve files from, and what they serve:
#: bytes no text transformation would leave alone.
ROOT = "/srv/www"
PAGE = "page.bin"
BODY = os.urandom(96 * 1024) + b"\r\n\x00end"
#: How long a server started in the guest may take to listen (TCG).
READY_WITHIN = 120.0

# A request from the host to its own loopback goes to it, never through a
# proxy the environment names.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def fetch(url: str, headers: Dict[str, str]) -> Tuple[int, bytes]:
    """GET `url` with `headers`: the status and the body (also of a
    refusal)."""
    request = urllib.request.Request(url, headers=headers)
    try:
        with OPENER.open(request, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read()


def by_host(exposed: ExposedPort, path: str, headers: Dict[str, str]) -> Tuple[int, bytes]:
    """A request to the ingress's address naming the sandbox by Host."""
    return fetch(f"http://{exposed.address}/{path}", {"Host": exposed.host, **headers})


def wait_until_served(exposed: ExposedPort) -> None:
    """Returns once a server in the guest answers on the port (the ingress
    answers 502 while nothing listens there)."""
    deadline = time.monotonic() + READY_WITHIN
    while True:
        status, body = fetch(exposed.path_url + PAGE, exposed.headers)
        if status != 502:
            assert status == 200, (status, body[:300])
            return
        assert time.monotonic() < deadline, f"nothing listened on port {exposed.port}: {body!r}"
        time.sleep(0.25)


@pytest.fixture(scope="module")
def web(server: Server) -> Iterator[Sandbox]:
    """A default-image sandbox serving BODY at /page.bin on port 8000 with
    Python's http.server, started as a background command."""
    with Sandbox.create(metadata={"suite": "ingress"}) as sandbox:
        sandbox.files.write(f"{ROOT}/{PAGE}", BODY)
        sandbox.commands.run(f"python3 -m http.server 8000 --directory {ROOT}", background=True)
        wait_until_served(sandbox.expose(8000))
        yield sandbox


def test_get_host_and_expose_name_the_sandbox_port_and_ingress(web: Sandbox, server: Server) -> None:
    exposed = web.expose(8000)
    sandbox_id = web.sandbox_id
    assert web.get_host(8000) == exposed.host
    assert exposed.port == 8000
    # The host names the port and the sandbox (lowercased, as browsers do).
    assert exposed.host.lower().startswith(f"8000-{sandbox_id.lower()}.")
    assert exposed.address == server.ingress
    assert exposed.host.endswith(f":{server.ingress.rsplit(':', 1)[1]}")
    assert exposed.path_url == f"http://{server.ingress}/_sandbox/{sandbox_id}/8000/"
    assert not exposed.public
    assert exposed.token.startswith("at_")
    assert exposed.url.endswith(f"?airlock_token={exposed.token}")
    assert exposed.headers == {"X-Airlock-Token": exposed.token}
    assert exposed.token not in repr(exposed) and "airlock_token=<hidden>" in repr(exposed)
    # Another port of the same sandbox: same token, its own host.
    other = web.expose(5173)
    assert other.token == exposed.token and other.host.startswith("5173-")


def test_a_file_in_the_sandbox_through_the_ingress_by_host_and_by_path(web: Sandbox) -> None:
    exposed = web.expose(8000)
    assert by_host(exposed, PAGE, exposed.headers) == (200, BODY)
    assert fetch(exposed.path_url + PAGE, exposed.headers) == (200, BODY)
    # Without the token, either way: 401, and the body says what to send.
    for status, body in (by_host(exposed, PAGE, {}), fetch(exposed.path_url + PAGE, {})):
        assert status == 401
        assert b"X-Airlock-Token" in body and web.sandbox_id.encode() in body


def test_a_rotated_token_replaces_the_old_one_at_once(web: Sandbox) -> None:
    old = web.expose(8000)
    assert by_host(old, PAGE, old.headers) == (200, BODY)
    new_token = web.rotate_traffic_token()
    assert new_token.startswith("at_") and new_token != old.token
    new = web.expose(8000)
    assert new.token == new_token
    assert by_host(old, PAGE, old.headers)[0] == 401
    assert fetch(old.path_url + PAGE, old.headers)[0] == 401
    assert by_host(new, PAGE, new.headers) == (200, BODY)


def test_ingress_requests_are_in_the_audit_of_a_sandbox_without_network(web: Sandbox) -> None:
    assert not web.get_info().network
    exposed = web.expose(8000)
    after = max([r.seq for r in web.network.audit()], default=0)
    assert by_host(exposed, PAGE, exposed.headers)[0] == 200
    assert by_host(exposed, PAGE, {})[0] == 401
    records = web.network.audit(after_seq=after)
    assert [r.protocol for r in records] == ["ingress", "ingress"]
    assert all(r.port == 8000 and r.name.startswith("from 127.0.0.1") for r in records)
    assert (records[0].allowed, records[0].verdict) == (True, "allowed")
    assert not records[1].allowed and records[1].verdict.startswith("refused")


def test_a_port_nothing_listens_on(web: Sandbox) -> None:
    exposed = web.expose(8009)
    status, body = fetch(exposed.path_url, exposed.headers)
    assert status == 502 and b"nothing listens" in body
    # The API's raw connection to the same port: PORT_CLOSED, naming it.
    opened = ingress_pb2.ForwardRequest(open=ingress_pb2.ForwardOpen(sandbox_id=web.sandbox_id, port=8009))
    client = web._client  # the SDK's own channel and error mapping
    with pytest.raises(SandboxException) as closed:
        with rpc(client.endpoint):
            for _ in client.ingress.Forward(iter([opened]), metadata=client.metadata, timeout=60):
                pass
    assert closed.value.reason == "PORT_CLOSED"
    assert closed.value.code == grpc.StatusCode.FAILED_PRECONDITION.name
    assert "8009" in str(closed.value) and "start a server" in str(closed.value)


def test_ports_are_checked_before_any_call(web: Sandbox) -> None:
    for bad in (0, 65536, -1):
        with pytest.raises(InvalidArgumentException) as refused:
            web.get_host(bad)
        assert refused.value.field == "port" and "1 to 65535" in str(refused.value)
    with pytest.raises(InvalidArgumentException) as not_int:
        web.expose("8000")  # type: ignore[arg-type]
    assert not_int.value.field == "port"
    with pytest.raises(InvalidArgumentException) as public:
        Sandbox.create(no_image=True, public_ports=[8000, 70000])
    assert public.value.field == "public_ports"


def test_a_public_port_answers_without_a_token(server: Server) -> None:
    with Sandbox.create(no_image=True, public_ports=[8000]) as sandbox:
        assert sandbox.get_info().public_ports == [8000]
        listed = [i.public_ports for i in Sandbox.list() if i.sandbox_id == sandbox.sandbox_id]
        assert listed == [[8000]]
        sandbox.files.write(f"{ROOT}/{PAGE}", BODY)
        sandbox.commands.run(f"httpd -f -p 8000 -h {ROOT}", background=True)
        sandbox.commands.run(f"httpd -f -p 8001 -h {ROOT}", background=True)
        public = sandbox.expose(8000)
        assert public.public and public.token == "" and public.headers == {}
        assert "airlock_token" not in public.url
        wait_until_served(public)
        assert by_host(public, PAGE, {}) == (200, BODY)
        assert fetch(public.path_url + PAGE, {}) == (200, BODY)
        # Its other ports stay private.
        private = sandbox.expose(8001)
        assert not private.public and private.token
        wait_until_served(private)
        assert by_host(private, PAGE, {})[0] == 401
        assert by_host(private, PAGE, private.headers) == (200, BODY)


def test_a_server_without_ingress_says_how_to_serve_it(tls_server: Server) -> None:
    with Sandbox.create(no_image=True, socket=tls_server.socket) as sandbox:
        with pytest.raises(SandboxException) as none:
            sandbox.get_host(8000)
        assert none.value.reason == "UNSUPPORTED"
        assert none.value.code == "FAILED_PRECONDITION"
        assert "airlock serve --ingress" in str(none.value)
        with pytest.raises(SandboxException) as rich:
            sandbox.expose(8000)
        assert "--ingress" in str(rich.value)

    # The asyncio client's get_host, a plain method, raises the same.
    loop = Loop()

    async def check() -> None:
        async with await AsyncSandbox.create(no_image=True, socket=tls_server.socket) as sandbox:
            with pytest.raises(SandboxException) as none:
                sandbox.get_host(8000)
            assert none.value.reason == "UNSUPPORTED"
            assert "airlock serve --ingress" in str(none.value)

    try:
        loop.run(check())
    finally:
        loop.close()


def test_asyncio_get_host_expose_fetch_and_rotate(web: Sandbox) -> None:
    loop = Loop()

    async def check() -> None:
        sandbox = await AsyncSandbox.connect(web.sandbox_id)
        # A second server, started through the asyncio client.
        await sandbox.commands.run(f"python3 -m http.server 8002 --directory {ROOT}", background=True)
        exposed = await sandbox.expose(8002)
        # A plain method, as E2B's: E2B's f"https://{sbx.get_host(8002)}"
        # gets a host, not a coroutine's repr.
        assert sandbox.get_host(8002) == exposed.host
        assert f"{sandbox.get_host(8002)}" == exposed.host
        assert exposed.host.startswith("8002-") and not exposed.public
        running = asyncio.get_running_loop()
        await running.run_in_executor(None, wait_until_served, exposed)
        assert await running.run_in_executor(None, by_host, exposed, PAGE, exposed.headers) == (200, BODY)
        token = await sandbox.rotate_traffic_token()
        assert token != exposed.token and (await sandbox.expose(8002)).token == token
        assert (await running.run_in_executor(None, by_host, exposed, PAGE, exposed.headers))[0] == 401
        with pytest.raises(InvalidArgumentException):
            sandbox.get_host(0)
        # Created, too (not only connected), it knows its hosts at once.
        async with await AsyncSandbox.create(no_image=True) as created:
            assert created.get_host(8000) == (await created.expose(8000)).host

    try:
        loop.run(check())
    finally:
        loop.close()
