"""The asyncio client against a real server with real sandboxes: every call,
awaited. The checks run as coroutines on one event loop of the module's
(a thread of its own, ``aio``), so sandboxes made in one check serve the
next: one busybox sandbox (``sbx``) and one of the default image (``py``).

This suite mirrors ``test_sync.py``: the same tests, by the same names, with
the same cases (``test_mirror.py`` holds them to it), where the blocking
client's calls are awaited, its ``with`` is ``async with``, its iterators
``async for``, and some callbacks are coroutine functions."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator, List, Tuple

import pytest

from airlock import (
    AsyncSandbox,
    AsyncTemplate,
    AsyncUsage,
    AuthenticationException,
    CommandExitException,
    ConnectionConfig,
    Context,
    FilesystemEvent,
    FilesystemEventType,
    FileType,
    InvalidArgumentException,
    LogEntry,
    LogEntryEnd,
    LogEntryStart,
    NotFoundException,
    PtySize,
    RateLimitException,
    Result,
    SandboxException,
    SandboxNotFoundException,
    SandboxState,
    Secret,
    TimeoutException,
    WriteEntry,
    wait_for_file,
)
from airlock.exceptions import AlreadyExistsException

from .conftest import MIB, TEMPLATE_FILE, TINY_PNG, Loop, Pattern, Server


@pytest.fixture(scope="module")
def sbx(aio: Loop) -> Iterator[AsyncSandbox]:
    sandbox = aio.run(AsyncSandbox.create(no_image=True, metadata={"suite": "async"}, envs={"SUITE": "async"}))
    yield sandbox
    aio.run(sandbox.kill())


@pytest.fixture(scope="module")
def py(aio: Loop) -> Iterator[AsyncSandbox]:
    sandbox = aio.run(AsyncSandbox.create(metadata={"suite": "async-py"}))
    yield sandbox
    aio.run(sandbox.kill())


async def eventually(check: Callable[[], Awaitable[bool]], what: Callable[[], object], limit: float = 20) -> None:
    """Waits until `check()` answers true, `limit` seconds at most; `what()`
    says what did not happen."""
    deadline = time.monotonic() + limit
    while not await check():
        assert time.monotonic() < deadline, what()
        await asyncio.sleep(0.1)


async def _first(handle: Any) -> Any:
    async for chunk in handle:
        return chunk
    return None


# -- lifecycle ---------------------------------------------------------


def test_create_sets_what_was_asked_and_list_finds_it(aio: Loop) -> None:
    async def body() -> None:
        sandbox = await AsyncSandbox.create(
            no_image=True, timeout=600, metadata={"owner": "async-create"}, envs={"GREETING": "hi"},
            memory_mb=320, vcpus=2,
        )
        try:
            info = await sandbox.get_info()
            assert (info.sandbox_id, info.memory_mb, info.cpu_count) == (sandbox.sandbox_id, 320, 2)
            assert info.metadata == {"owner": "async-create"} and info.state == SandboxState.RUNNING
            assert info.end_at is not None and 590 <= (info.end_at - info.started_at).total_seconds() <= 610
            assert info.env_names == ["GREETING"]
            assert (await sandbox.commands.run("echo $GREETING; nproc")).stdout == "hi\n2\n"
            listed = [i async for i in AsyncSandbox.list(metadata={"owner": "async-create"})]
            assert [i.sandbox_id for i in listed] == [sandbox.sandbox_id]
            paused = AsyncSandbox.list(metadata={"owner": "async-create"}, state=[SandboxState.PAUSED])
            assert [i async for i in paused] == []
            page = AsyncSandbox.list(metadata={"owner": "async-create"}, state=SandboxState.PAUSED)
            assert await page.next_items() == []
            assert (await AsyncSandbox.get_info(sandbox.sandbox_id)).sandbox_id == sandbox.sandbox_id
            assert await sandbox.is_running()
        finally:
            assert await sandbox.kill() is True
        assert await sandbox.is_running() is False
        assert await AsyncSandbox.kill(sandbox.sandbox_id) is False
        with pytest.raises(NotFoundException):
            await AsyncSandbox.connect(sandbox.sandbox_id)

    aio.run(body())


def test_with_kills_the_sandbox_on_exit(aio: Loop) -> None:
    async def body() -> None:
        async with await AsyncSandbox.create(no_image=True) as sandbox:
            sandbox_id = sandbox.sandbox_id
            assert (await sandbox.commands.run("echo in")).stdout == "in\n"
        with pytest.raises(NotFoundException):
            await AsyncSandbox.get_info(sandbox_id)
        with pytest.raises(ValueError):
            async with await AsyncSandbox.create(no_image=True) as sandbox:
                sandbox_id = sandbox.sandbox_id
                raise ValueError("the body failed")
        assert not any([i.sandbox_id == sandbox_id async for i in AsyncSandbox.list()])

    aio.run(body())


def test_set_timeout_ends_it_then(aio: Loop) -> None:
    async def body() -> None:
        sandbox = await AsyncSandbox.create(no_image=True)
        await AsyncSandbox.set_timeout(sandbox.sandbox_id, 600)
        moved = (await sandbox.get_info()).end_at
        assert moved is not None and 540 <= (moved - datetime.now(timezone.utc)).total_seconds() <= 601
        await sandbox.set_timeout(1)
        deadline = time.monotonic() + 30
        while await sandbox.is_running():
            assert time.monotonic() < deadline, "still running 30 s after a 1 s timeout"
            await asyncio.sleep(0.2)
        info = await AsyncSandbox.get_info(sandbox.sandbox_id)
        assert info.state == SandboxState.ENDED and "lifetime" in info.end_reason
        with pytest.raises(NotFoundException):
            await sandbox.commands.run("true")
        await sandbox.kill()
        assert await AsyncSandbox.kill(sandbox.sandbox_id) is False

    aio.run(body())


def test_pause_resume_to_disk_and_connect(aio: Loop, sbx: AsyncSandbox) -> None:
    async def body() -> None:
        await sbx.files.write("/root/kept", "before the pause")
        assert await sbx.pause() is True
        assert (await sbx.get_info()).state == SandboxState.PAUSED and not await sbx.is_running()
        assert await sbx.pause() is False
        await sbx.resume()
        assert await sbx.is_running()
        assert await AsyncSandbox.pause(sbx.sandbox_id, to_disk=True) is True
        assert (await sbx.get_info()).state == SandboxState.ON_DISK
        again = await AsyncSandbox.connect(sbx.sandbox_id)
        assert await again.is_running() and await again.files.read("/root/kept") == "before the pause"
        assert (await again.commands.run("echo $SUITE")).stdout == "async\n"

    aio.run(body())


def test_fork_copies_memory_and_files(aio: Loop, sbx: AsyncSandbox) -> None:
    async def body() -> None:
        await sbx.files.write("/tmp/parent", "from the parent")
        children = await sbx.fork(2)
        try:
            assert len({c.sandbox_id for c in children} | {sbx.sandbox_id}) == 3
            for child in children:
                assert await child.files.read("/tmp/parent") == "from the parent"
                assert (await child.commands.run("hostname")).stdout.strip() == child.sandbox_id
        finally:
            for child in children:
                assert await child.kill() is True

    aio.run(body())


def test_metrics_measure_the_guest(aio: Loop, sbx: AsyncSandbox) -> None:
    async def body() -> None:
        # The writable root starts empty: 2 MiB written into it show.
        await sbx.commands.run("head -c 2097152 /dev/urandom > /root/metrics.fill")
        [metrics] = await sbx.get_metrics()
        assert metrics.mem_total > 100 * MIB and 0 < metrics.mem_used < metrics.mem_total
        assert metrics.cpu_count == 1 and metrics.running_ms > 0
        assert metrics.disk_total is not None and metrics.disk_used is not None
        assert 2 * MIB <= metrics.disk_used <= metrics.disk_total
        [again] = await AsyncSandbox.get_metrics(sbx.sandbox_id)
        assert again.mem_total == metrics.mem_total and again.cpu_count == 1

    aio.run(body())


# -- commands ----------------------------------------------------------


def test_run_returns_output_and_raises_on_failure(aio: Loop, sbx: AsyncSandbox) -> None:
    async def body() -> None:
        result = await sbx.commands.run("echo out; echo err >&2")
        assert (result.stdout, result.stderr, result.exit_code, result.error) == ("out\n", "err\n", 0, None)
        with pytest.raises(CommandExitException) as failed:
            await sbx.commands.run("echo partial; exit 3")
        assert (failed.value.exit_code, failed.value.stdout) == (3, "partial\n")
        assert isinstance(failed.value, SandboxException)
        ran = await sbx.commands.run(
            "echo $A $SUITE; pwd; id -u", envs={"A": "1"}, cwd="/tmp", user="65534"
        )
        assert ran.stdout == "1 async\n/tmp\n65534\n"
        assert (await sbx.commands.run("cat", stdin="given stdin")).stdout == "given stdin"
        assert (await sbx.commands.run("cat")).stdout == ""

    aio.run(body())


def test_on_stdout_is_called_as_output_arrives(aio: Loop, sbx: AsyncSandbox) -> None:
    async def body() -> None:
        seen: List[Tuple[float, str]] = []

        async def on_stdout(text: str) -> None:
            seen.append((time.monotonic(), text))

        result = await sbx.commands.run(
            "echo first; sleep 3; echo second; echo late >&2",
            on_stdout=on_stdout,
            on_stderr=lambda text: seen.append((time.monotonic(), "E:" + text)),
        )
        ended = time.monotonic()
        assert [text for _, text in seen if not text.startswith("E:")] == ["first\n", "second\n"]
        assert [text for _, text in seen if text.startswith("E:")] == ["E:late\n"]
        assert ended - seen[0][0] > 2, "the first line arrived only at the end"
        assert result.stdout == "first\nsecond\n"

    aio.run(body())


def test_a_command_past_its_timeout_is_killed(aio: Loop, sbx: AsyncSandbox) -> None:
    async def body() -> None:
        began = time.monotonic()
        with pytest.raises(TimeoutException):
            await sbx.commands.run("sleep 30", timeout=1)
        assert time.monotonic() - began < 20

    aio.run(body())


def test_background_handle_stdin_list_kill(aio: Loop, sbx: AsyncSandbox) -> None:
    async def body() -> None:
        handle = await sbx.commands.run("while read line; do echo got $line; done", background=True)
        pieces = handle.__aiter__()
        received = ""
        # Through the handle's own stream, then by pid (another call: not
        # ordered with the stream, so the second waits for the first's answer).
        for word in ("one", "two"):
            if word == "one":
                await handle.send_stdin("one\n")
            else:
                await sbx.commands.send_stdin(handle.pid, "two\n")
            while f"got {word}" not in received:
                stdout, _, _ = await pieces.__anext__()
                received += stdout or ""
        assert received == "got one\ngot two\n"
        listed = {p.pid: p for p in await sbx.commands.list()}
        assert listed[handle.pid].running and listed[handle.pid].args[-1].startswith("while read")
        await handle.close_stdin()
        ended = await handle.wait()
        assert ended.exit_code == 0 and ended.stdout == "got one\ngot two\n"
        sleeper = await sbx.commands.run("sleep 600", background=True)
        assert await sbx.commands.kill(sleeper.pid) is True
        with pytest.raises(CommandExitException) as killed:
            await sleeper.wait()
        assert killed.value.signal == 9 and killed.value.error == "signal: 9"
        other = await sbx.commands.run("sleep 600", background=True)
        assert await other.kill() is True
        assert await sbx.commands.kill(999_999) is False

    aio.run(body())


def test_background_command_reattached_with_replay(aio: Loop, sbx: AsyncSandbox) -> None:
    async def body() -> None:
        handle = await sbx.commands.run(
            "for i in 1 2 3; do echo line $i; sleep 0.5; done; read x; echo then $x",
            background=True,
        )
        async def three_lines() -> bool:
            return handle.stdout.count("line") >= 3

        await eventually(three_lines, lambda: handle.stdout)
        await handle.disconnect()
        again = await sbx.commands.connect(handle.pid)
        first = await _first(again)
        assert first is not None and first[0] is not None and first[0].startswith("line 1")
        await again.send_stdin("back\n")
        result = await again.wait()
        assert result.stdout == "line 1\nline 2\nline 3\nthen back\n"

    aio.run(body())


# -- files -------------------------------------------------------------


def test_files_read_write_list_and_more(aio: Loop, sbx: AsyncSandbox, tmp_path: Path) -> None:
    async def body() -> None:
        fs = sbx.files
        info = await fs.write("/tmp/f/a.txt", "alpha")
        assert (info.name, info.path, info.type) == ("a.txt", "/tmp/f/a.txt", FileType.FILE)
        assert await fs.read("/tmp/f/a.txt") == "alpha"
        await fs.write("/tmp/f/b.bin", b"\x00\xffbin")
        assert await fs.read("/tmp/f/b.bin", format="bytes") == bytearray(b"\x00\xffbin")
        stream = await fs.read("/tmp/f/b.bin", format="stream")
        assert b"".join([chunk async for chunk in stream]) == b"\x00\xffbin"
        with open(tmp_path / "local", "wb") as f:
            f.write(b"from a file object")
        with open(tmp_path / "local", "rb") as f:
            await fs.write("/tmp/f/c", f)
        assert await fs.read("/tmp/f/c") == "from a file object"
        written = await fs.write_files([WriteEntry("/tmp/f/d/1", "one"), {"path": "/tmp/f/d/2", "data": b"two"}])
        assert [w.path for w in written] == ["/tmp/f/d/1", "/tmp/f/d/2"]
        names = sorted(e.name for e in await fs.list("/tmp/f"))
        assert names == ["a.txt", "b.bin", "c", "d"]
        deep = sorted(e.path for e in await fs.list("/tmp/f", depth=2))
        assert "/tmp/f/d/2" in deep and "/tmp/f/d/2" not in [e.path for e in await fs.list("/tmp/f")]
        assert await fs.exists("/tmp/f/a.txt") and not await fs.exists("/tmp/f/none")
        stat = await fs.get_info("/tmp/f/a.txt")
        assert (stat.size, stat.type, stat.permissions) == (5, FileType.FILE, "-rw-r--r--")
        assert (await fs.get_info("/tmp/f/d")).type == FileType.DIR
        assert await fs.make_dir("/tmp/f/new/deep") is True and await fs.make_dir("/tmp/f/new/deep") is False
        moved = await fs.rename("/tmp/f/a.txt", "/tmp/f/new/a.txt")
        assert moved.path == "/tmp/f/new/a.txt" and not await fs.exists("/tmp/f/a.txt")
        await fs.remove("/tmp/f/new")
        assert not await fs.exists("/tmp/f/new/a.txt")
        with pytest.raises(NotFoundException) as missing:
            await fs.read("/tmp/f/none")
        assert missing.value.reason == "GUEST_NOT_FOUND"

    aio.run(body())


def test_watch_dir_sees_changes(aio: Loop, sbx: AsyncSandbox) -> None:
    async def body() -> None:
        await sbx.files.make_dir("/tmp/watched")
        events: List[FilesystemEvent] = []
        # The asyncio handle hands each event to on_event (it has no
        # get_new_events).
        handle = await sbx.files.watch_dir("/tmp/watched", on_event=events.append, recursive=True)
        try:
            await sbx.commands.run("echo x > /tmp/watched/new.txt")

            async def created() -> bool:
                return any(e.type == FilesystemEventType.CREATE and e.name == "new.txt" for e in events)

            await eventually(created, lambda: f"no CREATE event: {events}", limit=15)
        finally:
            await handle.stop()

    aio.run(body())


def test_directories_travel_as_tar(aio: Loop, sbx: AsyncSandbox, tmp_path: Path) -> None:
    async def body() -> None:
        src = tmp_path / "src"
        (src / "sub").mkdir(parents=True)
        (src / "sub" / "run.sh").write_text("#!/bin/sh\necho ran\n")
        os.chmod(src / "sub" / "run.sh", 0o755)
        os.symlink("sub/run.sh", src / "link")
        assert await sbx.files.upload_dir(str(src), "/tmp/tree") > 0
        assert (await sbx.commands.run("/tmp/tree/link")).stdout == "ran\n"
        out = tmp_path / "out"
        assert await sbx.files.download_dir("/tmp/tree", str(out)) >= 3
        assert (out / "sub" / "run.sh").read_text() == "#!/bin/sh\necho ran\n"
        assert os.readlink(out / "link") == "sub/run.sh"
        assert os.stat(out / "sub" / "run.sh").st_mode & 0o777 == 0o755

    aio.run(body())


def test_track_changes_lists_and_downloads(aio: Loop, sbx: AsyncSandbox, tmp_path: Path) -> None:
    async def body() -> None:
        await sbx.commands.run("mkdir -p /root/w && echo old > /root/w/mod && echo gone > /root/w/del")
        tracker = await sbx.files.track_changes(["/root/w"])
        await sbx.commands.run("echo new > /root/w/made; echo changed >> /root/w/mod; rm /root/w/del")
        changes = {(c.kind.value, c.path) for c in await tracker.changes()}
        assert changes == {
            ("created", "/root/w/made"),
            ("modified", "/root/w/mod"),
            ("deleted", "/root/w/del"),
        }
        await tracker.download(str(tmp_path))
        assert (tmp_path / "root" / "w" / "made").read_text() == "new\n"
        await tracker.stop()
        with pytest.raises(NotFoundException):
            await tracker.changes()

    aio.run(body())


def test_a_200_mib_file_streams_both_ways(aio: Loop) -> None:
    async def body() -> None:
        async with await AsyncSandbox.create(no_image=True, memory_mb=1024) as big:
            source = Pattern(200 * MIB, seed=b"async")
            written = await big.files.write("/tmp/big", source)
            assert written.size == 200 * MIB
            expected = source.digest.hexdigest()
            assert (await big.commands.run("sha256sum /tmp/big")).stdout.split()[0] == expected
            digest, size = hashlib.sha256(), 0
            chunks: AsyncIterator[bytes] = await big.files.read("/tmp/big", format="stream")
            async for chunk in chunks:
                digest.update(chunk)
                size += len(chunk)
            assert (size, digest.hexdigest()) == (200 * MIB, expected)

    aio.run(body())


# -- terminals -----------------------------------------------------------


def test_pty_types_resizes_and_kills(aio: Loop, sbx: AsyncSandbox) -> None:
    async def body() -> None:
        screen = bytearray()

        async def wait_for(text: bytes) -> None:
            async def shown() -> bool:
                return text in screen

            await eventually(shown, lambda: bytes(screen), limit=15)

        terminal = await sbx.pty.create(PtySize(rows=24, cols=80), on_data=screen.extend, envs={"PS1": "$ "})
        await sbx.pty.send_stdin(terminal.pid, b"echo $((6 * 7))\n")
        await wait_for(b"42")
        await sbx.pty.resize(terminal.pid, PtySize(rows=50, cols=132))
        await sbx.pty.send_stdin(terminal.pid, b"stty size\n")
        await wait_for(b"50 132")
        assert await sbx.pty.kill(terminal.pid) is True
        with pytest.raises(CommandExitException):
            await terminal.wait()

    aio.run(body())


# -- code --------------------------------------------------------------


def test_run_code_values_outputs_errors(aio: Loop, py: AsyncSandbox) -> None:
    async def body() -> None:
        assert (await py.run_code("x = 41")).results == []
        execution = await py.run_code("x + 1")
        assert execution.text == "42" and execution.error is None and execution.execution_count
        answer = (await py.run_code("{'answer': x + 1}")).results[0]
        assert answer.text == "{'answer': 42}" and answer.json is None
        printed: List[str] = []
        results: List[Result] = []
        errors: List[Any] = []

        async def on_stdout(message: Any) -> None:
            printed.append(message.line)

        out = await py.run_code(
            "import time\nprint('a', flush=True)\ntime.sleep(1)\nprint('b')\n" + TINY_PNG,
            on_stdout=on_stdout,
            on_result=results.append,
            on_error=errors.append,
        )
        assert "".join(printed) == "a\nb\n" and out.logs.stdout == printed
        png = base64.b64decode(out.results[-1].png or "")
        assert png.startswith(b"\x89PNG") and results == out.results and errors == []
        failed = await py.run_code("1 / 0", on_error=errors.append)
        assert failed.error is not None and failed.error.name == "ZeroDivisionError"
        assert "1 / 0" in failed.error.traceback and errors == [failed.error]
        raised = await py.run_code("raise KeyError('k')", on_error=errors.append)
        assert raised.error is not None and raised.error.name == "KeyError" and errors[-1] == raised.error
        bash = await py.run_code("cd /tmp; echo $PWD", language="bash")
        assert bash.logs.stdout == ["/tmp\n"]
        with pytest.raises(InvalidArgumentException):
            await py.run_code("1", envs={"A": "1"})

    aio.run(body())


def test_code_contexts_and_timeouts(aio: Loop, py: AsyncSandbox) -> None:
    async def body() -> None:
        ctx = await py.create_code_context(cwd="/tmp", language="python")
        assert isinstance(ctx, Context) and ctx.cwd == "/tmp"
        assert (await py.run_code("import os; y = os.getcwd()", context=ctx)).error is None
        assert (await py.run_code("y", context=ctx)).text == "'/tmp'"
        assert (await py.run_code("'y' in dir()")).text == "False"
        assert ctx.id in [c.id for c in await py.list_code_contexts()]
        with pytest.raises(TimeoutException):
            await py.run_code("while True: pass", context=ctx, timeout=2)
        assert (await py.run_code("y", context=ctx)).text == "'/tmp'"
        await py.restart_code_context(ctx)
        assert (await py.run_code("y", context=ctx)).error is not None
        with pytest.raises(AlreadyExistsException):
            await py.create_code_context(context_id=ctx.id)
        await py.interrupt_code_context(ctx)
        await py.remove_code_context(ctx)
        assert ctx.id not in [c.id for c in await py.list_code_contexts()]
        with pytest.raises(NotFoundException):
            await py.restart_code_context(ctx)
        shell = await py.create_code_context(language="bash", cwd="/tmp")
        assert (await py.run_code("echo $PWD", context=shell)).logs.stdout == ["/tmp\n"]
        await py.remove_code_context(shell)
        # The default context keeps its variables past a timed-out cell too.
        await py.run_code("z = 7")
        with pytest.raises(TimeoutException):
            await py.run_code("while True: pass", timeout=2)
        assert (await py.run_code("z")).text == "7"

    aio.run(body())


# -- E2B's defaults ----------------------------------------------------


def test_commands_start_in_home_where_relative_paths_are(aio: Loop, py: AsyncSandbox) -> None:
    async def body() -> None:
        # E2B code writes a file by a relative path, then runs it by one.
        await py.files.write("script.py", "print('ran from home')")
        assert (await py.commands.run("python3 script.py")).stdout == "ran from home\n"
        assert (await py.commands.run("pwd")).stdout == "/root\n"
        assert await py.files.read("/root/script.py") == "print('ran from home')"

    aio.run(body())


def test_e2b_user_and_home_work_on_the_default_image(aio: Loop, py: AsyncSandbox) -> None:
    async def body() -> None:
        assert (await py.commands.run("whoami", user="user")).stdout == "user\n"
        assert (await py.commands.run("pwd", cwd="/home/user")).stdout == "/home/user\n"
        # As E2B's: a command as the user starts in the user's home.
        assert (await py.commands.run("whoami; pwd", user="user")).stdout == "user\n/home/user\n"

    aio.run(body())


def test_output_timestamps_are_nanoseconds(aio: Loop, py: AsyncSandbox) -> None:
    async def body() -> None:
        stamps: List[int] = []

        async def on_stdout(message: Any) -> None:
            stamps.append(message.timestamp)

        await py.run_code("print('stamped')", on_stdout=on_stdout)
        assert len(stamps) == 1 and abs(stamps[0] / 1e9 - time.time()) < 60, stamps

    aio.run(body())


def test_set_integration_names_the_wrapping_library_on_every_call(aio: Loop, py: AsyncSandbox) -> None:
    async def body() -> None:
        before = py._client.channel
        ConnectionConfig.set_integration("my-agent/1.0")
        try:
            assert ConnectionConfig.integration() == "my-agent/1.0"
            again = await AsyncSandbox.connect(py.sandbox_id)
            # A channel of its own, made with the name in its user agent.
            assert again._client.channel is not before
            assert (await again.get_info()).sandbox_id == py.sandbox_id
            assert (await again.commands.run("echo named")).stdout == "named\n"
        finally:
            ConnectionConfig.set_integration(None)
        assert ConnectionConfig.integration() is None
        assert (await AsyncSandbox.connect(py.sandbox_id))._client.channel is before

    aio.run(body())


# -- snapshots ---------------------------------------------------------


def test_a_snapshot_keeps_files_and_variables_for_its_clones(aio: Loop, py: AsyncSandbox) -> None:
    async def body() -> None:
        await py.files.write("/root/snapped.txt", "saved in the snapshot")
        await py.run_code("kept = 6 * 7")
        info = await py.create_snapshot("async-snap")
        assert (info.snapshot_id, info.names, info.source_sandbox_id) == ("async-snap", ["async-snap"], py.sandbox_id)
        assert len(info.content_id) == 64 and info.size_bytes > 0 and info.owner == ""
        assert (info.memory_mb, info.cpu_count) == ((await py.get_info()).memory_mb, 1)
        # E2B's form: the snapshot's id where a template goes; and Airlock's.
        for start in (lambda: AsyncSandbox.create(info.snapshot_id), lambda: AsyncSandbox.create(snapshot="async-snap")):
            async with await start() as clone:
                assert clone.sandbox_id != py.sandbox_id
                assert await clone.files.read("/root/snapped.txt") == "saved in the snapshot"
                assert (await clone.run_code("kept")).text == "42"
                assert (await AsyncSandbox.get_snapshot("async-snap")).sandboxes == 1
        assert (await py.run_code("kept")).text == "42"  # the source runs on
        with pytest.raises(AlreadyExistsException) as taken:
            await py.create_snapshot("async-snap")
        assert taken.value.reason == "ALREADY_EXISTS"
        with pytest.raises(InvalidArgumentException, match="memory"):
            await AsyncSandbox.create_snapshot(py.sandbox_id, mode="filesystem")

    aio.run(body())


def test_snapshots_are_listed_in_pages_and_deleted(aio: Loop, py: AsyncSandbox) -> None:
    async def body() -> None:
        named = await AsyncSandbox.create_snapshot(py.sandbox_id)
        assert named.snapshot_id.startswith("snapshot-")
        mine = {s.snapshot_id async for s in py.list_snapshots()}
        assert {"async-snap", named.snapshot_id} <= mine
        assert {s.snapshot_id async for s in AsyncSandbox.list_snapshots(sandbox_id=py.sandbox_id)} == mine
        assert [s.snapshot_id async for s in AsyncSandbox.list_snapshots(name="async-snap")] == ["async-snap"]
        pages = AsyncSandbox.list_snapshots(sandbox_id=py.sandbox_id, limit=1)
        first = await pages.next_items()
        assert len(first) == 1 and pages.has_next and pages.next_token
        assert len(first + [s async for s in pages]) == len(mine) and not pages.has_next
        with pytest.raises(TypeError, match="next_items"):
            len(pages)
        for name in ("async-snap", named.snapshot_id):
            assert await AsyncSandbox.delete_snapshot(name) is True
            assert await AsyncSandbox.delete_snapshot(name) is False
        assert [s async for s in py.list_snapshots()] == []
        with pytest.raises(NotFoundException) as gone:
            await AsyncSandbox.get_snapshot("async-snap")
        assert gone.value.reason == "NOT_FOUND"
        with pytest.raises(NotFoundException, match="nor is there a snapshot"):
            await AsyncSandbox.create("async-snap")

    aio.run(body())


def test_another_keys_snapshot_does_not_exist_for_you(aio: Loop, tls_server: Server) -> None:
    base = {"host": tls_server.host, "ca_cert": tls_server.ca}
    mine = {**base, "api_key": tls_server.key("async-snap-owner")}
    theirs = {**base, "api_key": tls_server.key("async-snap-other")}

    async def body() -> None:
        async with await AsyncSandbox.create(no_image=True, **mine) as sandbox:
            await sandbox.files.write("/root/private", "mine")
            assert (await sandbox.create_snapshot("async-private")).owner == "async-snap-owner"
            with pytest.raises(NotFoundException):
                await AsyncSandbox.get_snapshot("async-private", **theirs)
            with pytest.raises(NotFoundException):
                await AsyncSandbox.create(snapshot="async-private", **theirs)
            assert await AsyncSandbox.delete_snapshot("async-private", **theirs) is False
            assert [s async for s in AsyncSandbox.list_snapshots(**theirs)] == []
            with pytest.raises(SandboxNotFoundException):
                await AsyncSandbox.create_snapshot(sandbox.sandbox_id, "theirs", **theirs)
        assert await AsyncSandbox.delete_snapshot("async-private", **mine) is True

    aio.run(body())


# -- templates ---------------------------------------------------------


def test_a_template_built_from_a_context_starts_sandboxes(aio: Loop, tls_server: Server, tmp_path: Path) -> None:
    # A key's templates and its build cache are its own, in the server's
    # private data directory.
    conn = {"host": tls_server.host, "api_key": tls_server.key("async-templates"), "ca_cert": tls_server.ca}
    (tmp_path / "hello.txt").write_text("from the async suite's context")
    (tmp_path / "Dockerfile").write_text(TEMPLATE_FILE)
    (tmp_path / "left-out.bin").write_bytes(os.urandom(1024))
    logs: List[LogEntry] = []

    async def collect(entry: LogEntry) -> None:  # a coroutine function, called in turn
        logs.append(entry)

    async def body() -> None:
        template = AsyncTemplate(file_context_path=tmp_path, file_ignore_patterns=["*.bin"]).from_dockerfile("Dockerfile")
        info = await AsyncTemplate.build(template, "async-template", on_build_logs=collect, **conn)
        assert (info.name, info.template_id, info.image, info.owner) == ("async-template",) * 2 + ("default", "async-templates")
        assert isinstance(logs[0], LogEntryStart) and isinstance(logs[-1], LogEntryEnd)
        [step] = [entry for entry in logs if entry.kind == "step"]
        assert step.message == "[1/1] COPY . /srv/" and not step.cached
        assert any(entry.kind == "phase" for entry in logs)
        assert await AsyncTemplate.exists("async-template", **conn)
        assert "async-template" in [t.name for t in await AsyncTemplate.list(**conn)]
        async with await AsyncSandbox.create("async-template", **conn) as sandbox:
            assert (await sandbox.get_info()).template_id == "async-template"
            assert await sandbox.files.read("/tmp/started") == "from the async suite's context"
            assert await sandbox.files.exists("/srv/Dockerfile")
            assert not await sandbox.files.exists("/srv/left-out.bin")
        # The same file and context from E2B's builder: every step comes
        # from the cache.
        built = (
            AsyncTemplate(file_context_path=tmp_path, file_ignore_patterns=["*.bin"])
            .from_base_image()
            .copy(".", "/srv/")
            .set_start_cmd("sh -c 'cp /srv/hello.txt /tmp/started; exec sleep infinity'", wait_for_file("/tmp/started"))
        )
        assert built.to_dockerfile() == TEMPLATE_FILE
        again: List[LogEntry] = []
        await AsyncTemplate.build(built, "async-template", on_build_logs=again.append, **conn)
        steps = [entry for entry in again if entry.kind == "step"]
        assert steps and all(entry.cached for entry in steps), steps
        assert await AsyncTemplate.delete("async-template", **conn) is True
        assert await AsyncTemplate.delete("async-template", **conn) is False
        assert not await AsyncTemplate.exists("async-template", **conn)

    aio.run(body())


def test_a_template_file_the_server_cannot_read_names_its_line(aio: Loop) -> None:
    async def body() -> None:
        with pytest.raises(InvalidArgumentException, match="line 2") as bad:
            await AsyncTemplate.build(AsyncTemplate().from_dockerfile("FROM default\nCMD python3\n"), "async-bad")
        assert bad.value.field == "header.file"
        with pytest.raises(InvalidArgumentException, match="tags"):
            await AsyncTemplate.build(AsyncTemplate().from_base_image(), "async-bad", tags=["v1"])

    aio.run(body())


# -- network -----------------------------------------------------------


def test_network_rules_and_audit(aio: Loop) -> None:
    async def body() -> None:
        async with await AsyncSandbox.create(
            no_image=True,
            allow_net=["a.example"],
            secrets=[Secret("TOKEN", "s3cret", ["a.example"])],
        ) as net:
            assert await net.network.rules() == ["a.example"]
            assert (await net.network.policy()).secrets == {"TOKEN": ["a.example"]}
            assert await net.network.allow("b.example:443") == ["a.example", "b.example:443"]
            assert await net.network.deny("a.example") == ["b.example:443"]
            assert (await net.commands.run("echo $TOKEN")).stdout.strip() != "s3cret"
            await net.commands.run("nslookup refused.example 2>&1 || true")
            records = await net.network.audit()
            refused = [r for r in records if r.name.startswith("refused.example")]
            assert refused and not refused[0].allowed and refused[0].verdict.startswith("refused")
            with pytest.raises(InvalidArgumentException) as bad:
                await net.network.allow("*.*.bad")
            assert bad.value.field is not None
            assert await net.network.replace(["c.example"]) == ["c.example"]

    aio.run(body())


def test_no_network_and_bad_arguments_are_named(aio: Loop, sbx: AsyncSandbox) -> None:
    async def body() -> None:
        with pytest.raises(SandboxException) as none:
            await sbx.network.rules()
        assert none.value.reason == "NO_NETWORK"
        # Since API revision 3 a sandbox without network has an audit: its
        # ingress records alone, none here (test_ingress.py checks them).
        assert await sbx.network.audit() == []
        with pytest.raises(InvalidArgumentException) as bad:
            await AsyncSandbox.create(no_image=True, memory_mb=10)
        assert bad.value.field == "memory_mib"  # the API's field
        with pytest.raises(InvalidArgumentException):
            await AsyncSandbox.create(no_image=True, allow_internet_access=True)
        with pytest.raises(InvalidArgumentException):
            await AsyncSandbox.create(no_image=True, vcpus=1000)
        with pytest.raises(NotFoundException) as gone:
            await AsyncSandbox.connect("sandbox-nobody")
        assert gone.value.reason == "SANDBOX_NOT_FOUND"

    aio.run(body())


# -- servers -----------------------------------------------------------


def test_the_local_server_is_started_on_demand(aio: Loop, tmp_path: Path) -> None:
    socket = str(tmp_path / "daemon.sock")
    env_before = dict(os.environ)
    try:
        os.environ["AIRLOCK_STATE_DIR"] = str(tmp_path)
        os.environ["AIRLOCK_SAVED_DIR"] = str(tmp_path / "saved")
        os.environ["AIRLOCK_SERVER_DIR"] = str(tmp_path / "server")
        from .conftest import airlock_bin

        # Started from the event loop's executor: the loop never blocks.
        page = AsyncSandbox.list(socket=socket, airlock_bin=airlock_bin())
        assert aio.run(page.next_items()) == []
        log = (tmp_path / "daemon.log").read_text()
        assert "serving on the Unix socket" in log
        # As the CLI's does, it serves the HTTP ingress on a loopback port.
        assert "airlock: ingress on 127.0.0.1:" in log
    finally:
        os.environ.clear()
        os.environ.update(env_before)
        from .conftest import _processes_mentioning

        for pid in _processes_mentioning(socket):
            os.kill(pid, 15)


def test_a_remote_server_over_tls_with_a_key(aio: Loop, tls_server: Server) -> None:
    key = tls_server.key("async-remote", "--max-sandboxes", "1")
    conn = {"host": tls_server.host, "api_key": key, "ca_cert": tls_server.ca}

    async def body() -> None:
        async with await AsyncSandbox.create(no_image=True, **conn) as remote:
            assert (await remote.commands.run("hostname")).stdout.strip() == remote.sandbox_id
            await remote.files.write("/tmp/r", "over tls")
            assert await remote.files.read("/tmp/r") == "over tls"
            assert [i.sandbox_id async for i in AsyncSandbox.list(**conn)] == [remote.sandbox_id]
            with pytest.raises(RateLimitException) as quota:
                await AsyncSandbox.create(no_image=True, **conn)
            assert quota.value.reason == "QUOTA_EXCEEDED"
        with pytest.raises(AuthenticationException):
            await AsyncSandbox.list(host=tls_server.host, api_key="ak_wrong", ca_cert=tls_server.ca).next_items()
        with pytest.raises(SandboxException):
            await AsyncSandbox.list(host=tls_server.host, api_key=key).next_items()  # no CA: untrusted

    aio.run(body())


def test_the_usage_ledger_bills_a_keys_sandboxes(aio: Loop, tls_server: Server) -> None:
    key = tls_server.key("async-usage")
    conn = {"host": tls_server.host, "api_key": key, "ca_cert": tls_server.ca}

    async def body() -> None:
        sandbox = await AsyncSandbox.create(no_image=True, **conn)
        await sandbox.commands.run("sleep 1")
        assert await sandbox.pause() is True
        await asyncio.sleep(1)
        await sandbox.resume()
        assert await sandbox.kill() is True
        [row] = await AsyncUsage.query(**conn)
        assert row.sandbox_id == sandbox.sandbox_id and row.key == "async-usage"
        assert row.running_ms >= 1000 and row.paused_ms >= 900 and row.on_disk_ms == 0
        assert row.cpu_count == 1 and row.vcpu_ms == row.running_ms
        assert row.vcpu_seconds == row.vcpu_ms / 1000
        assert row.memory_mib_ms == row.memory_mb * (row.running_ms + row.paused_ms)
        assert row.memory_gib_seconds == row.memory_mib_ms / 1024 / 1000
        assert row.created_at is not None and row.ended_at is not None
        [by_key] = await AsyncUsage.query(by="key", **conn)
        assert (by_key.key, by_key.sandboxes, by_key.running_ms) == ("async-usage", 1, row.running_ms)
        days = await AsyncUsage.query(by="day", since=timedelta(days=1), **conn)
        assert datetime.now(timezone.utc).strftime("%Y-%m-%d") in [day.day for day in days]
        assert sum(day.running_ms for day in days) == row.running_ms
        assert await AsyncUsage.query(since=datetime.now(timezone.utc) + timedelta(hours=2), **conn) == []
        with pytest.raises(AuthenticationException) as other:
            await AsyncUsage.query(key="someone-else", **conn)
        assert other.value.reason == "OWNER_ONLY"
        with pytest.raises(InvalidArgumentException) as bad:
            await AsyncUsage.query(by="week", **conn)  # type: ignore[arg-type]
        assert bad.value.field == "by"

    aio.run(body())
