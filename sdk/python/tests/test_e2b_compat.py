"""Issue #52's items on real sandboxes, blocking and asyncio: what E2B code
relies on, each as E2B's SDK does it (or refused with what to do). One
Debian sandbox per client: commands under ``bash -l``, ``kill`` of an
exited command, a watched write's name, relative paths, a plain value's
result, a traceback, IPython's shell lines, E2B's default user and home
refused with what to do, E2B's exception names, the instance ``connect``
and ``beta_pause``, ``template_id``, and a listing without ended
sandboxes. The refusals of what an image lacks are checked on the busybox
environment, which never has E2B's account or tools."""

from __future__ import annotations

import asyncio
import time
from typing import List

import pytest

from airlock import (
    AsyncSandbox,
    CommandExitException,
    FileNotFoundException,
    FilesystemEvent,
    FilesystemEventType,
    Sandbox,
    SandboxNotFoundException,
    SandboxState,
)

from .conftest import Loop

BASH_ONLY = '[[ "$0" == bash ]] && echo "bash $(shopt -q login_shell && echo login)"'


def test_blocking_client_as_e2b() -> None:
    sbx = Sandbox.create(metadata={"suite": "e2b-compat"})
    try:
        info = sbx.get_info()
        assert info.template_id == "default" and info.end_at is not None
        lifetime = (info.end_at - info.started_at).total_seconds()
        assert 240 < lifetime <= 301, lifetime

        assert sbx.commands.run(BASH_ONLY).stdout == "bash login\n"
        done = sbx.commands.run("exit 0", background=True)
        done.wait()
        assert done.kill() is False and sbx.commands.kill(done.pid) is False
        listed = [p for p in sbx.commands.list() if p.pid == done.pid]
        assert listed and listed[0].cmd == "/bin/bash" and listed[0].args == ["-l", "-c", "exit 0"]

        events: List[FilesystemEvent] = []
        watch = sbx.files.watch_dir("/root", on_event=events.append)
        sbx.files.write("notes.txt", "relative")  # E2B: from the home directory
        assert sbx.files.read("/root/notes.txt") == "relative"
        deadline = time.monotonic() + 10
        while len(events) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        watch.stop()
        assert [(e.name, e.type) for e in events] == [
            ("notes.txt", FilesystemEventType.CREATE),
            ("notes.txt", FilesystemEventType.WRITE),
        ]

        value = sbx.run_code("6 * 7")
        assert value.text == "42" and value.results[0].json is None
        shown = sbx.run_code("class J:\n    def _repr_json_(self): return {'a': 1}\nJ()")
        assert shown.results[0].json == {"a": 1}
        failed = sbx.run_code("1/0")
        assert failed.error is not None and "\n\n" not in failed.error.traceback
        assert failed.error.traceback.endswith("ZeroDivisionError: division by zero")
        magic = sbx.run_code("!echo from the shell && echo twice\nanswer = 41 + 1\nanswer")
        assert "".join(magic.logs.stdout) == "from the shell\ntwice\n" and magic.text == "42"

        with pytest.raises(FileNotFoundException):
            sbx.files.read("/no/such/file")

        assert sbx.beta_pause() is True and sbx.get_info().state == SandboxState.PAUSED
        assert sbx.connect() is sbx and sbx.get_info().state == SandboxState.RUNNING
    finally:
        sbx.kill()
    listed_ids = [i.sandbox_id for i in Sandbox.list(metadata={"suite": "e2b-compat"})]
    assert sbx.sandbox_id not in listed_ids
    with pytest.raises(SandboxNotFoundException):
        sbx.files.read("/root/notes.txt")
    with pytest.raises(TypeError, match="no_such_kw"):
        Sandbox(no_such_kw=1)


def test_what_an_image_lacks_is_refused_saying_what_to_do() -> None:
    """E2B's account, home and tools, on the busybox environment (which has
    none of them, whatever the Debian images get)."""
    with Sandbox.create(no_image=True) as sbx:
        assert sbx.commands.run('echo "$0"').stdout == "/bin/sh\n"  # no bash: sh runs it
        with pytest.raises(FileNotFoundException, match="user not found.*leave user= out"):
            sbx.commands.run("id", user="user")
        with pytest.raises(FileNotFoundException, match="/home/user.*root"):
            sbx.commands.run("pwd", cwd="/home/user")
        for tool in ("pip", "curl"):
            with pytest.raises(CommandExitException, match=f"image has no {tool}"):
                sbx.commands.run(f"{tool} --version")


def test_asyncio_client_as_e2b(aio: Loop) -> None:
    async def body() -> None:
        sbx = await AsyncSandbox.create(metadata={"suite": "e2b-compat-async"})
        try:
            assert (await sbx.get_info()).template_id == "default"
            assert (await sbx.commands.run(BASH_ONLY)).stdout == "bash login\n"
            done = await sbx.commands.run("exit 0", background=True)
            await done.wait()
            assert await done.kill() is False and await sbx.commands.kill(done.pid) is False

            events: List[FilesystemEvent] = []
            watch = await sbx.files.watch_dir("/root", on_event=events.append)
            await sbx.files.write("notes.txt", "relative")
            assert await sbx.files.read("/root/notes.txt") == "relative"
            for _ in range(100):
                if len(events) >= 2:
                    break
                await asyncio.sleep(0.1)
            await watch.stop()
            assert [(e.name, e.type) for e in events] == [
                ("notes.txt", FilesystemEventType.CREATE),
                ("notes.txt", FilesystemEventType.WRITE),
            ]

            value = await sbx.run_code("6 * 7")
            assert value.text == "42" and value.results[0].json is None
            failed = await sbx.run_code("1/0")
            assert failed.error is not None and "\n\n" not in failed.error.traceback
            magic = await sbx.run_code("!echo from the shell\n'done'")
            assert "".join(magic.logs.stdout) == "from the shell\n" and magic.text == "'done'"

            with pytest.raises(FileNotFoundException):
                await sbx.files.read("/no/such/file")

            assert await sbx.beta_pause() is True
            assert await sbx.connect() is sbx
            assert (await sbx.get_info()).state == SandboxState.RUNNING
        finally:
            await sbx.kill()
        listed = [i.sandbox_id async for i in AsyncSandbox.list(metadata={"suite": "e2b-compat-async"})]
        assert sbx.sandbox_id not in listed
        with pytest.raises(SandboxNotFoundException):
            await sbx.files.read("/root/notes.txt")

    aio.run(body())
