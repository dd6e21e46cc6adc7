"""Programs written against E2B's SDKs (``tests/ported/``: an agent's code
executor with package installs, a LangChain-style tool, a chart, a
background server, an asyncio tool server) run against Airlock with their
import changed and nothing else, each in a process of its own; then the background server
fetched from this machine through the ingress, the way the README
documents for code outside the sandbox.

The executor and the chart need what E2B's code interpreter image has (pip,
numpy, matplotlib): they run with ``AIRLOCK_IMAGE`` naming such an image
(``AIRLOCK_TEST_E2B_IMAGE``, default ``test-matplotlib``), as a user would set
it; the others run on the server's default image."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from airlock import Sandbox

from .conftest import Server

PORTED = Path(__file__).parent / "ported"
E2B_IMAGE = os.environ.get("AIRLOCK_TEST_E2B_IMAGE", "test-matplotlib")
IMPORT = re.compile(r"^from (e2b_code_interpreter|e2b) import ", re.M)


def ported(name: str) -> str:
    """The program with its import changed, and only that."""
    source = (PORTED / name).read_text()
    changed = IMPORT.sub("from airlock import ", source)
    before, after = source.splitlines(), changed.splitlines()
    assert len(before) == len(after)
    differing = [b for a, b in zip(before, after) if a != b]
    assert differing and all(line.startswith("from airlock import ") for line in differing), differing
    return changed


def run(name: str, tmp_path: Path, image: str = "", *args: str) -> str:
    script = tmp_path / name
    script.write_text(ported(name))
    env = dict(os.environ)
    env.pop("AIRLOCK_IMAGE", None)
    if image:
        env["AIRLOCK_IMAGE"] = image
    done = subprocess.run(
        [sys.executable, str(script), *args], env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def need_e2b_image(server: Server) -> None:
    listed = server.airlock("image", "ls")
    if E2B_IMAGE not in listed:
        pytest.fail(
            f"no image {E2B_IMAGE!r} (pip, numpy, matplotlib: E2B's code interpreter image) in "
            "the server's store; the tests crate builds it on first use (`cargo test -p "
            "airlock-tests --test matplotlib`, the default image's packages plus matplotlib), "
            f"or name another with AIRLOCK_TEST_E2B_IMAGE:\n{listed}"
        )


def test_agent_executor_with_package_installs(server: Server, tmp_path: Path) -> None:
    need_e2b_image(server)
    assert run("agent_executor.py", tmp_path, E2B_IMAGE).endswith("ok\n")


def test_langchain_style_tool(server: Server, tmp_path: Path) -> None:
    assert run("langchain_tool.py", tmp_path).endswith("ok\n")


def test_chart(server: Server, tmp_path: Path) -> None:
    need_e2b_image(server)
    out = tmp_path / "chart.png"
    assert run("chart.py", tmp_path, E2B_IMAGE, str(out)).endswith("ok\n")
    assert out.read_bytes().startswith(b"\x89PNG")


def test_background_server(server: Server, tmp_path: Path) -> None:
    out = run("web_server.py", tmp_path)
    assert re.search(r"served at https://8000-sandbox-[0-9a-f]+\.airlock\.localhost", out), out


def test_background_server_fetched_through_the_ingress(server: Server) -> None:
    """What the README offers code outside the sandbox: the path form with
    the token header, since `get_host`'s name does not resolve for urllib."""
    with Sandbox.create() as sbx:
        sbx.files.write("site/index.html", "<h1>through the ingress</h1>")
        sbx.commands.run("cd ~/site && python3 -m http.server 8000", background=True)
        web = sbx.expose(8000)
        assert web.host == sbx.get_host(8000)
        request = urllib.request.Request(web.path_url + "index.html", headers=web.headers)
        deadline = time.monotonic() + 60
        while True:
            try:
                body = urllib.request.urlopen(request, timeout=10).read()
                break
            except urllib.error.HTTPError as error:
                if error.code != 502 or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        assert body == b"<h1>through the ingress</h1>"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(web.path_url + "index.html", timeout=10)
        assert refused.value.code == 401


def test_async_toolkit(server: Server, tmp_path: Path) -> None:
    assert run("async_toolkit.py", tmp_path).endswith("ok\n")
