"""envd's process service through the official ``e2b`` SDK: commands in the
foreground and the background with their output callbacks, stdin, kill,
the command timeout, cwd, envs, user, a failing command's exit error, and a
PTY (create, send_stdin, resize, kill)."""

import time

import pytest
from e2b import CommandExitException, PtySize, TimeoutException


def test_a_foreground_command_and_its_output(sandbox):
    out, err = [], []
    result = sandbox.commands.run(
        "echo hi; echo oops >&2", on_stdout=out.append, on_stderr=err.append
    )
    assert result.exit_code == 0
    assert result.stdout == "hi\n"
    assert result.stderr == "oops\n"
    assert "".join(out) == "hi\n"
    assert "".join(err) == "oops\n"


def test_a_failing_command_is_an_exit_error_with_its_code(sandbox):
    with pytest.raises(CommandExitException) as raised:
        sandbox.commands.run("echo partial; exit 7")
    assert raised.value.exit_code == 7
    assert raised.value.stdout == "partial\n"


def test_cwd_envs_and_user(sandbox):
    result = sandbox.commands.run("pwd; echo $GREETING", cwd="/tmp", envs={"GREETING": "hello"})
    assert result.stdout == "/tmp\nhello\n"
    assert sandbox.commands.run("id -un", user="root").stdout.strip() == "root"
    # E2B's default user, whom every Debian image here has, in its home.
    assert sandbox.commands.run("id -un; pwd; echo $HOME").stdout == "user\n/home/user\n/home/user\n"


def test_a_background_command_with_stdin(sandbox):
    handle = sandbox.commands.run("cat", background=True, stdin=True)
    assert handle.pid > 0
    assert any(p.pid == handle.pid for p in sandbox.commands.list())
    sandbox.commands.send_stdin(handle.pid, "line one\n")
    sandbox.commands.send_stdin(handle.pid, "line two\n")
    sandbox.commands.close_stdin(handle.pid)
    result = handle.wait()
    assert result.stdout == "line one\nline two\n"


def test_a_background_command_streams_and_is_killed(sandbox):
    # The sync SDK reads a background command's events when it is waited on.
    handle = sandbox.commands.run(
        "for i in 1 2 3; do echo tick$i; done; echo warn >&2; sleep 600",
        background=True,
    )
    time.sleep(2)
    assert any(p.pid == handle.pid for p in sandbox.commands.list())
    assert sandbox.commands.kill(handle.pid) is True
    out, err = [], []
    with pytest.raises(CommandExitException) as raised:
        handle.wait(on_stdout=out.append, on_stderr=err.append)
    assert raised.value.exit_code != 0
    assert "".join(out) == "tick1\ntick2\ntick3\n"
    assert "".join(err) == "warn\n"
    assert all(p.pid != handle.pid for p in sandbox.commands.list())
    assert sandbox.commands.kill(handle.pid) is False


def test_a_command_past_its_timeout_is_a_timeout_error(sandbox):
    started = time.time()
    with pytest.raises(TimeoutException):
        sandbox.commands.run("sleep 30", timeout=2)
    assert time.time() - started < 20


def test_connect_to_a_running_command(sandbox):
    handle = sandbox.commands.run("sleep 1; echo late", background=True)
    again = sandbox.commands.connect(handle.pid)
    assert again.wait().stdout == "late\n"


def test_a_pty(sandbox):
    data = bytearray()
    terminal = sandbox.pty.create(PtySize(rows=24, cols=80))
    sandbox.pty.resize(terminal.pid, PtySize(rows=40, cols=100))
    sandbox.pty.send_stdin(terminal.pid, b"stty size; echo $TERM; exit 3\n")
    with pytest.raises(CommandExitException) as raised:
        terminal.wait(on_pty=data.extend)
    assert raised.value.exit_code == 3
    text = data.decode(errors="replace")
    assert "40 100" in text
    assert "xterm-256color" in text


def test_a_pty_is_killed(sandbox):
    terminal = sandbox.pty.create(PtySize(rows=24, cols=80))
    assert sandbox.pty.kill(terminal.pid) is True
    with pytest.raises(CommandExitException):
        terminal.wait()


def _envd(sandbox, method: str, body: bytes, content_type: str = "application/json"):
    """A raw Connect call to the sandbox's envd: (status, content type, body)."""
    import os
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        os.environ["E2B_SANDBOX_URL"] + "/process.Process/" + method,
        data=body,
        method="POST",
        headers={
            "E2b-Sandbox-Id": sandbox.sandbox_id,
            "E2b-Sandbox-Port": "49983",
            "X-Access-Token": sandbox._envd_access_token or "",
            "Content-Type": content_type,
            "Connect-Protocol-Version": "1",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.headers.get("content-type"), answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("content-type"), error.read()


def test_bad_connect_input_is_refused_and_the_server_serves_on(sandbox):
    import json
    import struct

    status, _, body = _envd(sandbox, "List", b'{"x')
    assert status == 400
    assert json.loads(body)["code"] == "invalid_argument"
    assert "ListRequest: malformed JSON" in json.loads(body)["message"]

    # A body announced past the bound is refused before it is sent.
    import http.client
    import os
    from urllib.parse import urlsplit

    url = urlsplit(os.environ["E2B_SANDBOX_URL"])
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    connection.putrequest("POST", "/process.Process/List")
    for name, value in {
        "E2b-Sandbox-Id": sandbox.sandbox_id,
        "E2b-Sandbox-Port": "49983",
        "X-Access-Token": sandbox._envd_access_token or "",
        "Content-Type": "application/json",
        "Content-Length": str(5 << 20),
    }.items():
        connection.putheader(name, value)
    connection.endheaders()
    answer = connection.getresponse()
    assert answer.status == 429
    refusal = json.loads(answer.read())
    assert refusal["code"] == "resource_exhausted" and "bound" in refusal["message"]
    connection.close()

    # A stream's message past the bound, by its envelope's length alone.
    status, _, body = _envd(
        sandbox, "Start", struct.pack(">BI", 0, 5 << 20), "application/connect+json"
    )
    assert status == 200
    assert json.loads(body[5:])["error"]["code"] == "resource_exhausted"

    status, _, body = _envd(sandbox, "List", b"{}", content_type="text/plain")
    assert status == 415

    status, _, body = _envd(sandbox, "NoSuchMethod", b"{}")
    assert status == 501 and json.loads(body)["code"] == "unimplemented"

    # A stream's error is its end-of-stream message, with HTTP 200.
    bad = b'{"process": 5}'
    status, content_type, body = _envd(
        sandbox, "Start", struct.pack(">BI", 0, len(bad)) + bad, "application/connect+json"
    )
    assert status == 200 and content_type == "application/connect+json"
    flags, length = struct.unpack(">BI", body[:5])
    assert flags == 2
    assert json.loads(body[5 : 5 + length])["error"]["code"] == "invalid_argument"

    # Binary protobuf, unary: an empty ListRequest.
    status, content_type, _ = _envd(sandbox, "List", b"", "application/proto")
    assert status == 200 and content_type == "application/proto"

    assert sandbox.commands.run("echo still here").stdout == "still here\n"


def test_stream_input_feeds_stdin_in_order(sandbox):
    handle = sandbox.commands.run("cat", background=True, stdin=True)
    sandbox.commands.stream_input(handle.pid, (f"chunk {i}\n" for i in range(5)))
    sandbox.commands.close_stdin(handle.pid)
    assert handle.wait().stdout == "".join(f"chunk {i}\n" for i in range(5))


def test_the_async_sdk_runs_commands():
    import asyncio

    from e2b import AsyncSandbox

    async def main():
        sbx = await AsyncSandbox.create(timeout=120)
        try:
            out = []
            result = await sbx.commands.run("echo async; exit 0", on_stdout=out.append)
            assert result.stdout == "async\n" and "".join(out) == "async\n"
            handle = await sbx.commands.run("sleep 600", background=True)
            assert await sbx.commands.kill(handle.pid) is True
            with pytest.raises(CommandExitException):
                await handle.wait()
        finally:
            await sbx.kill()

    asyncio.run(main())


def test_envd_speaks_http2_too(sandbox):
    """A Connect call over HTTP/2 without TLS (prior knowledge), as a client
    that offers HTTP/2 speaks it."""
    import json
    import os
    import shutil
    import subprocess

    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed")
    answer = subprocess.run(
        [
            curl, "-sS", "--http2-prior-knowledge", "-w", "\\n%{http_version}",
            "-H", f"E2b-Sandbox-Id: {sandbox.sandbox_id}",
            "-H", "E2b-Sandbox-Port: 49983",
            "-H", f"X-Access-Token: {sandbox._envd_access_token or ''}",
            "-H", "Content-Type: application/json",
            "-d", "{}",
            os.environ["E2B_SANDBOX_URL"] + "/process.Process/List",
        ],
        capture_output=True, text=True, timeout=60, check=True,
    )
    body, version = answer.stdout.rsplit("\n", 1)
    assert version == "2"
    assert "processes" in json.loads(body) or json.loads(body) == {}


def test_connect_to_a_pty_gives_its_output_as_pty_data(sandbox):
    terminal = sandbox.pty.create(PtySize(rows=24, cols=80))
    again = sandbox.pty.connect(terminal.pid)
    sandbox.pty.send_stdin(terminal.pid, b"echo conn$((40+2)); exit 0\n")
    data = bytearray()
    again.wait(on_pty=data.extend)
    assert "conn42" in data.decode(errors="replace")
