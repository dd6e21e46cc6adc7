"""The asyncio client against a real server with real sandboxes: every call,
awaited. The checks run as coroutines on one event loop of the module's
(a thread of its own), so sandboxes made in one check serve the next."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import threading
import time
from pathlib import Path
from typing import Any, Awaitable, Coroutine, Iterator, List, Tuple, TypeVar

import pytest

from airlock import (
    AsyncSandbox,
    AuthenticationException,
    CommandExitException,
    FilesystemEvent,
    FilesystemEventType,
    InvalidArgumentException,
    NotFoundException,
    PtySize,
    RateLimitException,
    SandboxException,
    SandboxState,
    TimeoutException,
    WriteEntry,
)

from .conftest import Pattern, Server
from .test_sync import MIB, TINY_PNG

T = TypeVar("T")


class Loop:
    """An event loop in a thread; ``run`` waits for a coroutine on it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()


@pytest.fixture(scope="module")
def aio(server: Server) -> Iterator[Loop]:
    loop = Loop()
    yield loop
    loop.close()


@pytest.fixture(scope="module")
def sbx(aio: Loop) -> Iterator[AsyncSandbox]:
    sandbox = aio.run(AsyncSandbox.create(no_image=True, metadata={"suite": "async"}))
    yield sandbox
    aio.run(sandbox.kill())


@pytest.fixture(scope="module")
def py(aio: Loop) -> Iterator[AsyncSandbox]:
    sandbox = aio.run(AsyncSandbox.create(metadata={"suite": "async-py"}))
    yield sandbox
    aio.run(sandbox.kill())


async def eventually(check: Any, what: str, limit: float = 20) -> None:
    deadline = time.monotonic() + limit
    while not await check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.1)


def test_lifecycle(aio: Loop) -> None:
    async def body() -> None:
        async with await AsyncSandbox.create(
            no_image=True, timeout=600, metadata={"owner": "async-life"}, envs={"V": "1"},
            memory_mb=320, vcpus=1,
        ) as sandbox:
            info = await sandbox.get_info()
            assert (info.memory_mb, info.metadata, info.state) == (320, {"owner": "async-life"}, SandboxState.RUNNING)
            found = [i.sandbox_id async for i in AsyncSandbox.list(metadata={"owner": "async-life"})]
            assert found == [sandbox.sandbox_id]
            page = AsyncSandbox.list(metadata={"owner": "async-life"}, state=SandboxState.PAUSED)
            assert await page.next_items() == []
            assert (await AsyncSandbox.get_info(sandbox.sandbox_id)).sandbox_id == sandbox.sandbox_id
            [metrics] = await sandbox.get_metrics()
            assert metrics.mem_total > 100 * MIB
            assert (await AsyncSandbox.get_metrics(sandbox.sandbox_id))[0].cpu_count == 1
            assert await sandbox.pause() is True and await sandbox.pause() is False
            assert (await sandbox.get_info()).state == SandboxState.PAUSED
            await sandbox.resume()
            assert await sandbox.is_running()
            assert await AsyncSandbox.pause(sandbox.sandbox_id, to_disk=True) is True
            again = await AsyncSandbox.connect(sandbox.sandbox_id)
            assert (await again.commands.run("echo $V")).stdout == "1\n"
            await AsyncSandbox.set_timeout(sandbox.sandbox_id, 1)
            await eventually(lambda: _not(sandbox.is_running()), "still running after 1 s")
            sandbox_id = sandbox.sandbox_id
        # Ended by its timeout; the kill on the way out removed it.
        assert await AsyncSandbox.kill(sandbox_id) is False
        async with await AsyncSandbox.create(no_image=True) as sandbox:
            sandbox_id = sandbox.sandbox_id
        with pytest.raises(NotFoundException):
            await AsyncSandbox.get_info(sandbox_id)

    aio.run(body())


async def _not(value: Awaitable[bool]) -> bool:
    return not await value


def test_fork(aio: Loop, sbx: AsyncSandbox) -> None:
    async def body() -> None:
        await sbx.files.write("/tmp/parent", "p")
        children = await sbx.fork(2)
        try:
            for child in children:
                assert await child.files.read("/tmp/parent") == "p"
        finally:
            for child in children:
                assert await child.kill()

    aio.run(body())


def test_commands(aio: Loop, sbx: AsyncSandbox) -> None:
    async def body() -> None:
        result = await sbx.commands.run("echo out; echo err >&2; pwd", cwd="/tmp", envs={"X": "y"})
        assert (result.stdout, result.stderr) == ("out\n/tmp\n", "err\n")
        with pytest.raises(CommandExitException) as failed:
            await sbx.commands.run("exit 4")
        assert failed.value.exit_code == 4
        assert (await sbx.commands.run("cat; id -u", stdin="in\n", user="65534")).stdout == "in\n65534\n"
        with pytest.raises(TimeoutException):
            await sbx.commands.run("sleep 30", timeout=1)
        seen: List[Tuple[float, str]] = []

        async def on_stdout(text: str) -> None:
            seen.append((time.monotonic(), text))

        await sbx.commands.run("echo first; sleep 3; echo second", on_stdout=on_stdout)
        assert [t for _, t in seen] == ["first\n", "second\n"]
        assert time.monotonic() - seen[0][0] > 2, "the first line arrived only at the end"

        handle = await sbx.commands.run("while read l; do echo got $l; done", background=True)
        await handle.send_stdin("one\n")
        await eventually(lambda: _has(handle.stdout, "got one"), handle.stdout)
        await sbx.commands.send_stdin(handle.pid, "two\n")
        await eventually(lambda: _has(handle.stdout, "got two"), handle.stdout)
        assert handle.pid in [p.pid for p in await sbx.commands.list()]
        await handle.close_stdin()
        assert (await handle.wait()).stdout == "got one\ngot two\n"
        sleeper = await sbx.commands.run("sleep 600", background=True)
        assert await sbx.commands.kill(sleeper.pid) is True
        with pytest.raises(CommandExitException) as killed:
            await sleeper.wait()
        assert killed.value.signal == 9
        assert await (await sbx.commands.run("sleep 600", background=True)).kill() is True
        assert await sbx.commands.kill(999_999) is False

    aio.run(body())


async def _has(text: str, part: str) -> bool:
    return part in text


def test_background_command_reattached_with_replay(aio: Loop, sbx: AsyncSandbox) -> None:
    async def body() -> None:
        handle = await sbx.commands.run(
            "for i in 1 2 3; do echo line $i; sleep 0.5; done; read x; echo then $x", background=True
        )
        await eventually(lambda: _has(handle.stdout, "line 3"), handle.stdout)
        await handle.disconnect()
        again = await sbx.commands.connect(handle.pid)
        chunks = [c async for c in _first(again)]
        assert chunks and (chunks[0][0] or "").startswith("line 1")
        await again.send_stdin("back\n")
        assert (await again.wait()).stdout == "line 1\nline 2\nline 3\nthen back\n"

    aio.run(body())


async def _first(handle: Any) -> Any:
    async for chunk in handle:
        yield chunk
        return


def test_files(aio: Loop, sbx: AsyncSandbox, tmp_path: Path) -> None:
    async def body() -> None:
        fs = sbx.files
        assert (await fs.write("/tmp/af/a", "alpha")).path == "/tmp/af/a"
        assert await fs.read("/tmp/af/a") == "alpha"
        await fs.write("/tmp/af/b", b"\x00\x01")
        assert await fs.read("/tmp/af/b", format="bytes") == bytearray(b"\x00\x01")
        stream = await fs.read("/tmp/af/b", format="stream")
        assert b"".join([c async for c in stream]) == b"\x00\x01"
        await fs.write_files([WriteEntry("/tmp/af/c", "c"), {"path": "/tmp/af/d/e", "data": "e"}])
        assert sorted(e.name for e in await fs.list("/tmp/af")) == ["a", "b", "c", "d"]
        assert "/tmp/af/d/e" in [e.path for e in await fs.list("/tmp/af", depth=2)]
        assert await fs.exists("/tmp/af/c") and not await fs.exists("/tmp/af/zz")
        assert (await fs.get_info("/tmp/af/a")).size == 5
        assert await fs.make_dir("/tmp/af/m") is True and await fs.make_dir("/tmp/af/m") is False
        assert (await fs.rename("/tmp/af/a", "/tmp/af/m/a")).path == "/tmp/af/m/a"
        await fs.remove("/tmp/af/m")
        with pytest.raises(NotFoundException):
            await fs.read("/tmp/af/m/a")

        events: List[FilesystemEvent] = []
        watch = await fs.watch_dir("/tmp/af", on_event=events.append, recursive=True)
        await sbx.commands.run("echo x > /tmp/af/watched")
        await eventually(
            lambda: _has(str([(e.type, e.name) for e in events]), "watched"), f"no event: {events}"
        )
        assert any(e.type == FilesystemEventType.CREATE and e.name == "watched" for e in events)
        await watch.stop()

        src = tmp_path / "src"
        src.mkdir()
        (src / "f").write_text("tree")
        os.symlink("f", src / "l")
        assert await fs.upload_dir(str(src), "/tmp/atree") > 0
        assert (await sbx.commands.run("cat /tmp/atree/l")).stdout == "tree"
        assert await fs.download_dir("/tmp/atree", str(tmp_path / "out")) >= 2
        assert os.readlink(tmp_path / "out" / "l") == "f"

        tracker = await fs.track_changes(["/tmp/atree"])
        await sbx.commands.run("echo n > /tmp/atree/new; rm /tmp/atree/f")
        kinds = {(c.kind.value, c.path) for c in await tracker.changes()}
        assert kinds == {("created", "/tmp/atree/new"), ("deleted", "/tmp/atree/f")}
        await tracker.download(str(tmp_path / "changed"))
        assert (tmp_path / "changed" / "tmp" / "atree" / "new").read_text() == "n\n"
        await tracker.stop()

        source = Pattern(32 * MIB, seed=b"async")
        await fs.write("/tmp/big", source)
        digest = hashlib.sha256()
        async for chunk in await fs.read("/tmp/big", format="stream"):
            digest.update(chunk)
        assert digest.hexdigest() == source.digest.hexdigest()
        assert (await sbx.commands.run("sha256sum /tmp/big")).stdout.split()[0] == digest.hexdigest()
        await fs.remove("/tmp/big")

    aio.run(body())


def test_pty(aio: Loop, sbx: AsyncSandbox) -> None:
    async def body() -> None:
        screen = bytearray()
        terminal = await sbx.pty.create(PtySize(24, 80), on_data=screen.extend)
        await sbx.pty.send_stdin(terminal.pid, b"echo $((6 * 7))\n")
        await eventually(lambda: _has(screen.decode(errors="replace"), "42"), bytes(screen).decode())
        await sbx.pty.resize(terminal.pid, PtySize(40, 100))
        await sbx.pty.send_stdin(terminal.pid, b"stty size\n")
        await eventually(lambda: _has(screen.decode(errors="replace"), "40 100"), bytes(screen).decode())
        assert await sbx.pty.kill(terminal.pid) is True

    aio.run(body())


def test_run_code_and_contexts(aio: Loop, py: AsyncSandbox) -> None:
    async def body() -> None:
        await py.run_code("x = 41")
        assert (await py.run_code("x + 1")).text == "42"
        printed: List[str] = []

        async def on_stdout(message: Any) -> None:
            printed.append(message.line)

        out = await py.run_code("print('hi')\n" + TINY_PNG, on_stdout=on_stdout)
        assert printed == ["hi\n"] and base64.b64decode(out.results[-1].png or "").startswith(b"\x89PNG")
        errors: List[Any] = []
        failed = await py.run_code("raise KeyError('k')", on_error=errors.append)
        assert failed.error is not None and failed.error.name == "KeyError" and errors == [failed.error]
        ctx = await py.create_code_context(language="bash", cwd="/tmp")
        assert (await py.run_code("echo $PWD", context=ctx)).logs.stdout == ["/tmp\n"]
        assert ctx.id in [c.id for c in await py.list_code_contexts()]
        with pytest.raises(TimeoutException):
            await py.run_code("while True: pass", timeout=2)
        assert (await py.run_code("x")).text == "41"
        await py.interrupt_code_context(ctx)
        await py.restart_code_context(ctx)
        await py.remove_code_context(ctx)
        assert ctx.id not in [c.id for c in await py.list_code_contexts()]

    aio.run(body())


def test_network_and_errors(aio: Loop, sbx: AsyncSandbox) -> None:
    async def body() -> None:
        async with await AsyncSandbox.create(no_image=True, allow_net=["a.example"]) as net:
            assert await net.network.rules() == ["a.example"]
            assert await net.network.allow("b.example") == ["a.example", "b.example"]
            assert await net.network.deny("a.example") == ["b.example"]
            assert await net.network.replace(["c.example"]) == ["c.example"]
            await net.commands.run("nslookup refused.example 2>&1 || true")
            assert any(not r.allowed for r in await net.network.audit())
        with pytest.raises(SandboxException) as none:
            await sbx.network.rules()
        assert none.value.reason == "NO_NETWORK"
        # Since API revision 3 a sandbox without network has an audit: its
        # ingress records alone, none here (test_ingress.py checks them).
        assert await sbx.network.audit() == []
        with pytest.raises(InvalidArgumentException):
            await AsyncSandbox.create(no_image=True, vcpus=1000)
        with pytest.raises(NotFoundException):
            await AsyncSandbox.connect("sandbox-nobody")

    aio.run(body())


def test_a_remote_server_over_tls_with_a_key(aio: Loop, tls_server: Server) -> None:
    key = tls_server.key("async-remote", "--max-sandboxes", "1")
    conn = {"host": tls_server.host, "api_key": key, "ca_cert": tls_server.ca}

    async def body() -> None:
        async with await AsyncSandbox.create(no_image=True, **conn) as remote:
            assert (await remote.commands.run("hostname")).stdout.strip() == remote.sandbox_id
            with pytest.raises(RateLimitException):
                await AsyncSandbox.create(no_image=True, **conn)
        with pytest.raises(AuthenticationException):
            await AsyncSandbox.list(host=tls_server.host, api_key="ak_wrong", ca_cert=tls_server.ca).next_items()

    aio.run(body())
