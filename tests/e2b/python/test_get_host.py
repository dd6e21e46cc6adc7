"""`get_host(port)` and an HTTP fetch of a server in the sandbox, through
the front: by Host (`PORT-ID.DOMAIN`, sent to the front's address) and by
E2B's two headers on the one endpoint, carried by the ingress with the
sandbox's token. Needs envd's commands (a background `python3 -m
http.server`)."""

import os
import time
import urllib.error
import urllib.parse
import urllib.request

from e2b import Sandbox


def _fetch(headers: dict) -> tuple:
    request = urllib.request.Request(os.environ["E2B_SANDBOX_URL"] + "/hello.txt", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_get_host_and_a_fetch_of_a_server_in_the_sandbox(sandbox: Sandbox) -> None:
    sandbox.files.write("/tmp/site/hello.txt", "hello through the ingress\n")
    server = sandbox.commands.run(
        "python3 -m http.server 8080 --bind 0.0.0.0 --directory /tmp/site", background=True
    )
    try:
        host = sandbox.get_host(8080)
        assert host.startswith(f"8080-{sandbox.sandbox_id}.")
        token = sandbox._envd_access_token
        by_host = {"Host": host, "X-Access-Token": token}
        by_headers = {
            "E2b-Sandbox-Id": sandbox.sandbox_id,
            "E2b-Sandbox-Port": "8080",
            "e2b-traffic-access-token": token,
        }
        deadline = time.monotonic() + 30
        while True:
            status, body = _fetch(by_host)
            if status == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.5)  # the server is starting
        assert (status, body) == (200, b"hello through the ingress\n")
        assert _fetch(by_headers) == (200, b"hello through the ingress\n")
        # Without the token: the ingress's refusal.
        assert _fetch({"Host": host})[0] == 401
    finally:
        server.kill()
